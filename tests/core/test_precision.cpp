// The mixed-precision contract (core/precision.h): per-argument dtype errors (the message
// names the op, the argument, its dtype and the expected one); every Backend op in bf16
// against the same op in fp32 on the same bf16-representable inputs, at odd sizes, with
// outputs poisoned (NaN) first so that an unwritten element fails; the dtype helpers and
// the native-bf16 query.
//
// Tolerance (test_util.h bf16_rtol): |bf16 path - fp32 path| <= rtol (|ref| + rms(ref)) with
// rtol = R 2^-8 + (k + 2) FLT_EPSILON, R the bf16 roundings the contract allows on the way to
// the output (1: a bf16 output rounded once; 0: an fp32 output; 2 for fused attention, which
// may also round its probabilities once to feed its second product) and k the op's
// reduction length.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "core/ops.h"
#include "core/precision.h"
#include "test_util.h"

namespace gpumix {
namespace {

using test::bf16_rtol;
using test::bf16_values;
using test::close_to_scale;


// The same values as an f32 and as a bf16 tensor.
struct Pair {
  Tensor f, h;
};
Pair pair(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  const Tensor f = Tensor::from_vector(bf16_values(shape.numel(), seed, lo, hi), shape);
  return {f, f.to(DType::bf16)};
}
// Copies of one pair (accumulated outputs start from the same values in both paths).
Pair clone(const Pair& p) { return {p.f.clone(), p.h.clone()}; }
// Outputs filled with NaN: an element a kernel forgets to write fails the comparison.
Tensor poisoned(const Shape& shape, DType dtype) { return Tensor::full(shape, NAN, dtype); }
Pair poisoned_pair(const Shape& shape) { return {poisoned(shape, DType::f32), poisoned(shape, DType::bf16)}; }
// Two poisoned fp32 outputs, one per path (statistics, losses: fp32 in both).
Pair poisoned_fp32_pair(const Shape& shape) { return {poisoned(shape, DType::f32), poisoned(shape, DType::f32)}; }

// The bf16 path's output `got` against the fp32 path's `ref`, R roundings, reduction length k.
::testing::AssertionResult agrees(const char* what, const Tensor& got, const Tensor& ref, int R,
                                  int64_t k) {
  return close_to_scale(what, got.to_vector(), ref.to_vector(), bf16_rtol(R, k));
}

// ---- validation --------------------------------------------------------------------------------

TEST(PrecisionValidation, WrongDtypesNameTheOpArgumentAndExpectedDtype) {
  const int N = 4, C = 5, OC = 3;
  Tensor inp = Tensor::zeros({N, C}, DType::bf16), w = Tensor::zeros({OC, C}, DType::bf16);
  Tensor out = Tensor::zeros({N, OC}, DType::bf16), none;
  Tensor w32 = Tensor::zeros({OC, C});
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w32, none), Error, "matmul_forward",
                    "weight must be bf16 (the compute dtype, that of inp), got f32 (3, 5)");
  Tensor out32 = Tensor::zeros({N, OC});
  EXPECT_THROW_WITH(ops::matmul_forward(out32, inp, w, none), Error, "matmul_forward",
                    "out must be bf16", "got f32 (4, 3)");
  Tensor bias32 = Tensor::zeros({OC});
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w, bias32), Error, "matmul_forward",
                    "bias must be bf16", "got f32 (3,)");
  // Parameter gradients are fp32 in every compute dtype.
  Tensor dout = Tensor::zeros({N, OC}, DType::bf16), dw_h = Tensor::zeros({OC, C}, DType::bf16);
  EXPECT_THROW_WITH(ops::matmul_backward(none, dw_h, none, dout, inp, w), Error, "matmul_backward",
                    "dweight must be f32 (fp32 in every compute dtype), got bf16 (3, 5)");
  Tensor db_h = Tensor::zeros({OC}, DType::bf16);
  EXPECT_THROW_WITH(ops::matmul_backward(none, none, db_h, dout, inp, w), Error, "matmul_backward",
                    "dbias must be f32", "got bf16");
  Tensor dinp32 = Tensor::zeros({N, C});
  EXPECT_THROW_WITH(ops::matmul_backward(dinp32, none, none, dout, inp, w), Error,
                    "matmul_backward", "dinp must be bf16 (the compute dtype, that of inp), got f32");
  Tensor dw32 = Tensor::zeros({OC, C}), db32 = Tensor::zeros({OC}), dinp = Tensor::zeros({N, C}, DType::bf16);
  ops::matmul_backward(dinp, dw32, db32, dout, inp, w);  // the contract's dtypes pass

  // gemm: c in the compute dtype or fp32, nothing else.
  Tensor a = Tensor::zeros({2, 3}, DType::bf16), b = Tensor::zeros({3, 4}, DType::bf16);
  Tensor c_i = Tensor::zeros({2, 4}, DType::i32), c32 = Tensor::zeros({2, 4});
  EXPECT_THROW_WITH(ops::gemm(c_i, a, b, false, false), Error, "gemm", "c must be bf16 or f32",
                    "got i32");
  ops::gemm(c32, a, b, false, false);
  Tensor a32 = Tensor::zeros({2, 3}), c_h = Tensor::zeros({2, 4}, DType::bf16);
  EXPECT_THROW_WITH(ops::gemm(c_h, a32, b, false, false), Error, "gemm",
                    "b must be f32 (the compute dtype, that of a), got bf16");

  // LayerNorm: statistics fp32, the rest in the compute dtype.
  Tensor x = Tensor::zeros({2, 3, 8}, DType::bf16), y = Tensor::zeros({2, 3, 8}, DType::bf16);
  Tensor lw = Tensor::zeros({8}, DType::bf16), lb = Tensor::zeros({8}, DType::bf16);
  Tensor mean = Tensor::zeros({6}), rstd = Tensor::zeros({6});
  Tensor lw32 = Tensor::zeros({8}), rstd_h = Tensor::zeros({6}, DType::bf16);
  EXPECT_THROW_WITH(ops::layernorm_forward(y, mean, rstd, x, lw32, lb), Error, "layernorm_forward",
                    "weight must be bf16 (the compute dtype, that of inp), got f32 (8,)");
  EXPECT_THROW_WITH(ops::layernorm_forward(y, mean, rstd_h, x, lw, lb), Error, "layernorm_forward",
                    "rstd must be f32 (fp32 in every compute dtype), got bf16 (6,)");
  Tensor ldw_h = Tensor::zeros({8}, DType::bf16);
  EXPECT_THROW_WITH(ops::layernorm_backward(none, ldw_h, none, y, x, lw, mean, rstd), Error,
                    "layernorm_backward", "dweight must be f32", "got bf16");

  // Attention, cross-entropy, embedding.
  Tensor qkv = Tensor::zeros({1, 4, 24}, DType::bf16), ao = Tensor::zeros({1, 4, 8}, DType::bf16);
  Tensor lse_h = Tensor::zeros({1, 2, 4}, DType::bf16);
  EXPECT_THROW_WITH(ops::attention_forward(ao, lse_h, qkv, 2), Error, "attention_forward",
                    "lse must be f32", "got bf16 (1, 2, 4)");
  Tensor logits = Tensor::zeros({3, 7}, DType::bf16), targets = Tensor::zeros({3}, DType::i32);
  Tensor losses_h = Tensor::zeros({3}, DType::bf16), lse3 = Tensor::zeros({3});
  EXPECT_THROW_WITH(ops::crossentropy_forward(losses_h, lse3, logits, targets), Error,
                    "crossentropy_forward", "losses must be f32", "got bf16 (3,)");
  Tensor dlogits32 = Tensor::zeros({3, 7});
  EXPECT_THROW_WITH(ops::crossentropy_backward(dlogits32, logits, lse3, targets, 1.0f), Error,
                    "crossentropy_backward", "dlogits must be bf16", "got f32 (3, 7)");
  Tensor tokens = Tensor::zeros({1, 3}, DType::i32), eo = Tensor::zeros({1, 3, 4}, DType::bf16);
  Tensor wte = Tensor::zeros({5, 4}, DType::bf16), wpe32 = Tensor::zeros({3, 4});
  EXPECT_THROW_WITH(ops::embedding_forward(eo, tokens, wte, wpe32), Error, "embedding_forward",
                    "wpe must be bf16 (the compute dtype, that of wte), got f32 (3, 4)");
  Tensor dwte_h = Tensor::zeros({5, 4}, DType::bf16);
  EXPECT_THROW_WITH(ops::embedding_backward(dwte_h, none, eo, tokens), Error, "embedding_backward",
                    "dwte must be f32", "got bf16 (5, 4)");

  // AdamW: fp32 state; the compute copy is bf16 (an f32 run has none).
  Tensor p = Tensor::zeros({5}), g = Tensor::zeros({5}), m = Tensor::zeros({5}), v = Tensor::zeros({5});
  Tensor p_h = Tensor::zeros({5}, DType::bf16), copy32 = Tensor::zeros({5}), copy4 = Tensor::zeros({4}, DType::bf16);
  EXPECT_THROW_WITH(ops::adamw_step(p_h, g, m, v, AdamWConfig{}, 1), Error, "adamw_step",
                    "param must be f32", "got bf16");
  EXPECT_THROW_WITH(ops::adamw_step(p, copy32, g, m, v, AdamWConfig{}, 1), Error, "adamw_step",
                    "param_copy (the compute copy) must be bf16 or f16, got f32",
                    "an f32 run computes on the master weights");
  EXPECT_THROW_WITH(ops::adamw_step(p, copy4, g, m, v, AdamWConfig{}, 1), Error, "adamw_step",
                    "param_copy has 4 elements", "expected 5");

  // Elementwise: one dtype, except an fp32 accumulator of bf16 values.
  Tensor e_h = Tensor::zeros({6}, DType::bf16), e32 = Tensor::zeros({6});
  EXPECT_THROW_WITH(ops::add(e_h, e_h, e32), Error, "add", "b must be bf16", "got f32 (6,)");
  EXPECT_THROW_WITH(ops::scale(e32, e_h, 2.0f), Error, "scale", "out must be bf16", "got f32");
  EXPECT_THROW_WITH(ops::axpy(e_h, e32, 1.0f), Error, "axpy", "out must be f32", "got bf16 (6,)");
  ops::axpy(e32, e_h, 1.0f);
}

