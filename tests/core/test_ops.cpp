// The op API: validation (shape mismatches name the op and both shapes; wrong dtypes;
// empty and undefined tensors; device mismatches) and a few ops' values through the one
// dispatch point, against hand-computed results.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "core/ops.h"
#include "test_util.h"

namespace gpumix {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// An f32 tensor from a braced list (Tensor::from_vector is overloaded for f32 and i32).
Tensor fvec(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

// Relative tolerance of an fp32 result summing k rounded terms: k * FLT_EPSILON bounds the
// rounding of a k-term sum relative to the sum of the terms' magnitudes.
double fp32_sum_tol(int64_t k) { return (double)(k + 2) * FLT_EPSILON; }

// ---- validation: matmul / gemm -------------------------------------------------------------

TEST(OpsValidation, MatmulForwardShapeMismatchNamesOpAndShapes) {
  Tensor out = Tensor::zeros({4, 3}), inp = Tensor::zeros({4, 5}), w = Tensor::zeros({3, 6});
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w, Tensor()), Error, "matmul_forward", "(4, 5)",
                    "(3, 6)");
  Tensor w2 = Tensor::zeros({3, 5});
  Tensor bad_out = Tensor::zeros({4, 4});
  EXPECT_THROW_WITH(ops::matmul_forward(bad_out, inp, w2, Tensor()), Error, "matmul_forward", "out",
                    "(4, 4)", "12");
  Tensor bad_bias = Tensor::zeros({4});
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w2, bad_bias), Error, "matmul_forward", "bias",
                    "(4,)", "(3,)");
  Tensor w3d = Tensor::zeros({3, 5, 1});
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w3d, Tensor()), Error, "matmul_forward",
                    "weight must be 2-D", "(3, 5, 1)");
  // Out of a different (but compatible) shape with the same element count is not enough.
  Tensor out_t = Tensor::zeros({3, 4});
  EXPECT_THROW_WITH(ops::matmul_forward(out_t, inp, w2, Tensor()), Error, "matmul_forward", "out",
                    "(3, 4)", "last dimension 3");
  ops::matmul_forward(out, inp, w2, Tensor());  // the right shapes pass
}

TEST(OpsValidation, MatmulDtypesAndUndefined) {
  Tensor out = Tensor::zeros({4, 3}), inp = Tensor::zeros({4, 5}), w = Tensor::zeros({3, 5});
  Tensor inp_i = Tensor::zeros({4, 5}, DType::i32);
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp_i, w, Tensor()), Error, "matmul_forward", "inp",
                    "floating-point", "i32");
  Tensor w_h = Tensor::zeros({3, 5}, DType::bf16);
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w_h, Tensor()), Error, "matmul_forward",
                    "weight must be f32 (the compute dtype, that of inp), got bf16 (3, 5)");
  EXPECT_THROW_WITH(ops::matmul_forward(out, Tensor(), w, Tensor()), Error, "matmul_forward",
                    "inp is undefined");
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, Tensor(), Tensor()), Error, "matmul_forward",
                    "weight is undefined");
  Tensor no_out;
  EXPECT_THROW_WITH(ops::matmul_forward(no_out, inp, w, Tensor()), Error, "matmul_forward",
                    "out is undefined");

  Tensor dout = Tensor::zeros({4, 3}), none;
  Tensor dinp_bad = Tensor::zeros({5, 4});
  EXPECT_THROW_WITH(ops::matmul_backward(dinp_bad, none, none, dout, inp, w), Error,
                    "matmul_backward", "dinp", "(5, 4)", "(4, 5)");
  Tensor dout_bad = Tensor::zeros({4, 2});
  EXPECT_THROW_WITH(ops::matmul_backward(none, none, none, dout_bad, inp, w), Error,
                    "matmul_backward", "dout", "(4, 2)", "12");
  Tensor dw_i = Tensor::zeros({3, 5}, DType::i32);
  EXPECT_THROW_WITH(ops::matmul_backward(none, dw_i, none, dout, inp, w), Error, "matmul_backward",
                    "dweight", "i32");
}

