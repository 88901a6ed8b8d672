// The CUDA backend through core/ops, against the CPU bf16 backend (its oracle) on the same
// inputs: every Backend op (odd shapes, NaN-poisoned outputs, accumulation into non-zero
// gradients), the allocator on cuda devices (capacity, peak, OutOfMemory with the numbers),
// events between the compute and comm streams, the emulated slowdown without host waits,
// host <-> device copies, and two logical devices on one GPU. Without a GPU every test
// skips with the runtime's reason.
//
// Tolerance: test::bf16_rtol(R, k) of every element against the scale of the output
// (test::close_to_scale), with R the bf16 roundings of BOTH paths together (each rounds
// its own fp32 value: two results rounded once each are up to 2 units of roundoff apart)
// and k the reduction length (fp32 sums in another order).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "core/allocator.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/runtime.h"
#include "core/slowdown.h"
#include "core/stream.h"
#include "kernels/cuda/cuda.h"
#include "tests/core/test_util.h"

namespace gpumix {
namespace {

using test::bf16_rtol;
using test::bf16_values;
using test::close_to_scale;

const Device kGpu = Device::cuda(0);

class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

// The same values on the CPU (c) and on the GPU (g).
struct Pair {
  Tensor c, g;
};
Pair pair(const Shape& shape, uint32_t seed, DType dtype = DType::bf16, float lo = -1.0f,
          float hi = 1.0f) {
  const Tensor c = Tensor::from_vector(bf16_values(shape.numel(), seed, lo, hi), shape).to(dtype);
  return {c, c.to(kGpu)};
}
Pair clone(const Pair& p) { return {p.c.clone(), p.g.clone()}; }
// NaN everywhere: an element that a kernel forgets to write fails the comparison.
Pair poisoned(const Shape& shape, DType dtype = DType::bf16) {
  return {Tensor::full(shape, NAN, dtype), Tensor::full(shape, NAN, dtype, kGpu)};
}

::testing::AssertionResult agrees(const char* what, const Pair& p, int R, int64_t k) {
  return close_to_scale(what, p.g.to_vector(), p.c.to_vector(), bf16_rtol(R, k));
}

// ---- every op against the CPU bf16 backend --------------------------------------------------

TEST_F(CudaBackend, Matmul) {
  for (const auto& [N, C, OC] : {std::array<int, 3>{7, 13, 11}, {64, 96, 40}, {1, 8, 3}}) {
    SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " OC " + std::to_string(OC));
    const Pair inp = pair({N, C}, 1), w = pair({OC, C}, 2), bias = pair({OC}, 3), dout = pair({N, OC}, 4);
    for (bool with_bias : {true, false}) {
      Pair out = poisoned({N, OC});
      ops::matmul_forward(out.c, inp.c, w.c, with_bias ? bias.c : Tensor());
      ops::matmul_forward(out.g, inp.g, w.g, with_bias ? bias.g : Tensor());
      EXPECT_TRUE(agrees("out", out, 2, C + 1));
    }
    Pair dinp = pair({N, C}, 5), dw = pair({OC, C}, 6, DType::f32), db = pair({OC}, 7, DType::f32);
    ops::matmul_backward(dinp.c, dw.c, db.c, dout.c, inp.c, w.c);
    ops::matmul_backward(dinp.g, dw.g, db.g, dout.g, inp.g, w.g);
    EXPECT_TRUE(agrees("dinp (accumulated)", dinp, 2, OC + 1));
    EXPECT_TRUE(agrees("dweight (fp32, accumulated)", dw, 0, N + 1));
    EXPECT_TRUE(agrees("dbias (fp32, accumulated)", db, 0, N + 1));
  }
}

// The fused epilogues and first writes against the CPU bf16 backend (which runs the separate
// passes): the GPU rounds the GELU input and output once each from fp32, the CPU the product,
// then the GELU of the rounded value: 3 roundings; the DGELU product likewise.
TEST_F(CudaBackend, FusedEpiloguesAndFirstWrites) {
  for (const auto& [N, C, OC] : {std::array<int, 3>{7, 16, 24}, {64, 96, 40}}) {
    SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " OC " + std::to_string(OC));
    const Pair inp = pair({N, C}, 40), w = pair({OC, C}, 41), bias = pair({OC}, 42),
               dout = pair({N, OC}, 43), x = pair({N, C}, 44, DType::bf16, -3.0f, 3.0f);
    Pair out = poisoned({N, OC}), pre = poisoned({N, OC});
    ops::matmul_gelu_forward(out.c, pre.c, inp.c, w.c, bias.c);
    ops::matmul_gelu_forward(out.g, pre.g, inp.g, w.g, bias.g);
    EXPECT_TRUE(agrees("pre", pre, 2, C + 1));
    EXPECT_TRUE(agrees("gelu(pre)", out, 3, C + 9));
    Pair dx = poisoned({N, C});  // written, never read
    ops::matmul_backward_dgelu(dx.c, dout.c, w.c, x.c);
    ops::matmul_backward_dgelu(dx.g, dout.g, w.g, x.g);
    EXPECT_TRUE(agrees("dgelu", dx, 3, OC + 9));
    Pair dinp = poisoned({N, C}), dw = poisoned({OC, C}, DType::f32), db = poisoned({OC}, DType::f32);
    ops::matmul_backward_write(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, true, true);
    ops::matmul_backward_write(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, true, true);
    EXPECT_TRUE(agrees("dinp (written)", dinp, 2, OC + 1));
    EXPECT_TRUE(agrees("dweight (written)", dw, 0, N + 1));
    EXPECT_TRUE(agrees("dbias (written, BGRADB)", db, 0, N + 1));
    ops::matmul_backward_write(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, false, false);
    ops::matmul_backward_write(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, false, false);
    EXPECT_TRUE(agrees("dinp (then accumulated)", dinp, 3, 2 * OC + 2));
    EXPECT_TRUE(agrees("dweight (then accumulated)", dw, 0, 2 * N + 2));
    EXPECT_TRUE(agrees("dbias (then accumulated, BGRADB + add)", db, 0, 2 * N + 2));
  }
}