// ---- every op, bf16 against fp32 --------------------------------------------------------------

TEST(PrecisionOps, MatmulForwardAndBackward) {
  const int N = 7, C = 13, OC = 11;
  const Pair inp = pair({N, C}, 1), w = pair({OC, C}, 2), bias = pair({OC}, 3), dout = pair({N, OC}, 4);
  for (bool with_bias : {true, false}) {
    Pair out = poisoned_pair({N, OC});
    ops::matmul_forward(out.f, inp.f, w.f, with_bias ? bias.f : Tensor());
    ops::matmul_forward(out.h, inp.h, w.h, with_bias ? bias.h : Tensor());
    EXPECT_TRUE(agrees(with_bias ? "out (bias)" : "out", out.h, out.f, 1, C + 1));
  }
  // Gradients accumulate into what is there: start both paths from the same values.
  const Pair dinp0 = pair({N, C}, 5), dw0 = pair({OC, C}, 6), db0 = pair({OC}, 7);
  Pair dinp = clone(dinp0);
  Tensor dw_f = dw0.f.clone(), dw_h = dw0.f.clone(), db_f = db0.f.clone(), db_h = db0.f.clone();
  ops::matmul_backward(dinp.f, dw_f, db_f, dout.f, inp.f, w.f);
  ops::matmul_backward(dinp.h, dw_h, db_h, dout.h, inp.h, w.h);
  EXPECT_TRUE(agrees("dinp", dinp.h, dinp.f, 1, OC + 1));
  EXPECT_TRUE(agrees("dweight (fp32)", dw_h, dw_f, 0, N + 1));
  EXPECT_TRUE(agrees("dbias (fp32)", db_h, db_f, 0, N + 1));
}