TEST(OpsValidation, GemmShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5}), c = Tensor::zeros({2, 5});
  EXPECT_THROW_WITH(ops::gemm(c, a, b, false, false), Error, "gemm", "inner dimensions", "(2, 3)",
                    "(4, 5)");
  EXPECT_THROW_WITH(ops::gemm(c, a, b, true, false), Error, "gemm", "(2, 3)^T", "(4, 5)");
  Tensor b2 = Tensor::zeros({3, 5}), c_bad = Tensor::zeros({5, 2});
  EXPECT_THROW_WITH(ops::gemm(c_bad, a, b2, false, false), Error, "gemm", "c (5, 2)", "(2, 5)");
  Tensor a3 = Tensor::zeros({3, 2, 3}), c3 = Tensor::zeros({2, 2, 5});
  EXPECT_THROW_WITH(ops::gemm(c3, a3, b2, false, false), Error, "gemm", "batch sizes differ",
                    "(3, 2, 3)", "(2, 2, 5)");
  Tensor a1 = Tensor::zeros({3});
  EXPECT_THROW_WITH(ops::gemm(c, a1, b2, false, false), Error, "gemm", "at least 2-D", "(3,)");
}

// ---- validation: the other ops -------------------------------------------------------------

TEST(OpsValidation, CrossEntropyDtypesAndShapes) {
  Tensor losses = Tensor::zeros({4}), lse = Tensor::zeros({4});
  Tensor logits = Tensor::zeros({4, 7}), targets = Tensor::zeros({4}, DType::i32);
  Tensor logits_i = Tensor::zeros({4, 7}, DType::i32);
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses, lse, logits_i, targets), Error,
                    "crossentropy_forward", "logits", "i32");
  Tensor targets_f = Tensor::zeros({4});
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses, lse, logits, targets_f), Error,
                    "crossentropy_forward", "targets must be i32", "got f32");
  Tensor targets_5 = Tensor::zeros({5}, DType::i32);
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses, lse, logits, targets_5), Error,
                    "crossentropy_forward", "(4, 7)", "(5,)");
  Tensor empty_logits = Tensor::zeros({0, 7}), empty_targets = Tensor::zeros({0}, DType::i32);
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses, lse, empty_logits, empty_targets), Error,
                    "crossentropy_forward", "logits is empty", "(0, 7)");
  Tensor lse_bad = Tensor::zeros({3});
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses, lse_bad, logits, targets), Error,
                    "crossentropy_forward", "lse", "(3,)", "(4,)");
  Tensor dlogits = Tensor::zeros({4, 6});
  EXPECT_THROW_WITH(ops::crossentropy_backward(dlogits, logits, lse, targets, 1.0f), Error,
                    "crossentropy_backward", "dlogits", "(4, 6)", "(4, 7)");
  Tensor no_lse;
  Tensor dl = Tensor::zeros({4, 7});
  EXPECT_THROW_WITH(ops::crossentropy_backward(dl, logits, no_lse, targets, 1.0f), Error,
                    "crossentropy_backward", "lse is undefined");
}

