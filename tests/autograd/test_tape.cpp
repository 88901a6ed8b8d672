// Tape semantics: += accumulation across backward calls, NoGradGuard, errors of backward,
// unused branches, the tape cleared after backward, per-thread tapes, checked add_grad and
// the gradients' dtypes (fp32 for parameters, the value's for activations).
#include <gtest/gtest.h>

#include <cfloat>
#include <thread>

#include "autograd_test_util.h"
#include "core/ops.h"

namespace gpumix {
namespace {

using test::random_var;

struct TinyRun {
  float loss = 0;
  std::vector<std::vector<float>> grads;  // per parameter, in the stable order
};

// One forward + backward of the tiny GPT from seeds, on the calling thread's tape.
TinyRun run_tiny(uint32_t seed, int steps = 1) {
  const test::TinyConfig c;
  Tensor tokens, targets;
  test::tiny_batch(c, 2, 6, seed, &tokens, &targets);
  std::vector<Var> p = test::tiny_params(c, seed + 1);
  TinyRun run;
  for (int s = 0; s < steps; ++s) {
    for (Var& v : p) v.zero_grad();
    Var loss = test::tiny_forward(p, tokens, targets, c);
    run.loss = loss.value().item();
    backward(loss);
    EXPECT_EQ(tape_size(), 0u);
  }
  for (const Var& v : p) run.grads.push_back(test::grad_of(v));
  return run;
}

TEST(Tape, GradientsAccumulateAcrossBackwardCalls) {
  // Every function's backward accumulates (+=) into existing gradients: two backward calls
  // of the same graph give twice the gradient of one, to fp32 rounding.
  const test::TinyConfig c;
  Tensor tokens, targets;
  test::tiny_batch(c, 2, 6, 3, &tokens, &targets);
  std::vector<Var> p = test::tiny_params(c, 4);
  backward(test::tiny_forward(p, tokens, targets, c));
  std::vector<std::vector<float>> once;
  for (const Var& v : p) once.push_back(test::grad_of(v));
  backward(test::tiny_forward(p, tokens, targets, c));
  for (size_t i = 0; i < p.size(); ++i) {
    std::vector<double> twice_ref(once[i].size());
    double scale = 0;
    for (size_t k = 0; k < once[i].size(); ++k) {
      twice_ref[k] = 2.0 * once[i][k];
      scale = std::max(scale, std::fabs(twice_ref[k]));
    }
    EXPECT_TRUE(test::all_close(p[i].name().c_str(), test::grad_of(p[i]), twice_ref,
                                4 * FLT_EPSILON, 4 * FLT_EPSILON * scale));
  }
  // zero_grad keeps the buffer and zeros it; clear_grad drops it.
  const void* buffer = p[0].grad().raw_data();
  p[0].zero_grad();
  EXPECT_EQ(p[0].grad().raw_data(), buffer);
  EXPECT_EQ(ops::sum_squares(p[0].grad()), 0.0);
  p[0].clear_grad();
  EXPECT_FALSE(p[0].grad().defined());
}

TEST(Tape, AccumulatesIntoAVariableUsedTwice) {
  Var x = random_var({5}, 5, "x");
  Var w = random_var({5, 5}, 6, "w");
  // y = x + W x: dL/dx = r + W^T r.
  Var y = add(x, linear(x, w, Var()));
  Tensor r = test::random_tensor({5}, 7);
  backward(y, r);
  const std::vector<float> rv = r.to_vector(), wv = w.value().to_vector();
  std::vector<double> ref(5);
  for (int j = 0; j < 5; ++j) {
    ref[j] = rv[j];
    for (int i = 0; i < 5; ++i) ref[j] += (double)wv[i * 5 + j] * rv[i];
  }
  EXPECT_TRUE(test::all_close("dx", test::grad_of(x), ref, 8 * FLT_EPSILON, 8 * 5 * FLT_EPSILON));
}

TEST(Tape, NoGradGuardRecordsNothing) {
  Var x = random_var({2, 4}, 8, "x"), w = random_var({3, 4}, 9, "w");
  EXPECT_TRUE(grad_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    Var y = gelu(linear(x, w, Var()));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(tape_size(), 0u);
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_enabled());
    }
    EXPECT_FALSE(grad_enabled());  // the inner guard restores the outer state
    EXPECT_THROW_WITH(backward(cross_entropy(y, Tensor::zeros({2}, DType::i32), 1.0f)), Error,
                      "does not require a gradient", "NoGradGuard");
  }
  EXPECT_TRUE(grad_enabled());
  Var y = linear(x, w, Var());
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
}