TEST_F(CudaBackend, GemmBf16AndFp32Results) {
  const int batch = 3, m = 5, n = 7, k = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0"));
      const Pair a = pair(ta ? Shape{batch, k, m} : Shape{batch, m, k}, 10 + ta);
      const Pair b = pair(tb ? Shape{batch, n, k} : Shape{batch, k, n}, 12 + tb);
      Pair c = pair({batch, m, n}, 14), c32 = pair({batch, m, n}, 15, DType::f32);
      ops::gemm(c.c, a.c, b.c, ta, tb, 0.75f, -1.5f);
      ops::gemm(c.g, a.g, b.g, ta, tb, 0.75f, -1.5f);
      ops::gemm(c32.c, a.c, b.c, ta, tb, 0.75f, -1.5f);
      ops::gemm(c32.g, a.g, b.g, ta, tb, 0.75f, -1.5f);
      EXPECT_TRUE(agrees("c bf16", c, 2, k + 1));
      EXPECT_TRUE(agrees("c fp32", c32, 0, k + 1));
      Pair fresh = poisoned({batch, m, n});  // beta 0 never reads c
      ops::gemm(fresh.c, a.c, b.c, ta, tb, 1.0f, 0.0f);
      ops::gemm(fresh.g, a.g, b.g, ta, tb, 1.0f, 0.0f);
      EXPECT_TRUE(agrees("c bf16, beta 0", fresh, 2, k));
    }
}

TEST_F(CudaBackend, Layernorm) {
  const int B = 3, T = 5, C = 77, N = B * T;
  const Pair x = pair({B, T, C}, 20, DType::bf16, -2.0f, 2.0f), w = pair({C}, 21, DType::bf16, 0.5f, 1.5f);
  const Pair b = pair({C}, 22);
  Pair out = poisoned({B, T, C}), mean = poisoned({N}, DType::f32), rstd = poisoned({N}, DType::f32);
  ops::layernorm_forward(out.c, mean.c, rstd.c, x.c, w.c, b.c);
  ops::layernorm_forward(out.g, mean.g, rstd.g, x.g, w.g, b.g);
  EXPECT_TRUE(agrees("out", out, 2, C));
  EXPECT_TRUE(agrees("mean (fp32)", mean, 0, C));
  EXPECT_TRUE(agrees("rstd (fp32)", rstd, 0, C));
  const Pair dout = pair({B, T, C}, 23);
  Pair dinp = pair({B, T, C}, 24), dw = pair({C}, 25, DType::f32), db = pair({C}, 26, DType::f32);
  ops::layernorm_backward(dinp.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c);
  ops::layernorm_backward(dinp.g, dw.g, db.g, dout.g, x.g, w.g, mean.g, rstd.g);
  EXPECT_TRUE(agrees("dinp (accumulated)", dinp, 2, C));
  EXPECT_TRUE(agrees("dweight (fp32)", dw, 0, N));
  EXPECT_TRUE(agrees("dbias (fp32)", db, 0, N));
}

TEST_F(CudaBackend, Gelu) {
  for (int64_t n : {(int64_t)1, (int64_t)37, (int64_t)4099}) {
    const Pair x = pair({n}, 30, DType::bf16, -3.0f, 3.0f), dout = pair({n}, 31);
    Pair out = poisoned({n}), dinp = pair({n}, 32);
    ops::gelu_forward(out.c, x.c);
    ops::gelu_forward(out.g, x.g);
    // k = 8: an elementwise function of fp32 tanh, a few ulps apart between implementations.
    EXPECT_TRUE(agrees("out", out, 2, 8));
    ops::gelu_backward(dinp.c, x.c, dout.c);
    ops::gelu_backward(dinp.g, x.g, dout.g);
    EXPECT_TRUE(agrees("dinp (accumulated)", dinp, 2, 8));
  }
}

TEST_F(CudaBackend, Attention) {
  // Head sizes 5 (the reference kernels), 16 and 64 (flash); T odd and 1.
  for (const auto& [T, C, NH] : {std::array<int, 3>{9, 15, 3}, {1, 32, 2}, {37, 128, 2}, {130, 64, 4}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " C " + std::to_string(C) + " NH " + std::to_string(NH));
    const int B = 2, HS = C / NH;
    const Pair qkv = pair({B, T, 3 * C}, 40 + T);
    Pair out = poisoned({B, T, C}), lse = poisoned({B, NH, T}, DType::f32);
    ops::attention_forward(out.c, lse.c, qkv.c, NH);
    ops::attention_forward(out.g, lse.g, qkv.g, NH);
    // Each side rounds the probabilities and the output (2 + 2).
    EXPECT_TRUE(agrees("out", out, 4, T + HS));
    EXPECT_TRUE(agrees("lse (fp32)", lse, 0, T + HS));
    // Backward from the same forward results (the CPU's).
    const Pair dout = pair({B, T, C}, 50 + T);
    Pair dqkv = pair({B, T, 3 * C}, 60 + T);
    const Tensor out_g = out.c.to(kGpu), lse_g = lse.c.to(kGpu);
    ops::attention_backward(dqkv.c, dout.c, qkv.c, out.c, lse.c, NH);
    ops::attention_backward(dqkv.g, dout.g, qkv.g, out_g, lse_g, NH);
    EXPECT_TRUE(agrees("dqkv (accumulated)", dqkv, 4, T + HS));
  }
}