TEST(OpsValidation, LayernormAttentionGelu) {
  Tensor x = Tensor::zeros({2, 3, 8}), out = Tensor::zeros({2, 3, 8});
  Tensor w = Tensor::zeros({8}), b = Tensor::zeros({8});
  Tensor mean = Tensor::zeros({6}), rstd = Tensor::zeros({6});
  Tensor w_bad = Tensor::zeros({7});
  EXPECT_THROW_WITH(ops::layernorm_forward(out, mean, rstd, x, w_bad, b), Error,
                    "layernorm_forward", "weight", "(7,)", "(8,)");
  Tensor out_bad = Tensor::zeros({2, 8, 3});
  EXPECT_THROW_WITH(ops::layernorm_forward(out_bad, mean, rstd, x, w, b), Error,
                    "layernorm_forward", "out", "(2, 8, 3)", "(2, 3, 8)");
  Tensor mean_h = Tensor::zeros({6}, DType::bf16);
  EXPECT_THROW_WITH(ops::layernorm_forward(out, mean_h, rstd, x, w, b), Error,
                    "layernorm_forward", "mean must be f32", "bf16");
  Tensor x_empty = Tensor::zeros({0, 8}), out_empty = Tensor::zeros({0, 8});
  Tensor m0 = Tensor::zeros({0}), r0 = Tensor::zeros({0});
  EXPECT_THROW_WITH(ops::layernorm_forward(out_empty, m0, r0, x_empty, w, b), Error,
                    "layernorm_forward", "inp is empty", "(0, 8)");
  Tensor none;
  EXPECT_THROW_WITH(ops::layernorm_forward(out, mean, rstd, x, none, b), Error,
                    "layernorm_forward", "weight is undefined");
  ops::layernorm_forward(out, mean, rstd, x, w, b);

  Tensor qkv = Tensor::zeros({2, 5, 24}), aout = Tensor::zeros({2, 5, 8}), lse = Tensor::zeros({2, 2, 5});
  Tensor qkv_bad = Tensor::zeros({2, 5, 25});
  EXPECT_THROW_WITH(ops::attention_forward(aout, lse, qkv_bad, 2), Error, "attention_forward",
                    "(B, T, 3C)", "(2, 5, 25)");
  EXPECT_THROW_WITH(ops::attention_forward(aout, lse, qkv, 3), Error, "attention_forward", "C = 8",
                    "NH = 3");
  Tensor lse_bad = Tensor::zeros({2, 5, 2});
  EXPECT_THROW_WITH(ops::attention_forward(aout, lse_bad, qkv, 2), Error, "attention_forward",
                    "lse", "(2, 5, 2)", "(2, 2, 5)");
  Tensor qkv_empty = Tensor::zeros({2, 0, 24}), aout0 = Tensor::zeros({2, 0, 8}), lse0 = Tensor::zeros({2, 2, 0});
  EXPECT_THROW_WITH(ops::attention_forward(aout0, lse0, qkv_empty, 2), Error, "attention_forward",
                    "qkv is empty");
  ops::attention_forward(aout, lse, qkv, 2);

  Tensor g = Tensor::zeros({2, 3, 8}), g_bad = Tensor::zeros({2, 3, 7});
  EXPECT_THROW_WITH(ops::gelu_forward(g_bad, x), Error, "gelu_forward", "(2, 3, 7)", "(2, 3, 8)");
  EXPECT_THROW_WITH(ops::gelu_backward(g, x, g_bad), Error, "gelu_backward", "dout", "(2, 3, 7)");
  Tensor xi = Tensor::zeros({2, 3, 8}, DType::i32);
  EXPECT_THROW_WITH(ops::gelu_forward(g, xi), Error, "gelu_forward", "i32");
}