TEST(PrecisionOps, GemmBf16AndFp32Results) {
  const int batch = 2, m = 5, n = 7, k = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + ", trans_b " + (tb ? "1" : "0"));
      const Pair a = pair(ta ? Shape{batch, k, m} : Shape{batch, m, k}, 10 + ta);
      const Pair b = pair(tb ? Shape{batch, n, k} : Shape{batch, k, n}, 12 + tb);
      const Pair c0 = pair({batch, m, n}, 14);
      Pair c = clone(c0);
      Tensor c_acc = c0.f.clone();  // an fp32 result of bf16 operands
      ops::gemm(c.f, a.f, b.f, ta, tb, 0.75f, -1.5f);
      ops::gemm(c.h, a.h, b.h, ta, tb, 0.75f, -1.5f);
      ops::gemm(c_acc, a.h, b.h, ta, tb, 0.75f, -1.5f);
      EXPECT_TRUE(agrees("c bf16", c.h, c.f, 1, k + 1));
      EXPECT_TRUE(agrees("c f32 of bf16 operands", c_acc, c.f, 0, k + 1));
      // beta = 0 never reads c (BLAS semantics): a poisoned c is overwritten.
      Pair fresh = poisoned_pair({batch, m, n});
      ops::gemm(fresh.f, a.f, b.f, ta, tb, 1.0f, 0.0f);
      ops::gemm(fresh.h, a.h, b.h, ta, tb, 1.0f, 0.0f);
      EXPECT_TRUE(agrees("c bf16, beta 0", fresh.h, fresh.f, 1, k));
    }
}