// Incremental decoding's attention (the fast kernel: head sizes up to 256; the reference
// beyond): one query row against cached rows 0..pos, against the CPU bf16 backend. The
// rows past pos hold NaN: a read beyond the causal limit fails.
TEST_F(CudaBackend, AttentionDecode) {
  for (const auto& [Tc, C, NH, pos] : {std::array<int, 4>{9, 15, 3, 0}, {40, 64, 4, 17}, {130, 128, 2, 129},
                                       {70, 768, 12, 69}, {12, 600, 2, 5}}) {
    SCOPED_TRACE("Tc " + std::to_string(Tc) + " C " + std::to_string(C) + " NH " + std::to_string(NH) + " pos " +
                 std::to_string(pos));
    const int B = 2, HS = C / NH;
    Tensor host = Tensor::from_vector(bf16_values((int64_t)B * Tc * 3 * C, 80 + pos, -2.0f, 2.0f), {B, Tc, 3 * C});
    float* h = host.data<float>();
    for (int b = 0; b < B; b++)
      for (int64_t i = ((int64_t)b * Tc + pos + 1) * 3 * C; i < ((int64_t)b + 1) * Tc * 3 * C; i++) h[i] = NAN;
    const Pair qkv = {host.to(DType::bf16), host.to(DType::bf16).to(kGpu)};
    Pair out = poisoned({B, 1, C});
    ops::attention_decode(out.c, qkv.c, pos, NH);
    ops::attention_decode(out.g, qkv.g, pos, NH);
    EXPECT_TRUE(agrees("out", out, 2, pos + 1 + HS));  // each side rounds its output once
  }
}

TEST_F(CudaBackend, CrossEntropy) {
  const int B = 2, T = 5, V = 1037, N = B * T;
  const Pair logits = pair({B, T, V}, 70, DType::bf16, -4.0f, 4.0f);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = (i * 97) % V;
  t[3] = -1;  // ignored
  const Tensor targets = Tensor::from_vector(t, {N}), targets_g = targets.to(kGpu);
  Pair losses = poisoned({N}, DType::f32), lse = poisoned({N}, DType::f32);
  ops::crossentropy_forward(losses.c, lse.c, logits.c, targets);
  ops::crossentropy_forward(losses.g, lse.g, logits.g, targets_g);
  EXPECT_TRUE(agrees("losses (fp32)", losses, 0, V));
  EXPECT_TRUE(agrees("lse (fp32)", lse, 0, V));
  EXPECT_EQ(losses.g.to_vector()[3], 0.0f);
  const Pair dlogits0 = pair({B, T, V}, 71);
  Pair dlogits = clone(dlogits0);
  ops::crossentropy_backward(dlogits.c, logits.c, lse.c, targets, 0.3f);
  ops::crossentropy_backward(dlogits.g, logits.g, lse.g, targets_g, 0.3f);
  EXPECT_TRUE(agrees("dlogits (accumulated)", dlogits, 2, 8));
  EXPECT_EQ(dlogits.g.flat_slice(3 * V, V).to_vector(), dlogits0.c.flat_slice(3 * V, V).to_vector());
}

TEST_F(CudaBackend, LossAndItsGradientWithoutHostReads) {
  // autograd's cross-entropy: the loss summed on the device (sum_to) and the backward's
  // factor read there (scale x dloss); against the CPU (sums in double: an fp32 rounding).
  const int N = 9, V = 515;
  const Pair logits = pair({N, V}, 80, DType::bf16, -3.0f, 3.0f);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = (i * 31) % V;
  const Tensor targets = Tensor::from_vector(t, {N}), targets_g = targets.to(kGpu);
  Pair losses = poisoned({N}, DType::f32), lse = poisoned({N}, DType::f32);
  ops::crossentropy_forward(losses.c, lse.c, logits.c, targets);
  ops::crossentropy_forward(losses.g, lse.g, logits.g, targets_g);
  Pair loss = poisoned({1}, DType::f32);
  ops::sum_to(loss.c, losses.c, 1.0 / N);
  ops::sum_to(loss.g, losses.g, 1.0 / N);
  EXPECT_TRUE(agrees("loss (fp32)", loss, 0, N));
  const Pair dloss = pair({1}, 81, DType::f32, 0.5f, 1.5f);
  const Pair dlogits0 = pair({N, V}, 82);
  Pair dlogits = clone(dlogits0);
  ops::crossentropy_backward(dlogits.c, logits.c, lse.c, targets, dloss.c, 0.25f);
  ops::crossentropy_backward(dlogits.g, logits.g, lse.g, targets_g, dloss.g, 0.25f);
  EXPECT_TRUE(agrees("dlogits (factor on the device)", dlogits, 2, 8));
}