TEST(OpsValidation, EmbeddingAndAdamW) {
  Tensor tokens = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 9, 4, 5}, {2, 3});
  Tensor wte = Tensor::zeros({10, 4}), wpe = Tensor::zeros({3, 4}), out = Tensor::zeros({2, 3, 4});
  ops::embedding_forward(out, tokens, wte, wpe);
  Tensor tokens_f = Tensor::zeros({2, 3});
  EXPECT_THROW_WITH(ops::embedding_forward(out, tokens_f, wte, wpe), Error, "embedding_forward",
                    "tokens must be i32", "f32");
  Tensor wpe_short = Tensor::zeros({2, 4});
  EXPECT_THROW_WITH(ops::embedding_forward(out, tokens, wte, wpe_short), Error,
                    "embedding_forward", "sequence length 3", "context 2");
  Tensor wpe_c = Tensor::zeros({3, 5});
  EXPECT_THROW_WITH(ops::embedding_forward(out, tokens, wte, wpe_c), Error, "embedding_forward",
                    "(10, 4)", "(3, 5)");
  Tensor big = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 10, 4, 5}, {2, 3});
  EXPECT_THROW_WITH(ops::embedding_forward(out, big, wte, wpe), Error, "token 10", "position 3",
                    "vocabulary of 10");
  Tensor none, dout_bad = Tensor::zeros({3, 2, 4});
  EXPECT_THROW_WITH(ops::embedding_backward(none, none, dout_bad, tokens), Error,
                    "embedding_backward", "(3, 2, 4)", "(2, 3)");

  Tensor p = Tensor::zeros({5}), gr = Tensor::zeros({5}), m = Tensor::zeros({5}), v = Tensor::zeros({5});
  EXPECT_THROW_WITH(ops::adamw_step(p, gr, m, v, AdamWConfig{}, 0), Error, "adamw_step",
                    "step counts from 1", "0");
  Tensor g4 = Tensor::zeros({4});
  EXPECT_THROW_WITH(ops::adamw_step(p, g4, m, v, AdamWConfig{}, 1), Error, "adamw_step", "grad",
                    "4 elements", "5");
  Tensor m_h = Tensor::zeros({5}, DType::bf16);
  EXPECT_THROW_WITH(ops::adamw_step(p, gr, m_h, v, AdamWConfig{}, 1), Error, "adamw_step",
                    "m must be f32", "bf16");
}

TEST(OpsValidation, ElementwiseAndCopies) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2}), out = Tensor::zeros({2, 3});
  EXPECT_THROW_WITH(ops::add(out, a, b), Error, "add", "b has shape (3, 2)", "expected (2, 3)");
  Tensor out5 = Tensor::zeros({5});
  EXPECT_THROW_WITH(ops::add(out5, a, a), Error, "add", "out", "(5,)", "6");
  EXPECT_THROW_WITH(ops::scale(out5, a, 2.0f), Error, "scale", "out", "(5,)", "6");
  EXPECT_THROW_WITH(ops::axpy(out5, a, 2.0f), Error, "axpy", "out", "(5,)", "6");
  EXPECT_THROW_WITH(ops::add(out, a, Tensor()), Error, "add", "b is undefined");
  Tensor ai = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW_WITH(ops::sum(ai), Error, "sum", "i32");
  EXPECT_THROW_WITH(ops::sum_squares(ai), Error, "sum_squares", "i32");
  Tensor h = Tensor::zeros({6}, DType::bf16);
  EXPECT_THROW_WITH(ops::copy(h, a), Error, "copy", "bf16", "f32", "use convert");
  Tensor h5 = Tensor::zeros({5}, DType::bf16);
  EXPECT_THROW_WITH(ops::convert(h5, a), Error, "convert", "out", "5", "6");
  EXPECT_THROW_WITH(ops::convert(h, ai), Error, "convert", "i32");
}

TEST(OpsValidation, DeviceMismatchNamesBothDevices) {
  const Device other = Device::cpu(200);
  Tensor a = Tensor::zeros({2, 3}), a_other = Tensor::zeros({2, 3}, DType::f32, other);
  Tensor out = Tensor::zeros({2, 3});
  EXPECT_THROW_WITH(ops::add(out, a, a_other), Error, "add", "b is on cpu:200",
                    "runs on cpu:0");
  EXPECT_THROW_WITH(ops::add(out, a_other, a_other), Error, "add", "out is on cpu:0",
                    "runs on cpu:200");
  EXPECT_THROW_WITH(ops::axpy(out, a_other, 1.0f), Error, "axpy", "cpu:0", "cpu:200");
  Tensor w = Tensor::zeros({4, 3}, DType::f32, other), o = Tensor::zeros({2, 4});
  EXPECT_THROW_WITH(ops::matmul_forward(o, a, w, Tensor()), Error, "matmul_forward",
                    "weight is on cpu:200", "cpu:0");
  Tensor h_other = Tensor::zeros({2, 3}, DType::bf16, other);
  EXPECT_THROW_WITH(ops::convert(h_other, a), Error, "convert", "cpu:200", "cpu:0");
  Tensor logits = Tensor::zeros({2, 5}), targets = Tensor::zeros({2}, DType::i32, other);
  Tensor losses = Tensor::zeros({2}), lse = Tensor::zeros({2});
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses, lse, logits, targets), Error,
                    "crossentropy_forward", "targets is on cpu:200", "cpu:0");
  // copy moves data between devices on purpose.
  Tensor moved = Tensor::zeros({2, 3}, DType::f32, other);
  ops::copy(moved, Tensor::full({2, 3}, 4.0f));
  EXPECT_EQ(moved.to_vector(), std::vector<float>(6, 4.0f));
}