TEST(PrecisionOps, Layernorm) {
  const int B = 2, T = 3, C = 13, N = B * T;
  const Pair x = pair({B, T, C}, 20, -2.0f, 2.0f), w = pair({C}, 21, 0.5f, 1.5f), b = pair({C}, 22);
  Pair out = poisoned_pair({B, T, C}), mean = poisoned_fp32_pair({N}), rstd = poisoned_fp32_pair({N});
  ops::layernorm_forward(out.f, mean.f, rstd.f, x.f, w.f, b.f);
  ops::layernorm_forward(out.h, mean.h, rstd.h, x.h, w.h, b.h);
  EXPECT_TRUE(agrees("out", out.h, out.f, 1, C));
  EXPECT_TRUE(agrees("mean (fp32)", mean.h, mean.f, 0, C));
  EXPECT_TRUE(agrees("rstd (fp32)", rstd.h, rstd.f, 0, C));

  const Pair dout = pair({B, T, C}, 23), dinp0 = pair({B, T, C}, 24), dw0 = pair({C}, 25), db0 = pair({C}, 26);
  Pair dinp = clone(dinp0);
  Tensor dw_f = dw0.f.clone(), dw_h = dw0.f.clone(), db_f = db0.f.clone(), db_h = db0.f.clone();
  // Both backward passes from the same statistics (those of the fp32 forward).
  ops::layernorm_backward(dinp.f, dw_f, db_f, dout.f, x.f, w.f, mean.f, rstd.f);
  ops::layernorm_backward(dinp.h, dw_h, db_h, dout.h, x.h, w.h, mean.f, rstd.f);
  EXPECT_TRUE(agrees("dinp", dinp.h, dinp.f, 1, C));
  EXPECT_TRUE(agrees("dweight (fp32)", dw_h, dw_f, 0, N));
  EXPECT_TRUE(agrees("dbias (fp32)", db_h, db_f, 0, N));
}

TEST(PrecisionOps, Gelu) {
  const Shape s{37};
  const Pair x = pair(s, 30, -3.0f, 3.0f), dout = pair(s, 31), dinp0 = pair(s, 32);
  Pair out = poisoned_pair(s);
  ops::gelu_forward(out.f, x.f);
  ops::gelu_forward(out.h, x.h);
  // k = 8: an elementwise function of fp32 tanh, a few ulps apart between implementations.
  EXPECT_TRUE(agrees("out", out.h, out.f, 1, 8));
  Pair dinp = clone(dinp0);
  ops::gelu_backward(dinp.f, x.f, dout.f);
  ops::gelu_backward(dinp.h, x.h, dout.h);
  EXPECT_TRUE(agrees("dinp", dinp.h, dinp.f, 1, 8));
}

