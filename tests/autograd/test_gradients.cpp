// Every differentiable function through the finite-difference gradient checker, every
// element of every input probed, in f32 and through the bf16 path; and a deliberately
// wrong backward, to show the checker fails when a gradient is wrong. The checker's
// tolerance (GradCheckOptions: atol 2e-3, rtol 2e-2 at step 1e-2) is the one it documents
// for central differences of fp32 forward passes; in bf16 it adds
// bf16_roundings * 2^-8 * (|numeric| + rms) (autograd/gradcheck.h), bf16_roundings counted
// per test from the ops on the path (2 per op: its output and its input gradient).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd_test_util.h"
#include "core/ops.h"

namespace gpumix {
namespace {

using test::bf16_param;
using test::bf16_var;
using test::check_all;
using test::random_var;

::testing::AssertionResult passes(const GradCheckResult& r) {
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gradient check failed, worst excess " << r.worst_excess
                                       << " x the allowance; worst element per input:\n"
                                       << r.report;
}

TEST(GradCheck, LinearWithBias) {
  std::vector<Var> in = {random_var({2, 3, 5}, 1, "x"), random_var({4, 5}, 2, "w"),
                         random_var({4}, 3, "b")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return linear(v[0], v[1], v[2]); }, in, check_all())));
  EXPECT_EQ(tape_size(), 0u);
}

TEST(GradCheck, LinearWithoutBias) {
  std::vector<Var> in = {random_var({7, 3}, 4, "x"), random_var({5, 3}, 5, "w")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return linear(v[0], v[1], Var()); }, in, check_all())));
}

TEST(GradCheck, LinearParametersOnly) {
  // The input needs no gradient (e.g. data): only w and b are checked and filled.
  std::vector<Var> in = {random_var({3, 4}, 6, "x", -1, 1, false), random_var({2, 4}, 7, "w"),
                         random_var({2}, 8, "b")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return linear(v[0], v[1], v[2]); }, in, check_all())));
  EXPECT_FALSE(in[0].grad().defined());
}

TEST(GradCheck, MlpFusedAndUnfused) {
  // Hidden width 8 takes the fused ops (matmul_gelu_forward, matmul_backward_dgelu), 6 the
  // three separate functions; the input's and every parameter's gradient is checked.
  for (int64_t H : {8, 6}) {
    std::vector<Var> in = {random_var({2, 3, 5}, 40, "x", -2, 2), random_var({H, 5}, 41, "w_fc"),
                           random_var({H}, 42, "b_fc"), random_var({4, H}, 43, "w_proj"),
                           random_var({4}, 44, "b_proj")};
    EXPECT_TRUE(passes(check_gradients(
        [](const std::vector<Var>& v) { return mlp(v[0], v[1], v[2], v[3], v[4]); }, in,
        check_all())))
        << "H " << H;
  }
}

// On the CPU the fused MLP runs the passes it replaces: bitwise the unfused values and
// gradients, in f32 and bf16; and first gradient writes (beta 0, no zero-fill) give
// bitwise what zero-fill + accumulate gave, while later contributions still accumulate (x
// feeds two MLPs here).
TEST(Mlp, BitwiseTheUnfusedFunctionsOnTheCpu) {
  for (DType dt : {DType::f32, DType::bf16}) {
    auto make = [dt](const Shape& s, uint32_t seed, const char* name, bool param) {
      Tensor v = random_var(s, seed, name, -1, 1).value().to(dt);
      return param ? Var::parameter(v, name) : Var(v, true, name);
    };
    std::vector<Var> fused = {make({3, 6}, 50, "x", false), make({16, 6}, 51, "w_fc", true),
                              make({16}, 52, "b_fc", true), make({6, 16}, 53, "w_proj", true),
                              make({6}, 54, "b_proj", true)};
    std::vector<Var> plain;
    for (const Var& v : fused) plain.push_back(v.fresh(v.value().clone()));
    auto run = [](const std::vector<Var>& v, bool use_fused) {
      auto f = [&](const Var& x) {
        return use_fused ? mlp(x, v[1], v[2], v[3], v[4])
                         : linear(gelu(linear(x, v[1], v[2])), v[3], v[4]);
      };
      Var y = add(f(v[0]), f(v[0]));
      backward(y, Tensor::full(y.value().shape(), 0.5f, y.value().dtype()));
      return y;
    };
    const Var yf = run(fused, true), yp = run(plain, false);
    EXPECT_EQ(yf.value().to(DType::f32).to_vector(), yp.value().to(DType::f32).to_vector());
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_EQ(fused[i].grad().to(DType::f32).to_vector(), plain[i].grad().to(DType::f32).to_vector())
          << fused[i].name() << " " << dtype_name(dt);
  }
}