// ---- values through the dispatch -----------------------------------------------------------

TEST(OpsValues, Elementwise) {
  const std::vector<float> av = {1.5f, -2.0f, 0.25f, 8.0f, -0.5f, 3.0f};
  const std::vector<float> bv = {0.5f, 4.0f, -0.25f, 1.0f, 2.5f, -3.0f};
  Tensor a = Tensor::from_vector(av, {2, 3}), b = Tensor::from_vector(bv, {2, 3});
  Tensor out = Tensor::zeros({6});  // any shape with the same element count
  ops::add(out, a, b);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{2.0f, 2.0f, 0.0f, 9.0f, 2.0f, 0.0f}));
  ops::scale(out, a, -2.0f);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{-3.0f, 4.0f, -0.5f, -16.0f, 1.0f, -6.0f}));
  ops::axpy(out, b, 2.0f);  // out += 2 b
  EXPECT_EQ(out.to_vector(), (std::vector<float>{-2.0f, 12.0f, -1.0f, -14.0f, 6.0f, -12.0f}));
  // Aliasing: out may be an input.
  ops::add(a, a, b);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{2.0f, 2.0f, 0.0f, 9.0f, 2.0f, 0.0f}));
  ops::scale(a, a, 0.5f);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{1.0f, 1.0f, 0.0f, 4.5f, 1.0f, 0.0f}));
  // On a slice: only the slice changes.
  Tensor base = Tensor::from_vector(av, {3, 2});
  Tensor row = base.slice(1, 2);
  ops::axpy(row, Tensor::full({2}, 1.0f), 10.0f);
  EXPECT_EQ(base.to_vector(), (std::vector<float>{1.5f, -2.0f, 10.25f, 18.0f, -0.5f, 3.0f}));
}

TEST(OpsValues, Reductions) {
  EXPECT_EQ(ops::sum(fvec({1.5f, -2.0f, 0.25f, 8.0f}, {2, 2})), 7.75);
  EXPECT_EQ(ops::sum_squares(fvec({1.5f, -2.0f, 0.25f, 8.0f}, {4})),
            2.25 + 4.0 + 0.0625 + 64.0);
  // A long sum accumulated in double (an fp32 accumulator would be off by ~1e-3 relative):
  // 1e6 copies of 0.1f; a double n-term sum errs by at most n DBL_EPSILON relative.
  const int64_t n = 1000000;
  const double expected = (double)0.1f * n;
  EXPECT_NEAR(ops::sum(Tensor::full({n}, 0.1f)), expected, expected * n * DBL_EPSILON);
  const std::vector<float> r = random_floats(100003, 3);
  double ref = 0, ref2 = 0, mag = 0;
  for (float v : r) {
    ref += v;
    ref2 += (double)v * v;
    mag += std::fabs(v);
  }
  Tensor t = Tensor::from_vector(r, {(int64_t)r.size()});
  EXPECT_NEAR(ops::sum(t), ref, mag * (double)r.size() * DBL_EPSILON);
  EXPECT_NEAR(ops::sum_squares(t), ref2, ref2 * (double)r.size() * DBL_EPSILON);
  // The sum of a slice covers only the slice.
  EXPECT_EQ(ops::sum(fvec({1.0f, 2.0f, 3.0f, 4.0f}, {4}).flat_slice(1, 2)), 5.0);
}