// The fused classifier on a padded vocabulary, vectorised (Vp a multiple of 8, V not) and
// not (Vp odd), against the CPU backend's: losses, lse, dlogits written over the logits
// (the padding columns, garbage far above the classes, zero and out of every softmax); then
// the rescale by a loss gradient on the device (1: nothing written).
TEST_F(CudaBackend, ClassifierOnAPaddedVocabulary) {
  const int N = 7, V = 1037;
  for (int Vp : {1088, 1039}) {
    std::vector<float> x = bf16_values((int64_t)N * Vp, 90, -4.0f, 4.0f);
    for (int i = 0; i < N; ++i)
      for (int v = V; v < Vp; ++v) x[(size_t)i * Vp + v] += 50.0f;
    const Tensor xc = Tensor::from_vector(x, {N, Vp}).to(DType::bf16);
    Pair logits{xc.clone(), xc.to(kGpu)};
    std::vector<int32_t> t(N);
    for (int i = 0; i < N; ++i) t[i] = (i * 131) % V;
    t[2] = -1;  // ignored
    const Tensor targets = Tensor::from_vector(t, {N}), targets_g = targets.to(kGpu);
    Pair losses = poisoned({N}, DType::f32), lse = poisoned({N}, DType::f32);
    ops::classifier_forward(losses.c, lse.c, logits.c, targets, V, 0.3f, true);
    ops::classifier_forward(losses.g, lse.g, logits.g, targets_g, V, 0.3f, true);
    EXPECT_TRUE(agrees("classifier losses (fp32)", losses, 0, V)) << Vp;
    EXPECT_TRUE(agrees("classifier lse (fp32)", lse, 0, V)) << Vp;
    EXPECT_TRUE(agrees("classifier dlogits", logits, 2, 8)) << Vp;
    const std::vector<float> d = logits.g.to_vector();
    for (int i = 0; i < N; ++i)
      for (int v = V; v < Vp; ++v) ASSERT_EQ(d[(size_t)i * Vp + v], 0.0f) << "row " << i << " column " << v;
    for (int v = 0; v < V; ++v) ASSERT_EQ(d[(size_t)2 * Vp + v], 0.0f) << "ignored row, column " << v;
    Pair one{Tensor::full({1}, 1.0f), Tensor::full({1}, 1.0f, DType::f32, kGpu)};
    ops::classifier_rescale(logits.g, one.g);
    EXPECT_EQ(logits.g.to_vector(), d);
    Pair half{Tensor::full({1}, 0.5f), Tensor::full({1}, 0.5f, DType::f32, kGpu)};
    ops::classifier_rescale(logits.c, half.c);
    ops::classifier_rescale(logits.g, half.g);
    EXPECT_TRUE(agrees("dlogits x 0.5", logits, 2, 8)) << Vp;
  }
}

TEST_F(CudaBackend, EmbeddingAndABadToken) {
  const int B = 2, T = 9, V = 23, C = 13, Tmax = 11;
  std::vector<int32_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 5) % 7;  // repeated tokens
  const Tensor tokens = Tensor::from_vector(tok, {B, T}), tokens_g = tokens.to(kGpu);
  const Pair wte = pair({V, C}, 80), wpe = pair({Tmax, C}, 81);
  Pair out = poisoned({B, T, C});
  ops::embedding_forward(out.c, tokens, wte.c, wpe.c);
  ops::embedding_forward(out.g, tokens_g, wte.g, wpe.g);
  EXPECT_TRUE(agrees("out", out, 2, 2));
  const Pair dout = pair({B, T, C}, 82);
  Pair dwte = pair({V, C}, 83, DType::f32), dwpe = pair({Tmax, C}, 84, DType::f32);
  ops::embedding_backward(dwte.c, dwpe.c, dout.c, tokens);
  ops::embedding_backward(dwte.g, dwpe.g, dout.g, tokens_g);
  EXPECT_TRUE(agrees("dwte (fp32)", dwte, 0, B * T));
  EXPECT_TRUE(agrees("dwpe (fp32)", dwpe, 0, B));
  // A token outside the vocabulary: reported when results next come back to the host
  // (no synchronisation of its own), naming the token and its position.
  tok[12] = 40;
  const Tensor bad = Tensor::from_vector(tok, {B, T}).to(kGpu);
  ops::embedding_forward(out.g, bad, wte.g, wpe.g);
  EXPECT_THROW_WITH(out.g.to_vector(), Error, "token 40", "position 12", "vocabulary of 23");
  out.g.to_vector();  // reported once
}

TEST_F(CudaBackend, AdamW) {
  const int64_t n = 1001;
  const Pair g = pair({n}, 91, DType::f32);
  Pair p = pair({n}, 90, DType::f32), m = pair({n}, 92, DType::f32), v = pair({n}, 93, DType::f32, 0.0f, 0.01f);
  Pair copy = poisoned({n});
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  ops::adamw_step(p.c, copy.c, g.c, m.c, v.c, cfg, 3);
  ops::adamw_step(p.g, copy.g, g.g, m.g, v.g, cfg, 3);
  EXPECT_TRUE(agrees("master", p, 0, 8));
  EXPECT_TRUE(agrees("m", m, 0, 8));
  EXPECT_TRUE(agrees("v", v, 0, 8));
  // The copy is the GPU's updated master rounded once.
  std::vector<float> rounded = p.g.to_vector();
  for (float& x : rounded) x = (float)bf16(x);
  EXPECT_TRUE(test::bitwise_equal("compute copy", copy.g.to_vector(), rounded));
}