TEST(GradCheck, Layernorm) {
  std::vector<Var> in = {random_var({2, 3, 8}, 9, "x", -2, 2), random_var({8}, 10, "w", 0.5f, 1.5f),
                         random_var({8}, 11, "b")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return layernorm(v[0], v[1], v[2]); }, in, check_all())));
}

TEST(GradCheck, Gelu) {
  std::vector<Var> in = {random_var({3, 7}, 12, "x", -3, 3)};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return gelu(v[0]); }, in,
                                     check_all())));
}

TEST(GradCheck, Attention) {
  for (int NH : {1, 2})
    for (int T : {1, 2, 5, 7}) {
      SCOPED_TRACE("NH " + std::to_string(NH) + ", T " + std::to_string(T));
      const int B = 2, C = 8;
      std::vector<Var> in = {random_var({B, T, 3 * C}, 100 + T * 10 + NH, "qkv")};
      EXPECT_TRUE(passes(check_gradients(
          [NH](const std::vector<Var>& v) { return attention(v[0], NH); }, in, check_all())));
    }
}

TEST(GradCheck, Add) {
  std::vector<Var> in = {random_var({2, 3}, 13, "a"), random_var({2, 3}, 14, "b")};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return add(v[0], v[1]); },
                                     in, check_all())));
  // The same variable on both sides receives both gradients.
  std::vector<Var> same = {random_var({4}, 15, "a")};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return add(v[0], v[0]); },
                                     same, check_all())));
  // One side without a gradient.
  std::vector<Var> half = {random_var({4}, 16, "a"), random_var({4}, 17, "const", -1, 1, false)};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return add(v[0], v[1]); },
                                     half, check_all())));
}

TEST(GradCheck, Embedding) {
  // Repeated tokens accumulate into one row of wte; wpe has more rows (Tmax 7) than T = 5:
  // the extra rows must get zero gradients.
  Tensor tokens = Tensor::from_vector(std::vector<int32_t>{1, 3, 1, 1, 0, 4, 3, 3, 2, 1}, {2, 5});
  std::vector<Var> in = {random_var({6, 4}, 18, "wte"), random_var({7, 4}, 19, "wpe")};
  EXPECT_TRUE(passes(check_gradients(
      [tokens](const std::vector<Var>& v) { return embedding(tokens, v[0], v[1]); }, in,
      check_all())));
  // Only one table needing a gradient.
  std::vector<Var> wte_only = {random_var({6, 4}, 20, "wte"),
                               random_var({7, 4}, 21, "wpe", -1, 1, false)};
  EXPECT_TRUE(passes(check_gradients(
      [tokens](const std::vector<Var>& v) { return embedding(tokens, v[0], v[1]); }, wte_only,
      check_all())));
  EXPECT_FALSE(wte_only[1].grad().defined());
}

TEST(GradCheck, CrossEntropy) {
  // (B, T, V) logits; rows with the ignore index contribute neither loss nor gradient.
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{2, -1, 0, 6, -1, 5}, {6});
  for (float scale : {1.0f, 1.0f / 4.0f, 2.5f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    std::vector<Var> in = {random_var({2, 3, 7}, 22, "logits", -2, 2)};
    EXPECT_TRUE(passes(check_gradients(
        [targets, scale](const std::vector<Var>& v) { return cross_entropy(v[0], targets, scale); },
        in, check_all())));
    // Ignored rows get exactly zero gradient.
    const std::vector<float> g = in[0].grad().to_vector();
    for (int row : {1, 4})
      for (int k = 0; k < 7; ++k) EXPECT_EQ(g[row * 7 + k], 0.0f) << "row " << row;
  }
  // Another ignore index (a real class id): targets equal to 3 are skipped.
  Tensor t3 = Tensor::from_vector(std::vector<int32_t>{3, 1, 3, 0}, {4});
  std::vector<Var> in = {random_var({4, 5}, 23, "logits", -2, 2)};
  EXPECT_TRUE(passes(check_gradients(
      [t3](const std::vector<Var>& v) { return cross_entropy(v[0], t3, 0.5f, 3); }, in, check_all())));
}