TEST(OpsValues, SumSquaresManyIsSumSquaresBitForBit) {
  // Odd sizes, both dtypes, a slice and an empty tensor: each result is exactly (bits)
  // what ops::sum_squares gives for that tensor.
  std::vector<Tensor> ts;
  for (int64_t n : {1, 7, 1000, 100003}) {
    const std::vector<float> r = random_floats((size_t)n, (uint32_t)n);
    ts.push_back(Tensor::from_vector(r, {n}));
    ts.push_back(ts.back().to(DType::bf16));
  }
  ts.push_back(ts[6].flat_slice(13, 5000));
  ts.push_back(Tensor::zeros({0}));
  const std::vector<double> many = ops::sum_squares_many(ts);
  ASSERT_EQ(many.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const double one = ops::sum_squares(ts[i]);
    EXPECT_EQ(std::memcmp(&many[i], &one, sizeof one), 0) << "tensor " << i << ": " << many[i]
                                                          << " vs " << one;
  }
  EXPECT_EQ(many.back(), 0.0);
  EXPECT_TRUE(ops::sum_squares_many({}).empty());
}

TEST(OpsValues, SumToIsTheScaledSumBitForBit) {
  // A loss without a host read: exactly (float)(scale * ops::sum(a)), for f32 and bf16.
  for (int64_t n : {1, 37, 100003}) {
    const Tensor a = Tensor::from_vector(random_floats((size_t)n, (uint32_t)(n + 5)), {n});
    for (const Tensor& t : {a, a.to(DType::bf16)}) {
      const float scale = 1.0f / 3.0f;
      Tensor out = Tensor::full({1}, NAN);
      ops::sum_to(out, t, scale);
      const float expected = (float)(scale * ops::sum(t));
      EXPECT_EQ(std::memcmp(out.data<float>(), &expected, sizeof expected), 0) << n;
    }
  }
  Tensor wrong = Tensor::zeros({2});
  EXPECT_THROW_WITH(ops::sum_to(wrong, Tensor::zeros({3}), 1.0), Error, "out has shape (2,), expected (1,)");
}

TEST(OpsValues, CrossEntropyBackwardTakesItsFactorFromATensor) {
  // autograd's form (factor scale x dloss, dloss a one-element tensor) is bit for bit the
  // float form with scale * dloss.
  const int N = 6, V = 37;
  const Tensor logits = Tensor::from_vector(random_floats(N * V, 3), {N, V});
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = (i * 7) % V;
  t[2] = -1;
  const Tensor targets = Tensor::from_vector(t, {N});
  Tensor losses = Tensor::zeros({N}), lse = Tensor::zeros({N});
  ops::crossentropy_forward(losses, lse, logits, targets);
  const float scale = 0.125f, dloss = 0.7f;
  Tensor a = Tensor::from_vector(random_floats(N * V, 4), {N, V}), b = a.clone();
  ops::crossentropy_backward(a, logits, lse, targets, scale * dloss);
  ops::crossentropy_backward(b, logits, lse, targets, Tensor::full({1}, dloss), scale);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_THROW_WITH(ops::crossentropy_backward(b, logits, lse, targets, Tensor::zeros({2}), scale),
                    Error, "dloss has shape (2,), expected (1,)");
}

TEST(OpsValues, ReadScalars) {
  Tensor f = Tensor::full({1}, 3.25f), h = Tensor::full({1, 1}, -0.1f, DType::bf16);
  Tensor row = fvec({1.0f, 2.0f, 7.5f}, {3}).flat_slice(2, 1);
  const std::vector<float> got = ops::read_scalars({f, h, row});
  EXPECT_EQ(got, (std::vector<float>{3.25f, (float)bf16(-0.1f), 7.5f}));
  EXPECT_TRUE(ops::read_scalars({}).empty());
}

