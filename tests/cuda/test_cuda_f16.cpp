// The CUDA kernels in f16 (IEEE binary16) storage against the CPU fp32 reference twins
// (kernels::cpu::ref), on inputs rounded to f16 for both sides, with the f16 tolerance
// (cuda_test_util.h: rtol 2^-9, four of f16's unit roundoffs). The bf16 twins of every test
// are in test_cuda_kernels.cpp; here each family's f16 instantiation (one source, templated
// over the format) is shown to compute, round and accumulate in its own format. Without a
// CUDA device every test skips.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/ref.h"
#include "tests/cuda/cuda_test_util.h"

namespace gpumix::test {
namespace {

namespace ref = gpumix::kernels::cpu::ref;

// Normal(0, stddev) values rounded to f16.
std::vector<float> randn16(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::vector<float> v = randn(n, seed, stddev);
  for (float& x : v) x = round_f16(x);
  return v;
}

std::vector<uint16_t> bits_of(const DevBuf<f16>& d) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> b(d.n);
  CUDA_CHECK(cudaMemcpy(b.data(), d.p, 2 * d.n, cudaMemcpyDeviceToHost));
  return b;
}

// ---- conversions: exactly kernels/half_types.h, edges included ---------------------------------

TEST_F(CudaTest, F16ConversionsMatchTheHostBitForBit) {
  std::vector<float> in = randn(4099, 1, 3000.0f);
  const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f,
                         -65520.0f, 1e10f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24),
                         std::ldexp(1.0f, -25), std::ldexp(3.0f, -25), std::ldexp(1023.5f, -24),
                         1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 1e-30f};
  for (float e : edges) in.push_back(e);
  DevBuf<float> din(in.size()), dback(in.size());
  DevBuf<f16> dh(in.size());
  upload(din, in);
  for (int64_t n : {(int64_t)1, (int64_t)7, (int64_t)in.size()}) {  // scalar and vector paths
    dh.poison();
    cu::f32_to_f16(dh.p, din.p, n);
    const std::vector<uint16_t> got = bits_of(dh);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f16(in[i]).bits) << "x = " << in[i];
    cu::f16_to_f32(dback.p, dh.p, n);
    const std::vector<float> back = download(dback);
    for (int64_t i = 0; i < n; ++i) {
      const float want = f16_bits_to_f32(got[i]);
      ASSERT_EQ(std::memcmp(&back[i], &want, 4), 0) << i;
    }
  }
}

// ---- elementwise, reductions ------------------------------------------------------------------