TEST(CrossEntropy, ValueByHand) {
  // scale * sum over non-ignored rows of (logsumexp(row) - row[target]).
  const std::vector<float> lv = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 1.0f, -3.0f, 0.25f, 0.0f};
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{2, -1, 1}, {3});
  Var logits(Tensor::from_vector(lv, {3, 3}), true, "logits");
  Var loss = cross_entropy(logits, targets, 0.5f);
  double ref = 0;
  for (int r : {0, 2}) {
    double s = 0;
    for (int k = 0; k < 3; ++k) s += std::exp((double)lv[r * 3 + k]);
    ref += std::log(s) - lv[r * 3 + (r == 0 ? 2 : 1)];
  }
  ref *= 0.5;
  EXPECT_EQ(loss.value().numel(), 1);
  EXPECT_TRUE(test::all_close("loss", loss.value().to_vector(), {ref}, 8 * FLT_EPSILON, 8 * FLT_EPSILON));
  clear_tape();
}

TEST(GradCheck, ComposedTwoLayerModel) {
  // Embedding, two transformer blocks (layernorm, linear, attention, gelu, residual adds),
  // final layernorm, head, cross-entropy with an ignored position: every parameter.
  const test::TinyConfig c;
  Tensor tokens, targets;
  test::tiny_batch(c, 2, 5, 31, &tokens, &targets);
  std::vector<Var> params = test::tiny_params(c, 32);
  const GradCheckResult r = check_gradients(
      [&](const std::vector<Var>& p) { return test::tiny_forward(p, tokens, targets, c); }, params,
      check_all());
  EXPECT_TRUE(passes(r));
  for (const Var& p : params) EXPECT_TRUE(p.grad().defined()) << p.name();
}

TEST(GradCheck, ComposedBlockWithRespectToItsInput) {
  const test::TinyConfig c;
  std::vector<Var> params = test::tiny_params(c, 33);
  std::vector<Var> in = {random_var({2, 5, c.C}, 34, "x")};
  const Var* bp = &params[2];
  EXPECT_TRUE(passes(check_gradients(
      [bp](const std::vector<Var>& v) { return test::tiny_block(v[0], bp, 2); }, in, check_all())));
}

// ---- the bf16 path: bf16 values and activation gradients, fp32 parameter gradients ---------------

// The checker's options for a path of `ops` differentiable functions, `extra` further bf16
// roundings (fused attention may round its probabilities, forward and backward; residual
// gradients are rounded once more where they meet).
// Single ops probe every element; compositions the checker's default sample.
GradCheckOptions bf16_check(int ops, int extra = 0) {
  GradCheckOptions o = ops == 1 ? check_all() : GradCheckOptions{};
  o.bf16_roundings = 2 * ops + extra;
  return o;
}

TEST(GradCheckBf16, Linear) {
  std::vector<Var> in = {bf16_var({2, 3, 5}, 1, "x"), bf16_param({4, 5}, 2, "w"),
                         bf16_param({4}, 3, "b")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return linear(v[0], v[1], v[2]); }, in, bf16_check(1))));
  EXPECT_EQ(in[0].grad().dtype(), DType::bf16);  // an activation's gradient: its value's dtype
  EXPECT_EQ(in[1].grad().dtype(), DType::f32);   // a parameter's: fp32
  EXPECT_EQ(in[2].grad().dtype(), DType::f32);
  std::vector<Var> no_bias = {bf16_var({7, 3}, 4, "x"), bf16_param({5, 3}, 5, "w")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return linear(v[0], v[1], Var()); }, no_bias, bf16_check(1))));
}