TEST(PrecisionOps, Attention) {
  for (const auto& [T, C, NH] : {std::array<int, 3>{9, 15, 3}, {1, 8, 2}, {17, 32, 2}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", C " + std::to_string(C) + ", NH " + std::to_string(NH));
    const int B = 2, HS = C / NH;
    const Pair qkv = pair({B, T, 3 * C}, 40 + T);
    Pair out = poisoned_pair({B, T, C});
    Pair lse = poisoned_fp32_pair({B, NH, T});
    ops::attention_forward(out.f, lse.f, qkv.f, NH);
    ops::attention_forward(out.h, lse.h, qkv.h, NH);
    EXPECT_TRUE(agrees("out", out.h, out.f, 2, T + HS));
    EXPECT_TRUE(agrees("lse (fp32)", lse.h, lse.f, 0, T + HS));
    // Backward from the same forward results: the bf16 path's out (representable in both)
    // and the fp32 lse.
    const Pair dout = pair({B, T, C}, 50 + T), dqkv0 = pair({B, T, 3 * C}, 60 + T);
    const Tensor out_same = out.h.to(DType::f32);
    Pair dqkv = clone(dqkv0);
    ops::attention_backward(dqkv.f, dout.f, qkv.f, out_same, lse.f, NH);
    ops::attention_backward(dqkv.h, dout.h, qkv.h, out.h, lse.f, NH);
    EXPECT_TRUE(agrees("dqkv", dqkv.h, dqkv.f, 2, T + HS));
  }
}

TEST(PrecisionOps, CrossEntropy) {
  const int B = 2, T = 5, V = 37, N = B * T;
  const Pair logits = pair({B, T, V}, 70, -4.0f, 4.0f);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = (i * 7) % V;
  t[3] = -1;  // ignored
  const Tensor targets = Tensor::from_vector(t, {N});
  Pair losses = poisoned_fp32_pair({N}), lse = poisoned_fp32_pair({N});
  ops::crossentropy_forward(losses.f, lse.f, logits.f, targets);
  ops::crossentropy_forward(losses.h, lse.h, logits.h, targets);
  EXPECT_TRUE(agrees("losses (fp32)", losses.h, losses.f, 0, V));
  EXPECT_TRUE(agrees("lse (fp32)", lse.h, lse.f, 0, V));
  EXPECT_EQ(losses.h.to_vector()[3], 0.0f);
  const Pair dlogits0 = pair({B, T, V}, 71);
  Pair dlogits = clone(dlogits0);
  ops::crossentropy_backward(dlogits.f, logits.f, lse.f, targets, 0.3f);
  ops::crossentropy_backward(dlogits.h, logits.h, lse.f, targets, 0.3f);
  EXPECT_TRUE(agrees("dlogits", dlogits.h, dlogits.f, 1, 8));
  // The ignored row is left as it was.
  EXPECT_EQ(dlogits.h.flat_slice(3 * V, V).to_vector(), dlogits0.h.flat_slice(3 * V, V).to_vector());
}

TEST(PrecisionOps, Embedding) {
  const int B = 2, T = 9, V = 23, C = 13, Tmax = 11;
  std::vector<int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 5) % 7;  // repeated tokens
  const Tensor tokens = Tensor::from_vector(tok, {B, T});
  const Pair wte = pair({V, C}, 80), wpe = pair({Tmax, C}, 81);
  Pair out = poisoned_pair({B, T, C});
  ops::embedding_forward(out.f, tokens, wte.f, wpe.f);
  ops::embedding_forward(out.h, tokens, wte.h, wpe.h);
  EXPECT_TRUE(agrees("out", out.h, out.f, 1, 2));
  const Pair dout = pair({B, T, C}, 82), dwte0 = pair({V, C}, 83), dwpe0 = pair({Tmax, C}, 84);
  Tensor dwte_f = dwte0.f.clone(), dwte_h = dwte0.f.clone(), dwpe_f = dwpe0.f.clone(), dwpe_h = dwpe0.f.clone();
  ops::embedding_backward(dwte_f, dwpe_f, dout.f, tokens);
  ops::embedding_backward(dwte_h, dwpe_h, dout.h, tokens);
  EXPECT_TRUE(agrees("dwte (fp32)", dwte_h, dwte_f, 0, B * T));
  EXPECT_TRUE(agrees("dwpe (fp32)", dwpe_h, dwpe_f, 0, B));
}