TEST(Tape, OnlyFunctionsOfVariablesNeedingGradientsRecord) {
  Var a = random_var({3}, 10, "a", -1, 1, false), b = random_var({3}, 11, "b", -1, 1, false);
  Var y = add(a, b);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_FALSE(should_record({&a, &b}));
  Var c = random_var({3}, 12, "c");
  EXPECT_TRUE(should_record({&a, &c}));
  EXPECT_THROW_WITH(backward(add(a, b), Tensor::zeros({3})), Error, "backward",
                    "does not require a gradient");
  Var named(Tensor::zeros({1}), false, "loss.copy");
  EXPECT_THROW_WITH(backward(named), Error, "loss.copy", "does not require a gradient");
}

TEST(Tape, BackwardOfANonScalarNeedsItsGradient) {
  Var x = random_var({2, 3}, 13, "x");
  Var y = gelu(x);
  EXPECT_THROW_WITH(backward(y), Error, "backward", "scalar", "(2, 3)", "pass its gradient");
  EXPECT_THROW_WITH(backward(Var()), Error, "backward", "scalar", "undefined");
  // A wrongly shaped explicit gradient names the root's shape.
  EXPECT_THROW_WITH(backward(y, Tensor::zeros({4})), Error, "add_grad", "(4,)", "(2, 3)");
  clear_tape();
  EXPECT_FALSE(x.grad().defined());
  // With its gradient it works.
  Var z = gelu(x);
  backward(z, Tensor::full({2, 3}, 1.0f));
  EXPECT_TRUE(x.grad().defined());
}

TEST(Tape, UnusedBranchesAreFine) {
  Var x = random_var({4, 3}, 14, "x");
  Var w_used = random_var({2, 3}, 15, "w_used"), w_unused = random_var({5, 3}, 16, "w_unused");
  Var used = linear(x, w_used, Var());
  Var unused = gelu(linear(x, w_unused, Var()));  // recorded, never reached by the loss
  EXPECT_EQ(tape_size(), 3u);
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{0, 1, 1, 0}, {4});
  backward(cross_entropy(used, targets, 0.25f));
  EXPECT_EQ(tape_size(), 0u);
  EXPECT_TRUE(w_used.grad().defined());
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w_unused.grad().defined());  // no gradient reached it: no buffer made
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Tape, ClearedAfterBackward) {
  Var x = random_var({3, 4}, 17, "x");
  Var loss = cross_entropy(x, Tensor::from_vector(std::vector<int32_t>{1, 2, 3}, {3}), 1.0f);
  EXPECT_EQ(tape_size(), 1u);
  backward(loss);
  EXPECT_EQ(tape_size(), 0u);
  // The saved tensors are released: only x and its gradient keep storage alive.
  const std::vector<float> g = test::grad_of(x);
  // A second backward of the same root finds an empty tape: only the root's gradient moves.
  backward(loss);
  EXPECT_TRUE(test::bitwise_equal("x.grad after a second backward on an empty tape",
                                  test::grad_of(x), g));

  // clear_tape drops recorded nodes without running them.
  Var y = gelu(x);
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
  EXPECT_EQ(tape_size(), 0u);
  backward(y, Tensor::full({3, 4}, 1.0f));
  EXPECT_TRUE(test::bitwise_equal("x.grad after clear_tape", test::grad_of(x), g));
}

TEST(Tape, PerThreadTapes) {
  const TinyRun alone_a = run_tiny(100, 3);
  const TinyRun alone_b = run_tiny(200, 3);

  // The main thread holds a node and disables recording while the threads run: neither
  // touches their tapes.
  Var m = random_var({2}, 18, "m");
  Var pending = gelu(m);
  ASSERT_EQ(tape_size(), 1u);
  NoGradGuard main_guard;

  TinyRun ta, tb;
  bool a_saw_grad = false, b_saw_grad = false;
  std::thread thread_a([&] {
    a_saw_grad = grad_enabled() && tape_size() == 0;
    ta = run_tiny(100, 3);
  });
  std::thread thread_b([&] {
    b_saw_grad = grad_enabled() && tape_size() == 0;
    tb = run_tiny(200, 3);
  });
  thread_a.join();
  thread_b.join();
  EXPECT_TRUE(a_saw_grad);
  EXPECT_TRUE(b_saw_grad);
  EXPECT_EQ(tape_size(), 1u);
  EXPECT_FALSE(grad_enabled());

  ASSERT_EQ(ta.grads.size(), alone_a.grads.size());
  ASSERT_EQ(tb.grads.size(), alone_b.grads.size());
  EXPECT_EQ(ta.loss, alone_a.loss);
  EXPECT_EQ(tb.loss, alone_b.loss);
  for (size_t i = 0; i < ta.grads.size(); ++i) {
    // The same computation on the same data: equal up to fp32 rounding (threads may split
    // reductions differently), at most a few ulps of the gradient's scale.
    for (auto [got, ref] : {std::pair{&ta.grads[i], &alone_a.grads[i]}, std::pair{&tb.grads[i], &alone_b.grads[i]}}) {
      double scale = 0;
      for (float v : *ref) scale = std::max(scale, (double)std::fabs(v));
      EXPECT_TRUE(test::all_close(("param " + std::to_string(i)).c_str(), *got,
                                  test::to_double(*ref), 4 * FLT_EPSILON, 4 * FLT_EPSILON * scale));
    }
  }
  clear_tape();
}