TEST(GradCheckBf16, LayernormGeluAdd) {
  std::vector<Var> ln = {bf16_var({2, 3, 8}, 9, "x", -2, 2), bf16_param({8}, 10, "w", 0.5f, 1.5f),
                         bf16_param({8}, 11, "b")};
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return layernorm(v[0], v[1], v[2]); }, ln, bf16_check(1))));
  EXPECT_EQ(ln[1].grad().dtype(), DType::f32);
  std::vector<Var> g = {bf16_var({3, 7}, 12, "x", -3, 3)};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return gelu(v[0]); }, g,
                                     bf16_check(1))));
  std::vector<Var> a = {bf16_var({2, 3}, 13, "a"), bf16_var({2, 3}, 14, "b")};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return add(v[0], v[1]); }, a,
                                     bf16_check(1))));
  // An fp32 parameter gradient receives bf16 gradients, accumulated in fp32.
  std::vector<Var> mixed = {bf16_param({2, 3}, 15, "p"), bf16_var({2, 3}, 16, "x")};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return add(v[0], v[1]); },
                                     mixed, bf16_check(1))));
  EXPECT_EQ(mixed[0].grad().dtype(), DType::f32);
}

TEST(GradCheckBf16, Attention) {
  for (int T : {1, 5, 7}) {
    SCOPED_TRACE("T " + std::to_string(T));
    std::vector<Var> in = {bf16_var({2, T, 24}, 100 + T, "qkv")};
    EXPECT_TRUE(passes(check_gradients(
        [](const std::vector<Var>& v) { return attention(v[0], 2); }, in, bf16_check(1, 2))));
  }
}

TEST(GradCheckBf16, EmbeddingAndCrossEntropy) {
  Tensor tokens = Tensor::from_vector(std::vector<int32_t>{1, 3, 1, 1, 0, 4, 3, 3, 2, 1}, {2, 5});
  std::vector<Var> emb = {bf16_param({6, 4}, 18, "wte"), bf16_param({7, 4}, 19, "wpe")};
  EXPECT_TRUE(passes(check_gradients(
      [tokens](const std::vector<Var>& v) { return embedding(tokens, v[0], v[1]); }, emb,
      bf16_check(1))));
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{2, -1, 0, 6, -1, 5}, {6});
  std::vector<Var> ce = {bf16_var({2, 3, 7}, 22, "logits", -2, 2)};
  EXPECT_TRUE(passes(check_gradients(
      [targets](const std::vector<Var>& v) { return cross_entropy(v[0], targets, 0.25f); }, ce,
      bf16_check(1))));
  EXPECT_EQ(ce[0].grad().dtype(), DType::bf16);
}

// The ops on the longest path of the tiny GPT: the embedding, per block ln, qkv, attention,
// proj, add, ln, fc, gelu, fc2, add (10), then ln_f and the head (cross-entropy's rounding is
// its input gradient, counted with the head); extra: attention's probabilities (2 per
// block) and the residual gradients' second accumulation (2 per block).
int tiny_gpt_ops(const test::TinyConfig& c) { return 1 + 10 * c.L + 2; }

TEST(GradCheckBf16, ComposedTwoLayerModelWithAndWithoutRecompute) {
  const test::TinyConfig c;
  Tensor tokens, targets;
  test::tiny_batch(c, 2, 5, 31, &tokens, &targets);
  for (bool checkpoint : {false, true}) {
    SCOPED_TRACE(checkpoint ? "recompute" : "plain");
    std::vector<Var> params = test::to_bf16_params(test::tiny_params(c, 32));
    const GradCheckResult r = check_gradients(
        [&](const std::vector<Var>& p) { return test::tiny_forward(p, tokens, targets, c, checkpoint); },
        params, bf16_check(tiny_gpt_ops(c), 4 * c.L));
    EXPECT_TRUE(passes(r));
    for (const Var& p : params) {
      ASSERT_TRUE(p.grad().defined()) << p.name();
      EXPECT_EQ(p.grad().dtype(), DType::f32) << p.name();
    }
  }
}