TEST(PrecisionOps, AdamWWritesTheComputeCopyInTheSamePass) {
  const int64_t n = 1001;
  const Tensor p0 = Tensor::from_vector(bf16_values(n, 90), {n});
  const Tensor g = Tensor::from_vector(bf16_values(n, 91), {n});
  const Tensor m0 = Tensor::from_vector(bf16_values(n, 92, -0.1f, 0.1f), {n});
  const Tensor v0 = Tensor::from_vector(bf16_values(n, 93, 0.0f, 0.01f), {n});
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
  Tensor p2 = p0.clone(), m2 = m0.clone(), v2 = v0.clone(), copy = poisoned({n}, DType::bf16);
  ops::adamw_step(p, g, m, v, cfg, 3);
  ops::adamw_step(p2, copy, g, m2, v2, cfg, 3);
  // The master and moments follow the fp32 step (elementwise: a few ulps).
  EXPECT_TRUE(agrees("master", p2, p, 0, 8));
  EXPECT_TRUE(agrees("m", m2, m, 0, 8));
  EXPECT_TRUE(agrees("v", v2, v, 0, 8));
  // The copy is the updated master rounded once.
  std::vector<float> rounded = p2.to_vector();
  for (float& x : rounded) x = (float)bf16(x);
  EXPECT_TRUE(test::bitwise_equal("compute copy", copy.to_vector(), rounded));
}

TEST(PrecisionOps, ElementwiseReductionsFillConvertRandom) {
  const int64_t n = 101;
  const Pair a = pair({n}, 100), b = pair({n}, 101), acc0 = pair({n}, 102);
  Pair sum_ab = poisoned_pair({n}), scaled = poisoned_pair({n});
  ops::add(sum_ab.f, a.f, b.f);
  ops::add(sum_ab.h, a.h, b.h);
  EXPECT_TRUE(agrees("add", sum_ab.h, sum_ab.f, 1, 1));
  ops::scale(scaled.f, a.f, -0.37f);
  ops::scale(scaled.h, a.h, -0.37f);
  EXPECT_TRUE(agrees("scale", scaled.h, scaled.f, 1, 1));
  Pair acc = clone(acc0);
  Tensor acc32 = acc0.f.clone();
  ops::axpy(acc.f, a.f, 1.5f);
  ops::axpy(acc.h, a.h, 1.5f);
  ops::axpy(acc32, a.h, 1.5f);  // fp32 accumulation of bf16 values
  EXPECT_TRUE(agrees("axpy", acc.h, acc.f, 1, 1));
  EXPECT_TRUE(agrees("axpy into fp32", acc32, acc.f, 0, 1));
  // Reductions accumulate in double: the same values give the same sums up to n double ulps.
  EXPECT_NEAR(ops::sum(a.h), ops::sum(a.f), n * n * DBL_EPSILON);
  EXPECT_NEAR(ops::sum_squares(a.h), ops::sum_squares(a.f), n * n * DBL_EPSILON);

  Tensor filled = Tensor::empty({n}, DType::bf16);
  ops::fill(filled, 1.3f);
  EXPECT_EQ(filled.to_vector(), std::vector<float>(n, (float)bf16(1.3f)));
  // Conversion: f32 -> bf16 rounds to nearest even (NaN stays NaN), bf16 -> f32 is exact.
  const std::vector<float> values = {1.0f, 1.00390625f, -3.0e38f, 1e-40f, INFINITY, NAN};
  Tensor h = Tensor::empty({6}, DType::bf16), back = poisoned({6}, DType::f32);
  ops::convert(h, Tensor::from_vector(values, {6}));
  ops::convert(back, h);
  const std::vector<float> got = back.to_vector();
  for (size_t i = 0; i + 1 < values.size(); ++i) EXPECT_EQ(got[i], (float)bf16(values[i])) << i;
  EXPECT_TRUE(std::isnan(got[5]));
  // Random numbers: the bf16 stream is the fp32 stream rounded.
  Tensor u32 = Tensor::empty({n}), u16 = Tensor::empty({n}, DType::bf16);
  ops::normal_(u32, 7, 3, 0.5f, 2.0f);
  ops::normal_(u16, 7, 3, 0.5f, 2.0f);
  std::vector<float> rounded = u32.to_vector();
  for (float& x : rounded) x = (float)bf16(x);
  EXPECT_TRUE(test::bitwise_equal("normal_ bf16", u16.to_vector(), rounded));
}