TEST_F(CudaBackend, ElementwiseReductionsFillConvertRandom) {
  for (int64_t n : {(int64_t)1, (int64_t)101, (int64_t)65541}) {
    SCOPED_TRACE("n " + std::to_string(n));
    for (DType dt : {DType::bf16, DType::f32}) {
      const int R = dt == DType::bf16 ? 2 : 0;
      const Pair a = pair({n}, 100, dt), b = pair({n}, 101, dt);
      Pair sum_ab = poisoned({n}, dt), scaled = poisoned({n}, dt), acc = pair({n}, 102, dt);
      ops::add(sum_ab.c, a.c, b.c);
      ops::add(sum_ab.g, a.g, b.g);
      EXPECT_TRUE(agrees("add", sum_ab, R, 1));
      ops::scale(scaled.c, a.c, -0.37f);
      ops::scale(scaled.g, a.g, -0.37f);
      EXPECT_TRUE(agrees("scale", scaled, R, 1));
      ops::axpy(acc.c, a.c, 1.5f);
      ops::axpy(acc.g, a.g, 1.5f);
      EXPECT_TRUE(agrees("axpy", acc, R, 1));
      // Double accumulation in another order: n double ulps of the sum of magnitudes.
      const double mag = ops::sum_squares(a.c) + (double)n;
      EXPECT_NEAR(ops::sum(a.g), ops::sum(a.c), mag * n * 1e-16);
      EXPECT_NEAR(ops::sum_squares(a.g), ops::sum_squares(a.c), mag * n * 1e-16);
    }
    Pair acc32 = pair({n}, 103, DType::f32);
    const Pair a = pair({n}, 104);
    ops::axpy(acc32.c, a.c, 1.5f);
    ops::axpy(acc32.g, a.g, 1.5f);
    EXPECT_TRUE(agrees("axpy of bf16 into fp32", acc32, 0, 1));
  }
  // fill in every dtype, convert both ways (exactly the host's rounding), random streams.
  Tensor f = Tensor::empty({9}, DType::bf16, kGpu), i = Tensor::empty({9}, DType::i32, kGpu);
  ops::fill(f, 1.3f);
  ops::fill(i, 7.0f);
  EXPECT_EQ(f.to_vector(), std::vector<float>(9, (float)bf16(1.3f)));
  EXPECT_EQ(i.to_int_vector(), std::vector<int32_t>(9, 7));
  const std::vector<float> values = {1.0f, 1.00390625f, -3.0e38f, 1e-40f, INFINITY, 0.1f};
  const Tensor host = Tensor::from_vector(values, {6});
  Tensor h = Tensor::empty({6}, DType::bf16, kGpu), back = Tensor::full({6}, NAN, DType::f32, kGpu);
  ops::convert(h, host.to(kGpu));
  ops::convert(back, h);
  EXPECT_TRUE(test::bitwise_equal("convert", back.to_vector(), host.to(DType::bf16).to_vector()));
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor uc = Tensor::empty({1001}, dt), ug = Tensor::empty({1001}, dt, kGpu);
    ops::uniform_(uc, 7, 5, -0.5f, 2.0f);
    ops::uniform_(ug, 7, 5, -0.5f, 2.0f);
    EXPECT_TRUE(test::bitwise_equal("uniform_ (the same stream)", ug.to_vector(), uc.to_vector()));
    Tensor nc = Tensor::empty({1001}, dt), ng = Tensor::empty({1001}, dt, kGpu);
    ops::normal_(nc, 7, 5, 0.5f, 2.0f);
    ops::normal_(ng, 7, 5, 0.5f, 2.0f);
    // The device's logf / cosf / sqrtf are within a few ulps of the host's (k = 8).
    EXPECT_TRUE(close_to_scale("normal_", ng.to_vector(), nc.to_vector(),
                               bf16_rtol(dt == DType::bf16 ? 2 : 0, 8)));
  }
}

TEST_F(CudaBackend, ManyResultsWithOneSynchronisation) {
  std::vector<Tensor> ts, cpu;
  for (int64_t n : {(int64_t)1, (int64_t)7, (int64_t)100003}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      cpu.push_back(pair({n}, (uint32_t)n, dt).c);
      ts.push_back(cpu.back().to(kGpu));
    }
  }
  const std::vector<double> many = ops::sum_squares_many(ts);
  ASSERT_EQ(many.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const double one = ops::sum_squares(ts[i]);  // the same kernel: the same bits
    EXPECT_EQ(std::memcmp(&many[i], &one, sizeof one), 0) << i;
    EXPECT_NEAR(many[i], ops::sum_squares(cpu[i]), ops::sum_squares(cpu[i]) * ts[i].numel() * 1e-16);
  }
  const Tensor a = Tensor::full({1}, 2.5f, DType::f32, kGpu), b = Tensor::full({1}, -0.1f, DType::bf16, kGpu);
  EXPECT_EQ(ops::read_scalars({a, b}), (std::vector<float>{2.5f, (float)bf16(-0.1f)}));
}

TEST_F(CudaBackend, F32ComputeIsRefusedWithTheFix) {
  Tensor out = Tensor::zeros({4, 3}, DType::f32, kGpu), inp = Tensor::zeros({4, 5}, DType::f32, kGpu);
  Tensor w = Tensor::zeros({3, 5}, DType::f32, kGpu);
  EXPECT_THROW_WITH(ops::matmul_forward(out, inp, w, Tensor()), InputError, "matmul_forward",
                    "the CUDA backend computes in bf16 and f16", "use --dtype bf16");
  EXPECT_FALSE(backend_supports(kGpu, DType::f32));
}

// ---- f16 --------------------------------------------------------------------------------------