TEST(Tape, AddGradChecksTheShapeAndNamesTheVariable) {
  Var v(Tensor::zeros({2, 3}), true, "block0.mlp.fc.weight");
  EXPECT_THROW_WITH(add_grad(*v.impl(), Tensor::zeros({4})), Error, "add_grad",
                    "block0.mlp.fc.weight", "(2, 3)", "(4,)");
  Var unnamed(Tensor::zeros({2}), true);
  EXPECT_THROW_WITH(add_grad(*unnamed.impl(), Tensor::zeros({3, 1})), Error, "add_grad",
                    "the variable", "(2,)", "(3, 1)");
  // The same element count in another shape (a transposed gradient) is a mismatch too.
  EXPECT_THROW_WITH(add_grad(*v.impl(), Tensor::zeros({3, 2})), Error, "add_grad",
                    "block0.mlp.fc.weight", "(2, 3)", "(3, 2)");
  EXPECT_THROW_WITH(add_grad(*v.impl(), Tensor::zeros({6})), Error, "add_grad", "(6,)");
  EXPECT_FALSE(v.grad().defined());  // nothing was added by the failed calls
  // A matching gradient accumulates.
  add_grad(*v.impl(), Tensor::full({2, 3}, 1.5f));
  add_grad(*v.impl(), Tensor::full({2, 3}, 0.25f));
  EXPECT_EQ(v.grad().to_vector(), std::vector<float>(6, 1.75f));
  EXPECT_EQ(v.grad().dtype(), DType::f32);
  EXPECT_EQ(v.grad().shape(), Shape({2, 3}));
}

TEST(Tape, GradientDtypes) {
  // An activation's gradient has its value's dtype; a parameter's is fp32, its value may be bf16.
  Var act(Tensor::zeros({2, 3}, DType::bf16), true, "h");
  Var param = Var::parameter(Tensor::zeros({2, 3}, DType::bf16), "w");
  EXPECT_EQ(grad_dtype(*act.impl()), DType::bf16);
  EXPECT_EQ(grad_dtype(*param.impl()), DType::f32);
  EXPECT_EQ(grad_buffer(*act.impl()).dtype(), DType::bf16);
  EXPECT_EQ(grad_buffer(*param.impl()).dtype(), DType::f32);
  // bf16 gradients accumulate into the fp32 one in fp32: 1 + 2^-9 twice is exact in fp32
  // (a bf16 accumulator would round each sum back to 1).
  const float small = 1.0f + std::ldexp(1.0f, -7);  // bf16-representable
  add_grad(*param.impl(), Tensor::full({2, 3}, small, DType::bf16));
  add_grad(*param.impl(), Tensor::full({2, 3}, std::ldexp(1.0f, -9), DType::f32));
  add_grad(*param.impl(), Tensor::full({2, 3}, std::ldexp(1.0f, -9), DType::f32));
  EXPECT_EQ(param.grad().to_vector(), std::vector<float>(6, small + std::ldexp(1.0f, -8)));
  // An fp32 gradient for a bf16 activation is refused, naming both dtypes.
  EXPECT_THROW_WITH(add_grad(*act.impl(), Tensor::zeros({2, 3})), Error, "add_grad",
                    "a f32 gradient for h", "whose gradient is bf16");
  // A bound buffer of the wrong dtype (a bf16 gradient for a parameter) is an error too.
  Var bound = Var::parameter(Tensor::zeros({4}, DType::bf16), "ln.bias");
  bound.impl()->grad = Tensor::zeros({4}, DType::bf16);
  EXPECT_THROW_WITH(grad_buffer(*bound.impl()), Error, "gradient buffer bound to ln.bias",
                    "Tensor(bf16, (4,)", "parameter value", "needs a f32 gradient");
  // In f32 nothing changes: both are fp32.
  EXPECT_EQ(grad_dtype(*Var(Tensor::zeros({1}), true).impl()), DType::f32);
}

TEST(Tape, FunctionShapeErrors) {
  Var a = random_var({2, 3}, 19, "a"), b = random_var({3, 2}, 20, "b");
  EXPECT_THROW_WITH(add(a, b), Error, "add", "(2, 3)", "(3, 2)");
  Var w = random_var({4, 5}, 21, "w");
  EXPECT_THROW_WITH(linear(a, w, Var()), Error, "matmul_forward", "(2, 3)", "(4, 5)");
  EXPECT_THROW_WITH(attention(a, 1), Error, "attention", "(B, T, 3C)", "(2, 3)");
  EXPECT_THROW_WITH(embedding(Tensor::zeros({2, 3}, DType::i32).view({6}), a, a), Error,
                    "embedding", "(B, T)", "(6,)");
  EXPECT_EQ(tape_size(), 0u);
}

}  // namespace
}  // namespace gpumix