// ---- dtype helpers -----------------------------------------------------------------------------

TEST(PrecisionNames, ComputeDtypeFromName) {
  EXPECT_EQ(compute_dtype_from_name("bf16"), DType::bf16);
  EXPECT_EQ(compute_dtype_from_name("fp32"), DType::f32);
  EXPECT_EQ(compute_dtype_from_name("f32"), DType::f32);
  EXPECT_EQ(dtype_from_name("fp32"), DType::f32);
  // A name a user gave: an input error, told without a source location.
  // fp16 is a dtype the CUDA ops compute in, not yet one a run can choose.
  EXPECT_THROW_WITH(compute_dtype_from_name("fp16", "--dtype"), InputError,
                    "--dtype: unknown value 'fp16'", "valid: bf16, fp32 (or f32)");
  EXPECT_THROW_WITH(check_compute_dtype(DType::f16, "GPT"), Error, "GPT", "must be f32 or bf16, got f16");
  EXPECT_THROW_WITH(compute_dtype_from_name("i32", "--dtype"), InputError, "'i32'", "bf16, fp32");
  try {
    compute_dtype_from_name("int8", "--dtype");
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find(".cpp:"), std::string::npos) << e.what();
  }
  EXPECT_THROW_WITH(check_compute_dtype(DType::i32, "GPT"), Error, "GPT",
                    "must be f32 or bf16, got i32");
}

// /proc/cpuinfo's flags, an independent oracle of the cpuid query (Linux names).
bool cpuinfo_has(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w)
      if (w == flag) return true;
    return false;
  }
  return false;
}

TEST(PrecisionDevices, NativeBf16) {
  if (!std::ifstream("/proc/cpuinfo").good()) GTEST_SKIP() << "no /proc/cpuinfo to compare with";
  const bool expected = cpuinfo_has("avx512_bf16") || cpuinfo_has("amx_bf16");
  EXPECT_EQ(cpu_has_native_bf16(), expected);
  // The compute dtype it gives a run: dist/plan/compute_dtype.h (tests/dist_engine).
}

TEST(PrecisionDevices, BackendSupports) {
  EXPECT_TRUE(backend_supports(Device::cpu(), DType::f32));
  EXPECT_TRUE(backend_supports(Device::cpu(5), DType::bf16));
  EXPECT_FALSE(backend_supports(Device::cpu(), DType::i32));
  check_backend_supports(Device::cpu(), DType::bf16, "--dtype");
#ifdef GPUMIX_CORE_CUDA
  // The CUDA kernels compute in bf16 only (whether or not a GPU is present).
  EXPECT_TRUE(backend_supports(Device::cuda(0), DType::bf16));
  EXPECT_FALSE(backend_supports(Device::cuda(0), DType::f32));
  EXPECT_THROW_WITH(check_backend_supports(Device::cuda(1), DType::f32, "--dtype"), InputError,
                    "--dtype f32 on cuda:1", "the CUDA backend computes in bf16",
                    "use --dtype bf16");
#else
  EXPECT_FALSE(backend_supports(Device::cuda(0), DType::bf16));
  EXPECT_THROW_WITH(check_backend_supports(Device::cuda(0), DType::bf16, "--dtype"), InputError,
                    "cuda:0", "lacks", "-Dcuda=enabled");
#endif
}

}  // namespace
}  // namespace gpumix