// The ops in f16 on the GPU against fp32 on the CPU, on the same f16-representable inputs: the
// GPU rounds each f16 result once (R = 1 in f16's roundoff, 2^-11), the CPU none; fp32 outputs
// (lse, losses, parameter gradients) R = 0. The CPU computes no f16 (refused, naming the fix).
TEST_F(CudaBackend, F16OpsAgainstTheCpuInFp32) {
  ASSERT_TRUE(backend_supports(kGpu, DType::f16));
  EXPECT_FALSE(backend_supports(Device::cpu(), DType::f16));
  EXPECT_THROW_WITH(check_backend_supports(Device::cpu(), DType::f16, "--dtype"), InputError,
                    "--dtype f16 on cpu", "the CPU backend computes in bf16, f32");
  const DType h = DType::f16;
  // fp32 on the CPU (c), the same values in f16 on the GPU (g).
  auto pair16 = [](const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    const Tensor c = Tensor::from_vector(bf16_values(shape.numel(), seed, lo, hi), shape).to(DType::f16).to(DType::f32);
    return Pair{c, c.to(DType::f16).to(kGpu)};
  };
  auto out16 = [](const Shape& shape) { return Pair{Tensor::full(shape, NAN), Tensor::full(shape, NAN, DType::f16, kGpu)}; };
  auto f32_pair = [](const Shape& shape, uint32_t seed) {
    const Tensor c = Tensor::from_vector(bf16_values(shape.numel(), seed), shape);
    return Pair{c, c.to(kGpu)};
  };
  auto near = [h](const char* what, const Pair& p, int R, int64_t k) {
    return close_to_scale(what, p.g.to_vector(), p.c.to_vector(), test::half_rtol(h, R, k));
  };
  const int N = 21, C = 32, OC = 24;
  const Pair x = pair16({N, C}, 1, -2.0f, 2.0f), w = pair16({OC, C}, 2), bias = pair16({OC}, 3),
             dout = pair16({N, OC}, 4);
  Pair out = out16({N, OC});
  ops::matmul_forward(out.c, x.c, w.c, bias.c);
  ops::matmul_forward(out.g, x.g, w.g, bias.g);
  EXPECT_TRUE(near("matmul_forward f16", out, 1, C + 1));
  Pair dinp = pair16({N, C}, 5), dw = f32_pair({OC, C}, 6), db = f32_pair({OC}, 7);
  ops::matmul_backward(dinp.c, dw.c, db.c, dout.c, x.c, w.c);
  ops::matmul_backward(dinp.g, dw.g, db.g, dout.g, x.g, w.g);
  EXPECT_TRUE(near("matmul_backward f16 dinp", dinp, 1, OC + 1));
  EXPECT_TRUE(near("matmul_backward dweight (fp32)", dw, 0, N + 1));
  EXPECT_TRUE(near("matmul_backward dbias (fp32)", db, 0, N + 1));
  const Pair lw = pair16({C}, 8, 0.5f, 1.5f), lb = pair16({C}, 9);
  Pair ln = out16({N, C}), mean = {Tensor::empty({N}), Tensor::empty({N}, DType::f32, kGpu)},
       rstd = {Tensor::empty({N}), Tensor::empty({N}, DType::f32, kGpu)};
  ops::layernorm_forward(ln.c, mean.c, rstd.c, x.c, lw.c, lb.c);
  ops::layernorm_forward(ln.g, mean.g, rstd.g, x.g, lw.g, lb.g);
  EXPECT_TRUE(near("layernorm_forward f16", ln, 1, 2 * C));
  Pair g = out16({N, C});
  ops::gelu_forward(g.c, x.c);
  ops::gelu_forward(g.g, x.g);
  EXPECT_TRUE(near("gelu_forward f16", g, 1, 8));
  const int B = 2, T = 9, NH = 2, HS = 16;
  const Pair qkv = pair16({B, T, 3 * NH * HS}, 10);
  Pair att = out16({B, T, NH * HS}), lse = {Tensor::empty({B, NH, T}), Tensor::empty({B, NH, T}, DType::f32, kGpu)};
  ops::attention_forward(att.c, lse.c, qkv.c, NH);
  ops::attention_forward(att.g, lse.g, qkv.g, NH);
  EXPECT_TRUE(near("attention_forward f16", att, 1, 2 * T + HS));
  EXPECT_TRUE(near("attention lse (fp32)", lse, 0, 2 * T + HS));
  std::vector<int32_t> tv(N);
  for (int i = 0; i < N; ++i) tv[i] = (i * 5) % OC;
  const Tensor targets = Tensor::from_vector(tv, {N});
  Pair losses = {Tensor::empty({N}), Tensor::empty({N}, DType::f32, kGpu)},
       llse = {Tensor::empty({N}), Tensor::empty({N}, DType::f32, kGpu)};
  ops::crossentropy_forward(losses.c, llse.c, out.c, targets);
  ops::crossentropy_forward(losses.g, llse.g, out.g, targets.to(kGpu));
  // The logits differ by the GPU's f16 rounding of out: R = 1 on the losses too.
  EXPECT_TRUE(near("crossentropy_forward losses", losses, 1, 2 * OC));
  // AdamW writes the f16 compute copy: exactly f16(the updated fp32 weights).
  Pair p = f32_pair({100}, 11), grad = f32_pair({100}, 12), m = f32_pair({100}, 13), v = f32_pair({100}, 14);
  for (Tensor* t : {&v.c, &v.g}) ops::scale(*t, *t, 0.0f);
  Tensor copy = Tensor::full({100}, NAN, DType::f16, kGpu);
  ops::adamw_step(p.c, grad.c, m.c, v.c, AdamWConfig{}, 1);
  ops::adamw_step(p.g, copy, grad.g, m.g, v.g, AdamWConfig{}, 1);
  EXPECT_TRUE(near("adamw param (fp32)", p, 0, 4));
  EXPECT_TRUE(test::bitwise_equal("adamw f16 copy", copy.to_vector(), p.g.to(DType::f16).to_vector()));
  // Conversions between the two 16-bit formats (through fp32), fill, sums, scalars.
  const Tensor bf = x.g.to(DType::bf16), back = bf.to(DType::f16);
  EXPECT_TRUE(test::bitwise_equal("f16 -> bf16 -> f16 on the GPU", back.to_vector(),
                                  x.c.to(DType::bf16).to(DType::f16).to_vector()));
  Tensor filled = Tensor::empty({5}, h, kGpu);
  ops::fill(filled, 70000.0f);  // past 65504: inf in f16
  EXPECT_EQ(filled.to_vector()[0], INFINITY);
  EXPECT_NEAR(ops::sum_squares(x.g), ops::sum_squares(x.c), 1e-9 * ops::sum_squares(x.c));
  EXPECT_EQ(ops::read_scalars({Tensor::full({1}, -0.1f, h, kGpu)}), (std::vector<float>{(float)f16(-0.1f)}));
}

// ---- copies ----------------------------------------------------------------------------------

TEST_F(CudaBackend, HostDeviceCopiesOfEverySize) {
  // Across the staging buffers' 4 MiB chunks: 0, 1, odd, exactly one chunk, several.
  for (int64_t n : {(int64_t)0, (int64_t)1, (int64_t)1001, (int64_t)1 << 20, ((int64_t)5 << 20) + 3}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; ++i) v[i] = (float)(i % 65521) - 7.0f;
    const Tensor host = Tensor::from_vector(v, {n});
    const Tensor dev = host.to(kGpu);
    Tensor twice = Tensor::full({n}, NAN, DType::f32, kGpu);
    twice.copy_from(dev);  // device to device
    EXPECT_TRUE(test::bitwise_equal("round trip", twice.to(Device::cpu()).to_vector(), v));
  }
}