TEST(GradCheckBf16, ComposedBlockWithRespectToItsInputAndParameters) {
  // The block's input and its 12 parameters, all inputs of f (the checker also runs f on
  // their fp32 twins).
  const test::TinyConfig c;
  const std::vector<Var> params = test::to_bf16_params(test::tiny_params(c, 33));
  std::vector<Var> in = {bf16_var({2, 5, c.C}, 34, "x")};
  in.insert(in.end(), params.begin() + 2, params.begin() + 2 + test::kBlockParams);
  EXPECT_TRUE(passes(check_gradients(
      [](const std::vector<Var>& v) { return test::tiny_block(v[0], &v[1], 2); }, in,
      bf16_check(10, 4))));
  EXPECT_EQ(in[0].grad().dtype(), DType::bf16);
  EXPECT_EQ(in[1].grad().dtype(), DType::f32);
}

// ---- the checker fails when a backward is wrong ----------------------------------------------

// y = x * x elementwise (in x's dtype), recorded with a chosen backward: dx += factor * x * dy.
Var square(const Var& x, float factor) {
  const std::vector<float> xv = x.value().to_vector();
  std::vector<float> yv(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) yv[i] = xv[i] * xv[i];
  const bool rec = should_record({&x});
  Var y(Tensor::from_vector(yv, x.value().shape()).to(x.value().dtype()), rec);
  if (rec) {
    auto xi = x.impl(), yi = y.impl();
    record([xi, yi, factor]() {
      if (!yi->grad.defined()) return;
      const std::vector<float> x_ = xi->value.to_vector(), dy = yi->grad.to_vector();
      std::vector<float> dx(x_.size());
      for (size_t i = 0; i < x_.size(); ++i) dx[i] = factor * x_[i] * dy[i];
      add_grad(*xi, Tensor::from_vector(dx, xi->value.shape()).to(grad_dtype(*xi)));
    });
  }
  return y;
}

TEST(GradCheck, FailsOnAWrongBackward) {
  std::vector<Var> in = {random_var({3, 4}, 40, "x")};
  // The right derivative (2x) passes: the custom function itself is sound.
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return square(v[0], 2.0f); },
                                     in, check_all())));
  // 2.2x instead of 2x: 10% off, beyond the allowance.
  const GradCheckResult r = check_gradients(
      [](const std::vector<Var>& v) { return square(v[0], 2.2f); }, in, check_all());
  EXPECT_FALSE(r.ok) << r.report;
  EXPECT_GT(r.worst_excess, 1.0);
  EXPECT_NE(r.report.find("(x)"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("numeric"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("analytic"), std::string::npos) << r.report;
  EXPECT_EQ(tape_size(), 0u);
}

TEST(GradCheckBf16, FailsOnAWrongBackward) {
  std::vector<Var> in = {bf16_var({3, 4}, 40, "x")};
  EXPECT_TRUE(passes(check_gradients([](const std::vector<Var>& v) { return square(v[0], 2.0f); },
                                     in, bf16_check(1))));
  // 10% off is beyond a single op's bf16 allowance (2 roundings: 0.8% of the scale).
  const GradCheckResult r = check_gradients(
      [](const std::vector<Var>& v) { return square(v[0], 2.2f); }, in, bf16_check(1));
  EXPECT_FALSE(r.ok) << r.report;
  EXPECT_NE(r.report.find("(x)"), std::string::npos) << r.report;
}

TEST(GradCheck, FailsOnAMissingGradientInAComposition) {
  // A wrong gradient deep inside a composition is caught too: the square's backward drops
  // its gradient (factor 0), so only the residual path reaches x.
  std::vector<Var> in = {random_var({2, 3}, 41, "x"), random_var({3, 3}, 42, "w")};
  const GradCheckResult r = check_gradients(
      [](const std::vector<Var>& v) { return add(v[0], linear(square(v[0], 0.0f), v[1], Var())); },
      in, check_all());
  EXPECT_FALSE(r.ok) << r.report;
}

}  // namespace
}  // namespace gpumix