TEST(OpsValidation, ManyOpsNameTheTensor) {
  Tensor f = Tensor::full({1}, 1.0f), two = Tensor::zeros({2});
  Tensor ints = Tensor::zeros({1}, DType::i32), other = Tensor::zeros({1}, DType::f32, Device::cpu(201));
  EXPECT_THROW_WITH(ops::read_scalars({f, two}), Error, "read_scalars", "tensor 1", "2 elements",
                    "expected 1");
  EXPECT_THROW_WITH(ops::read_scalars({f, ints}), Error, "read_scalars", "tensor 1", "i32");
  EXPECT_THROW_WITH(ops::sum_squares_many({f, other}), Error, "sum_squares_many", "tensor 1",
                    "cpu:201", "runs on cpu:0");
  EXPECT_THROW_WITH(ops::sum_squares_many({f, Tensor()}), Error, "sum_squares_many",
                    "tensor 1 is undefined");
}

// c = alpha op(a) op(b) + beta c in double, for stored (row-major) a, b, batched.
std::vector<double> gemm_ref(const std::vector<float>& a, const std::vector<float>& b,
                             const std::vector<float>& c, int batch, int m, int n, int k,
                             bool ta, bool tb, double alpha, double beta) {
  std::vector<double> out(c.size());
  for (int p = 0; p < batch; ++p)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int l = 0; l < k; ++l) {
          const double av = ta ? a[(size_t)p * m * k + (size_t)l * m + i] : a[(size_t)p * m * k + (size_t)i * k + l];
          const double bv = tb ? b[(size_t)p * k * n + (size_t)j * k + l] : b[(size_t)p * k * n + (size_t)l * n + j];
          acc += av * bv;
        }
        const size_t o = (size_t)p * m * n + (size_t)i * n + j;
        out[o] = alpha * acc + beta * c[o];
      }
  return out;
}

TEST(OpsValues, GemmByHand) {
  // 2x2 by hand: a = [[1, 2], [3, 4]], b = [[5, 6], [7, 8]].
  Tensor a = fvec({1, 2, 3, 4}, {2, 2}), b = fvec({5, 6, 7, 8}, {2, 2});
  Tensor c = Tensor::zeros({2, 2});
  ops::gemm(c, a, b, false, false);
  EXPECT_EQ(c.to_vector(), (std::vector<float>{19, 22, 43, 50}));
  ops::gemm(c, a, b, true, false);  // a^T b
  EXPECT_EQ(c.to_vector(), (std::vector<float>{26, 30, 38, 44}));
  ops::gemm(c, a, b, false, true);  // a b^T
  EXPECT_EQ(c.to_vector(), (std::vector<float>{17, 23, 39, 53}));
  ops::gemm(c, a, b, true, true);  // a^T b^T
  EXPECT_EQ(c.to_vector(), (std::vector<float>{23, 31, 34, 46}));
  // alpha and beta: c = 2 a b + 0.5 c.
  ops::gemm(c, a, b, false, false, 2.0f, 0.5f);
  EXPECT_EQ(c.to_vector(), (std::vector<float>{38 + 11.5f, 44 + 15.5f, 86 + 17, 100 + 23}));
}