TEST_F(CudaTest, F16ElementwiseRoundOnceInF16) {
  const int64_t n = 1027;
  const std::vector<float> a = randn16(n, 2), b = randn16(n, 3);
  DevBuf<f16> da(n), db(n), dout(n);
  upload(da, a);
  upload(db, b);
  std::vector<float> want(n);
  cu::add(dout.p, da.p, db.p, n);
  for (int64_t i = 0; i < n; ++i) want[i] = round_f16(a[i] + b[i]);
  EXPECT_TRUE(close("add f16", download(dout), want, Tol{0, 0}));
  cu::scale(dout.p, da.p, 0.37f, n);
  for (int64_t i = 0; i < n; ++i) want[i] = round_f16(a[i] * 0.37f);
  EXPECT_TRUE(close("scale f16", download(dout), want, Tol{0, 0}));
  upload(dout, b);
  cu::axpy(dout.p, da.p, -1.5f, n);
  for (int64_t i = 0; i < n; ++i) want[i] = round_f16(b[i] + -1.5f * a[i]);
  EXPECT_TRUE(close("axpy f16", download(dout), want, Tol{0, 0}));
  cu::fill(dout.p, 1.0f / 3.0f, n);
  EXPECT_TRUE(close("fill f16", download(dout), std::vector<float>(n, round_f16(1.0f / 3.0f)), Tol{0, 0}));
  // Overflow past 65504 is inf in f16 (an f16 run needs loss scaling for exactly this).
  cu::fill(dout.p, 70000.0f, n);
  EXPECT_EQ(download(dout)[0], INFINITY);
  double* dsum = nullptr;
  CUDA_CHECK(cudaMalloc((void**)&dsum, sizeof(double)));
  cu::sum_squares(dsum, da.p, n);
  double got = 0.0, ref_ss = 0.0;
  CUDA_CHECK(cudaMemcpy(&got, dsum, sizeof got, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(dsum));
  for (float x : a) ref_ss += (double)x * x;
  EXPECT_NEAR(got, ref_ss, 1e-9 * ref_ss);  // double sums of the same f16 values
}

// ---- matmul through cuBLASLt CUDA_R_16F, with the training epilogues ------------------------------

TEST_F(CudaTest, F16MatmulAndEpiloguesMatchRef) {
  const int N = 37, C = 48, OC = 24;
  const std::vector<float> inp = randn16((size_t)N * C, 10), w = randn16((size_t)OC * C, 11, 0.1f),
                           bias = randn16(OC, 12), dout = randn16((size_t)N * OC, 13),
                           dinp0 = randn16((size_t)N * C, 14), dw0 = randn((size_t)OC * C, 15),
                           db0 = randn(OC, 16);
  DevBuf<f16> d_inp(inp.size()), d_w(w.size()), d_b(OC), d_out((size_t)N * OC), d_pre((size_t)N * OC),
      d_dout(dout.size()), d_dinp(dinp0.size());
  DevBuf<float> d_dw(dw0.size()), d_db(OC), d_c((size_t)N * OC);
  upload(d_inp, inp);
  upload(d_w, w);
  upload(d_b, bias);
  upload(d_dout, dout);
  std::vector<float> r((size_t)N * OC);
  ref::matmul_forward(r.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  d_out.poison();
  cu::matmul_forward(d_out.p, d_inp.p, d_w.p, d_b.p, N, C, OC);
  EXPECT_TRUE(close("matmul_forward f16 (BIAS epilogue)", download(d_out), r, tol_f16(r)));
  // The same product as a general GEMM into fp32: out = inp w^T.
  std::vector<float> rc((size_t)N * OC);
  ref::matmul_forward(rc.data(), inp.data(), w.data(), nullptr, N, C, OC);
  cu::gemm(false, true, N, OC, C, 1.0f, d_inp.p, C, d_w.p, C, 0.0f, d_c.p, OC);
  EXPECT_TRUE(close("gemm f16 -> f32", download(d_c), rc, tol_f32(rc, C)));
  // Linear + GELU (GELU_AUX_BIAS): pre and gelu(pre) in f16.
  std::vector<float> rout((size_t)N * OC);
  ref::gelu_forward(rout.data(), r.data(), (int64_t)N * OC);
  d_pre.poison();
  d_out.poison();
  cu::matmul_gelu_forward(d_out.p, d_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC);
  EXPECT_TRUE(close("matmul_gelu_forward f16 pre", download(d_pre), r, tol_f16(r)));
  EXPECT_TRUE(close("matmul_gelu_forward f16 out", download(d_out), rout, tol_f16(rout)));
  // Backward: dinp f16 +=, dweight and dbias fp32 += (dbias by BGRADB into the scratch).
  std::vector<float> rdinp = dinp0, rdw = dw0, rdb = db0;
  ref::matmul_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  upload(d_dinp, dinp0);
  upload(d_dw, dw0);
  upload(d_db, db0);
  DevBuf<float> scratch(OC);
  cu::matmul_backward(d_dinp.p, d_dw.p, d_db.p, d_dout.p, d_inp.p, d_w.p, N, C, OC, nullptr, false, false,
                      scratch.p);
  EXPECT_TRUE(close("matmul_backward f16 dinp", download(d_dinp), rdinp, tol_f16(rdinp)));
  EXPECT_TRUE(close("matmul_backward f16 dweight", download(d_dw), rdw, tol_f32(rdw, N)));
  EXPECT_TRUE(close("matmul_backward f16 dbias", download(d_db), rdb, tol_f32(rdb, N)));
  // The input gradient through a GELU (DGELU): dpre = (dout w) * gelu'(x), x the aux.
  const std::vector<float> x = randn16((size_t)N * C, 17, 2.0f);
  std::vector<float> rg((size_t)N * C, 0.0f), rdx((size_t)N * C, 0.0f);
  ref::matmul_backward(rg.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
  ref::gelu_backward(rdx.data(), x.data(), rg.data(), (int64_t)N * C);
  DevBuf<f16> d_x(x.size()), d_dx(x.size());
  upload(d_x, x);
  d_dx.poison();
  cu::matmul_backward_dgelu(d_dx.p, d_dout.p, d_w.p, d_x.p, N, C, OC);
  EXPECT_TRUE(close("matmul_backward_dgelu f16", download(d_dx), rdx, tol_f16(rdx)));
}

// ---- layernorm, gelu -----------------------------------------------------------------------------

TEST_F(CudaTest, F16LayerNormAndGeluMatchRef) {
  for (int C : {64, 77}) {  // vectorised and scalar paths
    const int N = 19;
    const std::vector<float> x = randn16((size_t)N * C, 20, 2.0f), w = randn16(C, 21), b = randn16(C, 22),
                             g = randn16((size_t)N * C, 23), dx0 = randn16((size_t)N * C, 24);
    std::vector<float> ro((size_t)N * C), rm(N), rr(N), rdx = dx0, rdw(C, 0.0f), rdb(C, 0.0f);
    ref::layernorm_forward(ro.data(), rm.data(), rr.data(), x.data(), w.data(), b.data(), N, C);
    ref::layernorm_backward(rdx.data(), rdw.data(), rdb.data(), g.data(), x.data(), w.data(), rm.data(),
                            rr.data(), N, C);
    DevBuf<f16> dx(x.size()), dw(C), db(C), dout(x.size()), dg(g.size()), ddx(x.size());
    DevBuf<float> dm(N), dr(N), ddw(C), ddb(C);
    upload(dx, x);
    upload(dw, w);
    upload(db, b);
    upload(dg, g);
    upload(ddx, dx0);
    upload(ddw, std::vector<float>(C, 0.0f));
    upload(ddb, std::vector<float>(C, 0.0f));
    dout.poison();
    cu::layernorm_forward(dout.p, dm.p, dr.p, dx.p, dw.p, db.p, N, C);
    EXPECT_TRUE(close("layernorm_forward f16", download(dout), ro, tol_f16(ro)));
    EXPECT_TRUE(close("layernorm mean", download(dm), rm, tol_f32(rm, C)));
    cu::layernorm_backward(ddx.p, ddw.p, ddb.p, dg.p, dx.p, dw.p, dm.p, dr.p, N, C);
    EXPECT_TRUE(close("layernorm_backward f16 dinp", download(ddx), rdx, tol_f16(rdx)));
    EXPECT_TRUE(close("layernorm_backward dweight", download(ddw), rdw, tol_f32(rdw, N)));
    EXPECT_TRUE(close("layernorm_backward dbias", download(ddb), rdb, tol_f32(rdb, N)));
    // GELU on the same shapes: forward written, backward accumulated.
    std::vector<float> rgf(x.size()), rgb = dx0;
    ref::gelu_forward(rgf.data(), x.data(), (int64_t)x.size());
    ref::gelu_backward(rgb.data(), x.data(), g.data(), (int64_t)x.size());
    dout.poison();
    cu::gelu_forward(dout.p, dx.p, (int64_t)x.size());
    EXPECT_TRUE(close("gelu_forward f16", download(dout), rgf, tol_f16(rgf)));
    upload(ddx, dx0);
    cu::gelu_backward(ddx.p, dx.p, dg.p, (int64_t)x.size());
    EXPECT_TRUE(close("gelu_backward f16", download(ddx), rgb, tol_f16(rgb)));
  }
}

// ---- attention (the SIMT flash kernels for f16; the reference; decode) -------------------------

TEST_F(CudaTest, F16AttentionMatchesRef) {
  for (int HS : {16, 32, 64, 24}) {  // 24: the reference kernels (no flash kernel)
    const int B = 2, T = 37, NH = 2, C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    const std::vector<float> qkv = randn16(nqkv, 30 + HS), g = randn16(nout, 31 + HS),
                             dq0 = randn16(nqkv, 32 + HS, 0.01f);  // small: the gradient dominates
    std::vector<float> ro(nout), rl((size_t)B * NH * T), rd = dq0;
    ref::attention_forward(ro.data(), rl.data(), qkv.data(), B, T, C, NH);
    ref::attention_backward(rd.data(), g.data(), qkv.data(), ro.data(), rl.data(), B, T, C, NH);
    // The backward on the GPU from the reference's out rounded to f16 (as the GPU stores it)
    // and its lse; the flash kernels take D_i from that out (flash_backward_reference).
    std::vector<float> ro16 = ro;
    for (float& x : ro16) x = round_f16(x);
    const std::vector<float> rd_flash = flash_backward_reference(rd, qkv, g, ro, ro16, rl, B, T, C, NH);
    DevBuf<f16> dqkv(nqkv), dout(nout), dg(nout), ddq(nqkv);
    DevBuf<float> dl(rl.size());
    upload(dqkv, qkv);
    upload(dg, g);
    upload(ddq, dq0);
    dout.poison();
    const bool flash = cu::attention_flash_supported(HS);
    if (flash)
      cu::attention_forward(dout.p, dl.p, dqkv.p, B, T, C, NH);
    else
      cu::attention_forward_ref(dout.p, dl.p, dqkv.p, B, T, C, NH);
    const std::string what = "attention f16 HS " + std::to_string(HS);
    EXPECT_TRUE(close((what + " out").c_str(), download(dout), ro, tol_f16(ro)));
    EXPECT_TRUE(close((what + " lse").c_str(), download(dl), rl, tol_lse()));
    upload(dout, ro16);
    upload(dl, rl);
    if (flash)
      cu::attention_backward(ddq.p, dg.p, dqkv.p, dout.p, dl.p, B, T, C, NH);
    else
      cu::attention_backward_ref(ddq.p, dg.p, dqkv.p, dout.p, dl.p, B, T, C, NH);
    const std::vector<float>& want = flash ? rd_flash : rd;
    EXPECT_TRUE(close((what + " dqkv").c_str(), download(ddq), want, tol_f16(want)));
  }
  // Decode: the query of row pos against rows 0..pos.
  const int B = 2, Tc = 20, NH = 4, HS = 32, C = NH * HS, pos = 13;
  const std::vector<float> qkv = randn16((size_t)B * Tc * 3 * C, 40);
  std::vector<float> rdec((size_t)B * C);
  ref::attention_decode(rdec.data(), qkv.data(), B, Tc, C, NH, pos);
  DevBuf<f16> dqkv(qkv.size()), dout((size_t)B * C);
  upload(dqkv, qkv);
  dout.poison();
  cu::attention_decode(dout.p, dqkv.p, B, Tc, C, NH, pos);
  EXPECT_TRUE(close("attention_decode f16", download(dout), rdec, tol_f16(rdec)));
  dout.poison();
  cu::attention_decode_ref(dout.p, dqkv.p, B, Tc, C, NH, pos);
  EXPECT_TRUE(close("attention_decode_ref f16", download(dout), rdec, tol_f16(rdec)));
}

// ---- cross-entropy and the fused classifier ------------------------------------------------------

TEST_F(CudaTest, F16CrossEntropyAndClassifierMatchRef) {
  const int N = 13, V = 72, Vp = 80;
  const std::vector<float> logits = randn16((size_t)N * V, 50, 3.0f);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 7) % V;
  targets[3] = -100;  // ignored
  std::vector<float> rloss(N), rlse(N), rd((size_t)N * V, 0.0f);
  ref::crossentropy_forward(rloss.data(), rlse.data(), logits.data(), targets.data(), N, V, -100);
  ref::crossentropy_backward(rd.data(), logits.data(), rlse.data(), targets.data(), 0.25f, N, V, -100);
  DevBuf<f16> dlog(logits.size()), dd(logits.size());
  DevBuf<float> dloss(N), dlse(N);
  DevBuf<int32_t> dt(N);
  upload(dlog, logits);
  upload(dt, targets);
  upload(dd, std::vector<float>(logits.size(), 0.0f));
  cu::crossentropy_forward(dloss.p, dlse.p, dlog.p, dt.p, N, V, -100);
  EXPECT_TRUE(close("crossentropy_forward f16 losses", download(dloss), rloss, tol_lse()));
  cu::crossentropy_backward(dd.p, dlog.p, dlse.p, dt.p, 0.25f, N, V, -100);
  EXPECT_TRUE(close("crossentropy_backward f16", download(dd), rd, tol_f16(rd)));
  // The classifier over padded rows of Vp: losses, and the rows overwritten by dlogits.
  std::vector<float> padded((size_t)N * Vp, 0.0f);
  for (int i = 0; i < N; ++i) std::copy_n(&logits[(size_t)i * V], V, &padded[(size_t)i * Vp]);
  std::vector<float> cref = padded, closs(N), clse(N);
  ref::classifier_forward(closs.data(), clse.data(), cref.data(), targets.data(), 0.25f, N, V, Vp, -100, true);
  DevBuf<f16> dpad(padded.size());
  upload(dpad, padded);
  cu::classifier_forward(dloss.p, dlse.p, dpad.p, dt.p, 0.25f, N, V, Vp, -100, true);
  EXPECT_TRUE(close("classifier f16 losses", download(dloss), closs, tol_lse()));
  EXPECT_TRUE(close("classifier f16 dlogits", download(dpad), cref, tol_f16(cref)));
}

// ---- embedding, AdamW's compute copy ---------------------------------------------------------------

TEST_F(CudaTest, F16EmbeddingAndAdamWCopy) {
  const int B = 3, T = 9, C = 40, V = 17;
  const std::vector<float> wte = randn16((size_t)V * C, 60), wpe = randn16((size_t)T * C, 61),
                           g = randn16((size_t)B * T * C, 62);
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 5) % V;
  std::vector<float> ro((size_t)B * T * C), rdwte((size_t)V * C, 0.0f), rdwpe((size_t)T * C, 0.0f);
  ref::embedding_forward(ro.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  DevBuf<f16> dwte(wte.size()), dwpe(wpe.size()), dout(ro.size()), dg(g.size());
  DevBuf<float> ddwte(rdwte.size()), ddwpe(rdwpe.size());
  DevBuf<int32_t> dtok(tokens.size());
  upload(dwte, wte);
  upload(dwpe, wpe);
  upload(dg, g);
  upload(dtok, tokens);
  upload(ddwte, rdwte);  // zeros, then the sums
  upload(ddwpe, rdwpe);
  ref::embedding_backward(rdwte.data(), rdwpe.data(), g.data(), tokens.data(), B, T, C);
  dout.poison();
  cu::embedding_forward(dout.p, dtok.p, dwte.p, dwpe.p, B, T, C);
  EXPECT_TRUE(close("embedding_forward f16", download(dout), ro, tol_f16(ro)));
  cu::embedding_backward(ddwte.p, ddwpe.p, dg.p, dtok.p, B, T, C);
  EXPECT_TRUE(close("embedding_backward f16 dwte", download(ddwte), rdwte, tol_f32(rdwte, B * T)));
  EXPECT_TRUE(close("embedding_backward f16 dwpe", download(ddwpe), rdwpe, tol_f32(rdwpe, B)));
  // AdamW writes the f16 copy of the updated fp32 weights: exactly f16(param).
  for (int64_t n : {(int64_t)1027, (int64_t)1024}) {  // scalar tail and vectorised
    const std::vector<float> p0 = randn((size_t)n, 63), grad = randn((size_t)n, 64);
    std::vector<float> rp = p0, rm(n, 0.0f), rv(n, 0.0f);
    ref::adamw_step(rp.data(), grad.data(), rm.data(), rv.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    DevBuf<float> dp(n), dgr(n), dm(n), dv(n);
    DevBuf<f16> dcopy(n);
    upload(dp, p0);
    upload(dgr, grad);
    upload(dm, std::vector<float>(n, 0.0f));
    upload(dv, std::vector<float>(n, 0.0f));
    dcopy.poison();
    cu::adamw_step(dp.p, dcopy.p, dgr.p, dm.p, dv.p, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    const std::vector<float> p = download(dp);
    EXPECT_TRUE(close("adamw f16 param", p, rp, tol_f32(rp, 1)));
    const std::vector<uint16_t> copy = bits_of(dcopy);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[i], f16(p[i]).bits) << i;
  }
}

}  // namespace
}  // namespace gpumix::test
