// recompute() (activation checkpointing): the same gradients as without it, parameters
// captured by the function receive theirs, nothing is recorded inside the forward, and it
// nests.
#include <gtest/gtest.h>

#include <cfloat>

#include "autograd_test_util.h"

namespace gpumix {
namespace {

using test::random_var;

// Gradients of an fp32 computation done twice the same way agree to fp32 rounding: a few
// ulps relative, and against the scale of the whole gradient for elements that cancel.
::testing::AssertionResult same_grads(const std::string& what, const std::vector<Var>& a,
                                      const std::vector<Var>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].grad().defined() != b[i].grad().defined())
      return ::testing::AssertionFailure() << what << ": " << a[i].name() << " has a gradient in only one run";
    if (!a[i].grad().defined()) continue;
    const std::vector<float> ga = a[i].grad().to_vector();
    const std::vector<double> gb = test::to_double(b[i].grad().to_vector());
    double scale = 0;
    for (double v : gb) scale = std::max(scale, std::fabs(v));
    const auto r = test::all_close((what + ": " + a[i].name()).c_str(), ga, gb, 4 * FLT_EPSILON,
                                   4 * FLT_EPSILON * scale);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

struct ChainRun {
  std::vector<Var> params;
  Var x;  // the blocks' input, requires a gradient
  size_t tape_after_forward = 0;
};

// A chain of `blocks` tiny transformer blocks on x, then a projection loss.
// mode 0: plain; 1: each block through recompute; 2: one recompute around a chain of
// recomputed blocks (nested).
ChainRun run_chain(int blocks, int mode) {
  test::TinyConfig c;
  c.L = blocks;
  ChainRun run;
  run.params = test::tiny_params(c, 77);
  run.x = random_var({2, 5, c.C}, 78, "x");
  const Var* params = run.params.data();
  auto chain = [params, blocks](const Var& in, bool checkpoint) {
    Var h = in;
    for (int l = 0; l < blocks; ++l) {
      const Var* bp = params + 2 + l * test::kBlockParams;
      if (checkpoint)
        h = recompute([bp](const std::vector<Var>& v) { return test::tiny_block(v[0], bp, 2); }, {h});
      else
        h = test::tiny_block(h, bp, 2);
    }
    return h;
  };
  Var y;
  if (mode == 0) y = chain(run.x, false);
  if (mode == 1) y = chain(run.x, true);
  if (mode == 2)
    y = recompute([chain](const std::vector<Var>& v) { return chain(v[0], true); }, {run.x});
  run.tape_after_forward = tape_size();
  backward(y, test::random_tensor(y.value().shape(), 79));  // L = sum(r * y)
  return run;
}

TEST(Recompute, SameGradientsAsWithout) {
  const ChainRun plain = run_chain(1, 0);
  const ChainRun ckpt = run_chain(1, 1);
  EXPECT_TRUE(same_grads("params", ckpt.params, plain.params));
  EXPECT_TRUE(same_grads("x", {ckpt.x}, {plain.x}));
  EXPECT_EQ(tape_size(), 0u);
}

TEST(Recompute, ForwardRecordsOneNodeOnly) {
  const ChainRun plain = run_chain(1, 0);
  const ChainRun ckpt = run_chain(1, 1);
  EXPECT_EQ(ckpt.tape_after_forward, 1u);
  EXPECT_GT(plain.tape_after_forward, 5u);  // layernorms, linears, attention, gelu, adds

  // Inside fn: recording is off during the forward and on during the backward's re-run.
  std::vector<bool> enabled;
  std::vector<size_t> sizes;
  Var w = random_var({3, 3}, 80, "w");
  Var x = random_var({2, 3}, 81, "x");
  Var y = recompute(
      [&](const std::vector<Var>& v) {
        enabled.push_back(grad_enabled());
        Var out = gelu(linear(v[0], w, Var()));
        sizes.push_back(tape_size());
        return out;
      },
      {x});
  ASSERT_EQ(enabled.size(), 1u);
  EXPECT_FALSE(enabled[0]);
  EXPECT_EQ(sizes[0], 0u);  // nothing recorded by the forward run
  EXPECT_EQ(tape_size(), 1u);
  EXPECT_TRUE(y.requires_grad());
  backward(y, Tensor::full(y.value().shape(), 1.0f));
  ASSERT_EQ(enabled.size(), 2u);
  EXPECT_TRUE(enabled[1]);
  EXPECT_EQ(sizes[1], 2u);  // the re-run records linear + gelu on its own sub-tape
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(x.grad().defined());
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_TRUE(grad_enabled());
}

TEST(Recompute, CapturedParametersReceiveGradientsWhenTheInputNeedsNone) {
  // The input is data (no gradient); the function's parameters still get theirs.
  test::TinyConfig c;
  c.L = 1;
  auto run = [&](bool checkpoint) {
    std::vector<Var> p = test::tiny_params(c, 90);
    Var x = random_var({2, 3, c.C}, 91, "x", -1, 1, false);
    const Var* bp = &p[2];
    Var y = checkpoint ? recompute([bp](const std::vector<Var>& v) { return test::tiny_block(v[0], bp, 2); }, {x})
                       : test::tiny_block(x, bp, 2);
    backward(y, test::random_tensor(y.value().shape(), 92));
    EXPECT_FALSE(x.grad().defined());
    return std::vector<Var>(p.begin() + 2, p.begin() + 2 + test::kBlockParams);
  };
  const std::vector<Var> with = run(true), without = run(false);
  for (const Var& v : with) EXPECT_TRUE(v.grad().defined()) << v.name();
  EXPECT_TRUE(same_grads("block params", with, without));
}

TEST(Recompute, GradientsFlowToUpstreamVariables) {
  // x comes from a recorded linear of x0: recompute hands its input gradient back to the
  // tape, which carries it on to x0 and w0.
  auto run = [](bool checkpoint) {
    Var x0 = random_var({4, 6}, 93, "x0"), w0 = random_var({6, 6}, 94, "w0");
    Var w1 = random_var({5, 6}, 95, "w1");
    Var x = linear(x0, w0, Var());
    auto fn = [w1](const std::vector<Var>& v) { return gelu(linear(gelu(v[0]), w1, Var())); };
    Var y = checkpoint ? recompute(fn, {x}) : fn({x});
    backward(y, test::random_tensor(y.value().shape(), 96));
    return std::vector<Var>{x0, w0, w1};
  };
  EXPECT_TRUE(same_grads("upstream", run(true), run(false)));
}

TEST(Recompute, ChainOfThreeBlocks) {
  const ChainRun plain = run_chain(3, 0);
  const ChainRun ckpt = run_chain(3, 1);
  EXPECT_EQ(ckpt.tape_after_forward, 3u);
  EXPECT_TRUE(same_grads("params", ckpt.params, plain.params));
  EXPECT_TRUE(same_grads("x", {ckpt.x}, {plain.x}));
}

TEST(Recompute, NestedInAChainOfThreeBlocks) {
  // recompute(chain of 3 recomputed blocks): the inner recomputes run inside the outer
  // one's backward, each on its own sub-tape.
  const ChainRun plain = run_chain(3, 0);
  const ChainRun nested = run_chain(3, 2);
  EXPECT_EQ(nested.tape_after_forward, 1u);
  EXPECT_TRUE(same_grads("params", nested.params, plain.params));
  EXPECT_TRUE(same_grads("x", {nested.x}, {plain.x}));
  EXPECT_EQ(tape_size(), 0u);
}

TEST(Recompute, GradientCheckThroughRecompute) {
  test::TinyConfig c;
  c.L = 1;
  std::vector<Var> p = test::tiny_params(c, 97);
  const Var* bp = &p[2];
  std::vector<Var> in = {random_var({1, 4, c.C}, 98, "x")};
  const GradCheckResult r = check_gradients(
      [bp](const std::vector<Var>& v) {
        return recompute([bp](const std::vector<Var>& u) { return test::tiny_block(u[0], bp, 2); }, v);
      },
      in, test::check_all());
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Recompute, UnderNoGradRecordsNothing) {
  Var x = random_var({2, 3}, 99, "x");
  NoGradGuard guard;
  Var y = recompute([](const std::vector<Var>& v) { return gelu(v[0]); }, {x});
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_FALSE(y.requires_grad());
}

TEST(Recompute, InTheTinyModel) {
  const test::TinyConfig c;
  Tensor tokens, targets;
  test::tiny_batch(c, 2, 6, 55, &tokens, &targets);
  std::vector<Var> a = test::tiny_params(c, 56), b = test::tiny_params(c, 56);
  Var la = test::tiny_forward(a, tokens, targets, c, false);
  backward(la);
  Var lb = test::tiny_forward(b, tokens, targets, c, true);
  EXPECT_EQ(la.value().item(), lb.value().item());
  backward(lb);
  EXPECT_TRUE(same_grads("tiny model", b, a));
}

}  // namespace
}  // namespace gpumix