TEST(OpsValues, GemmBatchedTransposedOddSizes) {
  const int batch = 3, m = 5, n = 7, k = 17;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::vector<float> av = random_floats((size_t)batch * m * k, 1 + ta);
      const std::vector<float> bv = random_floats((size_t)batch * k * n, 3 + tb);
      const std::vector<float> cv = random_floats((size_t)batch * m * n, 5);
      Tensor a = Tensor::from_vector(av, ta ? Shape{batch, k, m} : Shape{batch, m, k});
      Tensor b = Tensor::from_vector(bv, tb ? Shape{batch, n, k} : Shape{batch, k, n});
      Tensor c = Tensor::from_vector(cv, {batch, m, n});
      ops::gemm(c, a, b, ta, tb, 0.75f, -1.5f);
      const std::vector<double> ref = gemm_ref(av, bv, cv, batch, m, n, k, ta, tb, 0.75, -1.5);
      // Terms are at most 1 in magnitude: the k-term sum's rounding is below
      // (k + 2) eps * k * alpha, plus the beta term's rounding.
      const double atol = fp32_sum_tol(k) * (0.75 * k + 1.5);
      EXPECT_TRUE(test::all_close(ta ? (tb ? "gemm a^T b^T" : "gemm a^T b") : (tb ? "gemm a b^T" : "gemm a b"),
                                  c.to_vector(), ref, 4 * FLT_EPSILON, atol));
    }
}

TEST(OpsValues, MatmulForwardWithBias) {
  // out (N, OC) = inp (N, C) @ w (OC, C)^T + bias, on a (B, T, C) input.
  const int B = 2, T = 3, C = 5, OC = 4;
  const std::vector<float> x = random_floats(B * T * C, 7), w = random_floats(OC * C, 8),
                           bias = random_floats(OC, 9);
  Tensor out = Tensor::zeros({B, T, OC});
  ops::matmul_forward(out, Tensor::from_vector(x, {B, T, C}), Tensor::from_vector(w, {OC, C}),
                      Tensor::from_vector(bias, {OC}));
  std::vector<double> ref(B * T * OC);
  for (int r = 0; r < B * T; ++r)
    for (int o = 0; o < OC; ++o) {
      double acc = bias[o];
      for (int c = 0; c < C; ++c) acc += (double)x[r * C + c] * w[o * C + c];
      ref[r * OC + o] = acc;
    }
  EXPECT_TRUE(test::all_close("matmul_forward", out.to_vector(), ref, 4 * FLT_EPSILON,
                              fp32_sum_tol(C + 1) * (C + 1)));
}

TEST(OpsValues, CrossEntropyByHand) {
  // Row 0: logits (0, ln 2, 0), target 1: loss = -log(2 / 4) = log 2.
  // Row 1: ignored (-1): loss 0.
  Tensor logits = fvec({0.0f, std::log(2.0f), 0.0f, 5.0f, 1.0f, 2.0f}, {2, 3});
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, -1}, {2});
  Tensor losses = Tensor::zeros({2}), lse = Tensor::zeros({2});
  ops::crossentropy_forward(losses, lse, logits, targets, -1);
  EXPECT_TRUE(test::all_close("losses", losses.to_vector(), {std::log(2.0), 0.0}, 8 * FLT_EPSILON,
                              8 * FLT_EPSILON));
  EXPECT_TRUE(test::all_close("lse row 0", lse.flat_slice(0, 1).to_vector(), {std::log(4.0)},
                              8 * FLT_EPSILON, 8 * FLT_EPSILON));
}

TEST(OpsValues, FillCopyConvert) {
  Tensor t = Tensor::zeros({2, 3});
  ops::fill(t, -1.25f);
  EXPECT_EQ(t.to_vector(), std::vector<float>(6, -1.25f));
  Tensor i = Tensor::zeros({3}, DType::i32);
  ops::fill(i, 7.0f);
  EXPECT_EQ(i.to_int_vector(), (std::vector<int32_t>{7, 7, 7}));
  Tensor h = Tensor::zeros({2, 3}, DType::bf16);
  ops::convert(h, fvec({1, 2, 3, 1.00390625f, 5, 6}, {2, 3}));
  EXPECT_EQ(h.to_vector(), (std::vector<float>{1, 2, 3, 1, 5, 6}));
  Tensor back = Tensor::zeros({6});
  ops::convert(back, h);
  EXPECT_EQ(back.to_vector(), (std::vector<float>{1, 2, 3, 1, 5, 6}));
}

}  // namespace
}  // namespace gpumix