// ---- allocator -----------------------------------------------------------------------------

TEST_F(CudaBackend, AllocatorCapacityPeakAndOutOfMemory) {
  const Device dev = Device::cuda(40);  // a logical device of its own on GPU 0
  DeviceProps props = gpu_props(0);
  EXPECT_GT(props.capacity, 0);  // the GPU's free memory
  props.capacity = 64 << 20;
  props.emulated = true;
  configure_device(dev, props);
  Allocator& a = allocator(dev);
  a.reset_peak();
  const int64_t before = a.stats().in_use;
  {
    Tensor t = Tensor::empty({(int64_t)8 << 20}, DType::f32, dev);  // 32 MiB
    EXPECT_EQ(a.stats().in_use - before, Allocator::block_size(32 << 20));
    try {
      Tensor u = Tensor::empty({(int64_t)10 << 20}, DType::f32, dev);  // 40 MiB more
      ADD_FAILURE() << "no OutOfMemory";
    } catch (const OutOfMemory& e) {
      EXPECT_EQ(e.requested, (int64_t)40 << 20);
      EXPECT_EQ(e.capacity, (int64_t)64 << 20);
      EXPECT_EQ(e.device, dev);
      EXPECT_NE(std::string(e.what()).find("cuda:40"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(a.stats().peak - before, Allocator::block_size(32 << 20));
  // The freed block is reused (stream-ordered on the compute stream), no new cudaMalloc.
  const int64_t allocs = a.stats().system_allocs;
  { Tensor again = Tensor::empty({(int64_t)8 << 20}, DType::f32, dev); }
  EXPECT_EQ(a.stats().system_allocs, allocs);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached, 0);
}

TEST_F(CudaBackend, TwoLogicalDevicesOnOneGpuKeepSeparateCapacities) {
  const Device small = Device::cuda(41), large = Device::cuda(42);
  DeviceProps p = gpu_props(0);
  p.capacity = 16 << 20;
  configure_device(small, p);
  p.capacity = 256 << 20;
  configure_device(large, p);
  EXPECT_EQ(device_props(small).ordinal, 0);
  EXPECT_EQ(device_props(large).ordinal, 0);
  Tensor big = Tensor::empty({(int64_t)32 << 20}, DType::f32, large);  // 128 MiB: fits there only
  EXPECT_THROW(Tensor::empty({(int64_t)32 << 20}, DType::f32, small), OutOfMemory);
  // Data moves between them (ordered on both compute streams), and ops run on each.
  Tensor x = Tensor::full({1000}, 3.0f, DType::f32, small);
  Tensor y = Tensor::empty({1000}, DType::f32, large);
  y.copy_from(x);
  ops::scale(y, y, 2.0f);
  EXPECT_EQ(y.to_vector(), std::vector<float>(1000, 6.0f));
  EXPECT_NE(stream_handle(small, Stream::compute), stream_handle(large, Stream::compute));
}

// Scratch memory (attention's backward, the column reductions of the bias and LayerNorm
// gradients) comes from a pool per GPU and stream, never one per GPU: two logical devices on
// one GPU never share a pool, so one never waits on the other's stream to reuse a freed block
// (kernels/cuda/device.cu). Each device's ops that take scratch still run, interleaved.
TEST_F(CudaBackend, LogicalDevicesOnOneGpuNeverShareAScratchPool) {
  const Device a = Device::cuda(46), b = Device::cuda(47);
  configure_device(a, gpu_props(0));
  configure_device(b, gpu_props(0));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // scratch_pool asks for the current device's
  auto pool = [](Device d, Stream s) {
    return kernels::cuda::scratch_pool((cudaStream_t)stream_handle(d, s));
  };
  EXPECT_NE(pool(a, Stream::compute), pool(b, Stream::compute));
  EXPECT_NE(pool(a, Stream::compute), pool(a, Stream::comm));
  EXPECT_EQ(pool(a, Stream::compute), pool(a, Stream::compute));
  for (Device d : {a, b, a}) {
    Tensor x = Tensor::full({64, 96}, 1.0f, DType::bf16, d), w = Tensor::full({96}, 1.0f, DType::bf16, d);
    Tensor bias = Tensor::zeros({96}, DType::bf16, d), out = Tensor::empty({64, 96}, DType::bf16, d);
    Tensor mean = Tensor::empty({64}, DType::f32, d), rstd = Tensor::empty({64}, DType::f32, d);
    ops::layernorm_forward(out, mean, rstd, x, w, bias);
    Tensor dx = Tensor::zeros({64, 96}, DType::bf16, d), dw = Tensor::zeros({96}, DType::f32, d),
           db = Tensor::zeros({96}, DType::f32, d);
    ops::layernorm_backward(dx, dw, db, Tensor::full({64, 96}, 1.0f, DType::bf16, d), x, w, mean, rstd);
    EXPECT_EQ(db.to_vector(), std::vector<float>(96, 64.0f)) << d.str();  // a column sum of ones
  }
}

// ---- streams and events ----------------------------------------------------------------------

TEST_F(CudaBackend, EventsOrderComputeAndCommStreams) {
  EXPECT_NE(stream_handle(kGpu, Stream::compute), nullptr);
  EXPECT_NE(stream_handle(kGpu, Stream::compute), stream_handle(kGpu, Stream::comm));
  // A long op on compute, then the comm stream told to wait for it: a copy enqueued on
  // comm (through the handle, as NCCL would be) sees the op's result.
  const int64_t n = 1 << 22;
  Tensor x = Tensor::zeros({n}, DType::f32, kGpu), y = Tensor::zeros({n}, DType::f32, kGpu);
  device_runtime(kGpu).spin(kGpu, 20.0);  // 20 ms on compute before the fill
  ops::fill(x, 5.0f);
  Event done;
  done.record(kGpu, Stream::compute);
  EXPECT_FALSE(done.query());  // the host did not wait
  done.wait(kGpu, Stream::comm);
  Event start, stop;
  start.record(kGpu, Stream::comm);
  ASSERT_EQ(cudaMemcpyAsync(y.raw_data(), x.raw_data(), n * 4, cudaMemcpyDeviceToDevice,
                            (cudaStream_t)stream_handle(kGpu, Stream::comm)),
            cudaSuccess);
  stop.record(kGpu, Stream::comm);
  // Join comm back to compute before y is read or dropped (allocator.h's rule).
  stop.wait(kGpu, Stream::compute);
  EXPECT_EQ(y.to_vector(), std::vector<float>(n, 5.0f));
  EXPECT_GE(start.elapsed_ms(stop), 0.0);
  synchronize(kGpu);
  EXPECT_TRUE(stop.query());
}

TEST_F(CudaBackend, SlowdownSpinsOnTheStreamWithoutHostWaits) {
  const Device slow = Device::cuda(43), fast = Device::cuda(44);
  DeviceProps p = gpu_props(0);
  p.capacity = 512 << 20;
  configure_device(fast, p);
  const double f = 3;
  p.slowdown = f;
  p.emulated = true;
  configure_device(slow, p);
  // Steps of GPU-bound GEMMs (4096^3: ~0.2 ms each on an H200) with one host
  // synchronisation per step, as in training. A step's spins are enqueued once its events
  // have completed: at the next step's first op, so the last step's are left out.
  const int kSteps = 8, kOps = 8;
  // The stream's time over the steps, and the spin served in it (into *served_ms).
  auto run = [&](Device d, double* served_ms) {
#if defined(GPUMIX_CUDA_EMULATOR)
    const int n = 384;  // the emulated GPU's GEMM runs on two CPU cores: ~0.1 GFLOP per op
#else
    const int n = 4096;
#endif
    Tensor a = Tensor::full({n, n}, 0.01f, DType::bf16, d), c = Tensor::empty({n, n}, DType::bf16, d);
    ops::gemm(c, a, a, false, true);  // warm-up: cuBLASLt's algorithm choice
    synchronize(d);
    settle_slowdown(d);  // the warm-up's spin, before the window
    synchronize(d);
    const double served0 = slowdown_served_ms(d);
    Event start, stop;
    start.record(d);
    for (int step = 0; step < kSteps; ++step) {
      for (int k = 0; k < kOps; ++k) ops::gemm(c, a, a, false, true);
      synchronize(d);
    }
    stop.record(d);
    stop.synchronize();
    *served_ms = slowdown_served_ms(d) - served0;
    return start.elapsed_ms(stop);
  };
  // Counted, not timed against the fast device (their ratio, 2.75x expected, moves with the
  // machine's load: 1.74x was seen on the emulated GPU at load 15): the slow device served
  // spins on its stream and the fast one none, and the spins with the work they were owed
  // for, (f - 1) C and C, fit in the slow stream's window, f C <= window, at any load. The
  // run's times are printed for a look.
  double served_fast = 0, served = 0;
  const double t_fast = run(fast, &served_fast), t_slow = run(slow, &served);
  EXPECT_EQ(served_fast, 0.0) << "a device of slowdown 1 spun";
  EXPECT_GT(served, 0.0) << "the slow device served no spin on its stream";
  EXPECT_LE(f / (f - 1) * served, 1.01 * t_slow + 0.05)
      << "spins of " << served << " ms in a window of " << t_slow << " ms";
  std::printf("fast %.2f ms, slow %.2f ms (%.2fx; expected ~%.2fx on an idle device), %.2f ms of spins\n", t_fast,
              t_slow, t_slow / t_fast, (f * (kSteps - 1) + 1) / kSteps, served);
}

// A host far ahead of its GPU (past the 1,024 spans the slowdown keeps, so the newest span
// is extended over the next ops), then keeping it so while the GPU completes spans: the
// slowdown must never charge a spin of its own as work. Spans are disjoint and exclude
// spins, so the work charged, C = served / (f - 1), and the spins served, (f - 1) C, fit in
// the device's time from the first op to the settled end: f C <= that time.
TEST_F(CudaBackend, SlowdownNeverChargesItsOwnSpins) {
  const Device slow = Device::cuda(45);
  DeviceProps p = gpu_props(0);
  p.capacity = 64 << 20;
  p.slowdown = 2;
  p.emulated = true;
  configure_device(slow, p);
  Tensor t = Tensor::empty({1 << 14}, DType::f32, slow);
  ops::fill(t, 0.0f);
  EXPECT_EQ(settle_slowdown(Device::cpu()), 0.0);  // nothing to serve on a CPU
  EXPECT_EQ(slowdown_served_ms(Device::cpu()), 0.0);
  settle_slowdown(slow);
  const double served0 = slowdown_served_ms(slow);
  Event start, end;
  start.record(slow);
  // 1,500 ops at once fill the queue; then the host keeps it full while the GPU completes
  // spans, so spins are owed and enqueued all along.
  for (int i = 0; i < 3000; ++i) {
    ops::fill(t, (float)i);
    if (i >= 1500) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  settle_slowdown(slow);
  end.record(slow);
  end.synchronize();
  const double window = start.elapsed_ms(end), served = slowdown_served_ms(slow) - served0;
  EXPECT_GT(served, 0.0);
  EXPECT_LE(2 * served, 1.01 * window + 0.05) << "spin served " << served << " ms in a window of " << window << " ms";
}

}  // namespace
}  // namespace gpumix
