// Every CUDA kernel against its CPU reference twin (kernels::cpu::ref) on random
// bf16-rounded inputs, odd shapes, NaN-poisoned outputs and accumulation into non-zero
// gradients. Without a CUDA device every test skips (CudaTest::SetUp).
#include <algorithm>
#include <cstring>
#include <tuple>

#include "kernels/cpu/ref.h"
#include "kernels/philox.h"
#include "tests/cuda/cuda_test_util.h"

namespace gpumix::test {
namespace {

namespace ref = gpumix::kernels::cpu::ref;

// ---- device ---------------------------------------------------------------------------------

TEST_F(CudaTest, DeviceInfo) {
  const int n = cu::cuda_device_count();
  ASSERT_GT(n, 0);
  const cu::DeviceInfo d = cu::cuda_device_info(0);
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GT(d.total_memory, 0);
  EXPECT_GE(d.cc_major, 7);
  std::printf("device 0: %s\n", cu::cuda_device_summary(0).c_str());
}

TEST_F(CudaTest, CheckMacroReportsFileLineAndMessage) {
  try {
    CUDA_CHECK(cudaSetDevice(1 << 20));
    FAIL() << "expected an exception";
  } catch (const cu::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("test_cuda_kernels.cpp:"), std::string::npos) << w;
    EXPECT_NE(w.find("cudaErrorInvalidDevice"), std::string::npos) << w;
  }
  (void)cudaGetLastError();
}

// ---- conversions and elementwise ---------------------------------------------------------------

TEST_F(CudaTest, ConversionsMatchBf16HBitForBit) {
  std::vector<float> in = randn(4099, 1);
  for (auto& x : in) x *= 1.001f;  // not representable in bf16: real rounding
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e38f, 3.3961e38f, 1e-40f,
                            1.00390625f /* tie */, 1.01171875f /* tie */};
  for (float s : specials) in.push_back(s);
  for (int64_t n : {(int64_t)1, (int64_t)3, (int64_t)17, (int64_t)in.size()}) {
    DevBuf<float> din(n), dback(n);
    DevBuf<bf16> dout(n);
    upload(din, std::vector<float>(in.end() - n, in.end()));
    dout.poison();
    dback.poison();
    cu::f32_to_bf16(dout.p, din.p, n);
    cu::bf16_to_f32(dback.p, dout.p, n);
    std::vector<uint16_t> bits(n);
    CUDA_CHECK(cudaMemcpy(bits.data(), dout.p, 2 * n, cudaMemcpyDeviceToHost));
    const std::vector<float> back = download(dback);
    for (int64_t i = 0; i < n; ++i) {
      const float x = in[in.size() - n + i];
      ASSERT_EQ(bits[i], f32_to_bf16_bits(x)) << "n " << n << " i " << i << " x " << x;
      uint32_t a, b;
      const float expect = bf16_bits_to_f32(bits[i]);
      memcpy(&a, &back[i], 4);
      memcpy(&b, &expect, 4);
      ASSERT_EQ(a, b) << "i " << i;
    }
  }
}

TEST_F(CudaTest, ElementwiseF32AndBf16) {
  for (int64_t n : {(int64_t)1, (int64_t)3, (int64_t)17, (int64_t)1000, (int64_t)65536 + 5}) {
    for (int offset : {0, 1}) {  // offset 1: misaligned pointers take the scalar path
      const std::vector<float> a = randn(n, 2), b = randn(n, 3), o0 = randn(n, 4);
      const float s = 0.75f;
      std::vector<float> radd(n), rscale(n), raxpy = o0;
      ref::add(radd.data(), a.data(), b.data(), n);
      ref::scale(rscale.data(), a.data(), s, n);
      ref::axpy(raxpy.data(), a.data(), s, n);
      // fp32
      {
        DevBuf<float> da(n + 1), db(n + 1), dout(n + 1);
        std::vector<float> pa(n + 1), pb(n + 1), po(n + 1, NAN);
        std::copy(a.begin(), a.end(), pa.begin() + offset);
        std::copy(b.begin(), b.end(), pb.begin() + offset);
        upload(da, pa);
        upload(db, pb);
        // exact, except axpy: the device may fuse s * a + out into one FMA (one rounding
        // fewer), so allow one fp32 rounding of the terms
        auto check = [&](const char* what, const std::vector<float>& r, Tol tol = Tol{0, 0}) {
          std::vector<float> g = download(dout);
          g = std::vector<float>(g.begin() + offset, g.begin() + offset + n);
          EXPECT_TRUE(close(what, g, r, tol)) << "n " << n << " offset " << offset;
        };
        const Tol fma_tol{8 * std::ldexp(1.0, -24), std::ldexp(1.0, -23)};
        dout.poison();
        cu::add(dout.p + offset, da.p + offset, db.p + offset, n);
        check("add f32", radd);
        dout.poison();
        cu::scale(dout.p + offset, da.p + offset, s, n);
        check("scale f32", rscale);
        std::copy(o0.begin(), o0.end(), po.begin() + offset);
        upload(dout, po);
        cu::axpy(dout.p + offset, da.p + offset, s, n);
        check("axpy f32", raxpy, fma_tol);
        // mixed: fp32 out += s * bf16 a
        DevBuf<bf16> ha(n + 1);
        upload(ha, pa);
        upload(dout, po);
        cu::axpy(dout.p + offset, ha.p + offset, s, n);
        check("axpy f32 += bf16", raxpy, fma_tol);
        dout.poison();
        cu::fill(dout.p + offset, 2.5f, n);
        check("fill f32", std::vector<float>(n, 2.5f));
      }
      // bf16: one rounding of the fp32 result
      {
        DevBuf<bf16> da(n + 1), db(n + 1), dout(n + 1);
        std::vector<float> pa(n + 1), pb(n + 1), po(n + 1);
        std::copy(a.begin(), a.end(), pa.begin() + offset);
        std::copy(b.begin(), b.end(), pb.begin() + offset);
        std::copy(o0.begin(), o0.end(), po.begin() + offset);
        upload(da, pa);
        upload(db, pb);
        // exact, except axpy (FMA, see above): then one bf16 rounding step may differ
        auto check = [&](const char* what, const std::vector<float>& r, Tol tol = Tol{0, 0}) {
          std::vector<float> g = download(dout);
          g = std::vector<float>(g.begin() + offset, g.begin() + offset + n);
          EXPECT_TRUE(close(what, g, rounded(r), tol)) << "n " << n << " offset " << offset;
        };
        const Tol fma_tol{8 * std::ldexp(1.0, -24), std::ldexp(1.0, -7)};
        dout.poison();
        cu::add(dout.p + offset, da.p + offset, db.p + offset, n);
        check("add bf16", radd);
        dout.poison();
        cu::scale(dout.p + offset, da.p + offset, s, n);
        check("scale bf16", rscale);
        upload(dout, po);
        cu::axpy(dout.p + offset, da.p + offset, s, n);
        check("axpy bf16", raxpy, fma_tol);
      }
    }
  }
}

TEST_F(CudaTest, Reductions) {
  for (int64_t n : {(int64_t)0, (int64_t)1, (int64_t)17, (int64_t)100003, (int64_t)3000000}) {
    const std::vector<float> a = randn(n, 5);
    DevBuf<float> da(n);
    if (n) upload(da, a);
    const double rs = ref::sum(a.data(), n), rss = ref::sum_squares(a.data(), n);
    const double gs = cu::sum_sync(da.p, n), gss = cu::sum_squares_sync(da.p, n);
    EXPECT_NEAR(gs, rs, 1e-10 * (1.0 + std::fabs(rss))) << "n " << n;
    EXPECT_NEAR(gss, rss, 1e-10 * (1.0 + rss)) << "n " << n;
    DevBuf<bf16> ha(n);
    if (n) upload(ha, a);
    DevBuf<double> out(2);
    out.poison();
    cu::sum(out.p, ha.p, n);
    cu::sum_squares(out.p + 1, ha.p, n);
    double h[2];
    CUDA_CHECK(cudaMemcpy(h, out.p, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT_NEAR(h[0], rs, 1e-10 * (1.0 + std::fabs(rss))) << "bf16 n " << n;
    EXPECT_NEAR(h[1], rss, 1e-10 * (1.0 + rss)) << "bf16 n " << n;
  }
}

// ---- matmul -------------------------------------------------------------------------------------

class CudaMatmul : public CudaTest, public ::testing::WithParamInterface<std::tuple<int, int, int>> {};

TEST_P(CudaMatmul, ForwardAndBackwardMatchRef) {
  const auto [N, C, OC] = GetParam();
  const std::vector<float> inp = randn((size_t)N * C, 10), w = randn((size_t)OC * C, 11, 0.1f),
                           bias = randn(OC, 12), dout = randn((size_t)N * OC, 13),
                           dinp0 = randn((size_t)N * C, 14), dw0 = randn((size_t)OC * C, 15),
                           db0 = randn(OC, 16);
  DevBuf<bf16> d_inp(inp.size()), d_w(w.size()), d_b(OC), d_out((size_t)N * OC),
      d_dout(dout.size()), d_dinp(dinp0.size());
  DevBuf<float> d_dw(dw0.size()), d_db(OC);
  upload(d_inp, inp);
  upload(d_w, w);
  upload(d_b, bias);
  upload(d_dout, dout);
  for (int with_bias = 0; with_bias < 2; ++with_bias) {
    std::vector<float> r((size_t)N * OC);
    ref::matmul_forward(r.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C,
                        OC);
    d_out.poison();
    cu::matmul_forward(d_out.p, d_inp.p, d_w.p, with_bias ? d_b.p : nullptr, N, C, OC);
    EXPECT_TRUE(close(with_bias ? "matmul_forward+bias" : "matmul_forward", download(d_out), r,
                      tol_bf16(r)));
  }
  std::vector<float> rdinp = dinp0, rdw = dw0, rdb = db0;
  ref::matmul_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), inp.data(), w.data(), N,
                       C, OC);
  upload(d_dinp, dinp0);
  upload(d_dw, dw0);
  upload(d_db, db0);
  cu::matmul_backward(d_dinp.p, d_dw.p, d_db.p, d_dout.p, d_inp.p, d_w.p, N, C, OC);
  EXPECT_TRUE(close("matmul_backward dinp", download(d_dinp), rdinp, tol_bf16(rdinp)));
  EXPECT_TRUE(close("matmul_backward dweight", download(d_dw), rdw, tol_f32(rdw, N)));
  EXPECT_TRUE(close("matmul_backward dbias", download(d_db), rdb, tol_f32(rdb, N)));
  // null gradients are skipped
  cu::matmul_backward(nullptr, nullptr, nullptr, d_dout.p, d_inp.p, d_w.p, N, C, OC);
  EXPECT_TRUE(close("matmul_backward dinp unchanged", download(d_dinp), rdinp, tol_bf16(rdinp)));
}

// The fused epilogues and first writes against the reference twins run as separate passes:
// linear + GELU (GELU_AUX_BIAS; OC 7 takes the unfused fallback), the input gradient through
// the GELU (DGELU), and matmul_backward writing poisoned gradients with beta 0 (dbias by
// BGRADB) or accumulating (dbias by BGRADB into a scratch, then added). The fused results
// round once from fp32, the separate passes twice: within the bf16 tolerance of the twin.
TEST_P(CudaMatmul, FusedEpiloguesAndFirstWritesMatchTheSeparatePasses) {
  const auto [N, C, OC] = GetParam();
  const std::vector<float> inp = randn((size_t)N * C, 70), w = randn((size_t)OC * C, 71, 0.1f),
                           bias = randn(OC, 72), dout = randn((size_t)N * OC, 73),
                           dw0 = randn((size_t)OC * C, 74), db0 = randn(OC, 75);
  DevBuf<bf16> d_inp(inp.size()), d_w(w.size()), d_b(OC), d_out((size_t)N * OC),
      d_pre((size_t)N * OC), d_dout(dout.size()), d_dinp(inp.size());
  DevBuf<float> d_dw(w.size()), d_db(OC), d_scratch(OC);
  upload(d_inp, inp);
  upload(d_w, w);
  upload(d_b, bias);
  upload(d_dout, dout);
  // forward: pre = inp w^T + b, out = gelu(pre)
  std::vector<float> rpre((size_t)N * OC), rout((size_t)N * OC);
  ref::matmul_forward(rpre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  ref::gelu_forward(rout.data(), rpre.data(), (int64_t)N * OC);
  d_out.poison();
  d_pre.poison();
  cu::matmul_gelu_forward(d_out.p, d_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC);
  EXPECT_TRUE(close("matmul_gelu_forward pre", download(d_pre), rpre, tol_bf16(rpre)));
  EXPECT_TRUE(close("matmul_gelu_forward out", download(d_out), rout, tol_bf16(rout)));
  // backward through the GELU: the linear's input is gelu(x) with x (N, C) the aux
  if (C % 8 == 0) {
    const std::vector<float> x = randn((size_t)N * C, 76, 2.0f);
    std::vector<float> rg((size_t)N * C, 0.0f), rdx((size_t)N * C, 0.0f);
    ref::matmul_backward(rg.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    ref::gelu_backward(rdx.data(), x.data(), rg.data(), (int64_t)N * C);
    DevBuf<bf16> d_x(x.size());
    upload(d_x, x);
    d_dinp.poison();
    cu::matmul_backward_dgelu(d_dinp.p, d_dout.p, d_w.p, d_x.p, N, C, OC);
    EXPECT_TRUE(close("matmul_backward_dgelu", download(d_dinp), rdx, tol_bf16(rdx)));
  }
  // first writes (beta 0) into poisoned gradients, then accumulation onto dw0, db0
  std::vector<float> rdinp((size_t)N * C, 0.0f), rdw((size_t)OC * C, 0.0f), rdb(OC, 0.0f);
  ref::matmul_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), inp.data(), w.data(), N,
                       C, OC);
  d_dinp.poison();
  d_dw.poison();
  d_db.poison();
  cu::matmul_backward(d_dinp.p, d_dw.p, d_db.p, d_dout.p, d_inp.p, d_w.p, N, C, OC, nullptr,
                      /*overwrite_dinp=*/true, /*overwrite_params=*/true);
  EXPECT_TRUE(close("first write dinp", download(d_dinp), rdinp, tol_bf16(rdinp)));
  EXPECT_TRUE(close("first write dweight", download(d_dw), rdw, tol_f32(rdw, N)));
  EXPECT_TRUE(close("first write dbias (BGRADB)", download(d_db), rdb, tol_f32(rdb, N)));
  std::vector<float> adw = dw0, adb = db0;
  ref::matmul_backward(nullptr, adw.data(), adb.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
  upload(d_dw, dw0);
  upload(d_db, db0);
  d_scratch.poison();
  cu::matmul_backward(nullptr, d_dw.p, d_db.p, d_dout.p, d_inp.p, d_w.p, N, C, OC, nullptr, false,
                      false, d_scratch.p);
  EXPECT_TRUE(close("accumulated dweight", download(d_dw), adw, tol_f32(adw, N)));
  EXPECT_TRUE(close("accumulated dbias (BGRADB + add)", download(d_db), adb, tol_f32(adb, N)));
  // A repeated shape builds no new descriptors: the plans are cached per shape and epilogue.
  const int plans = cu::matmul_cached_algos();
  cu::matmul_gelu_forward(d_out.p, d_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC);
  cu::matmul_backward(d_dinp.p, d_dw.p, d_db.p, d_dout.p, d_inp.p, d_w.p, N, C, OC, nullptr, true,
                      true);
  EXPECT_EQ(cu::matmul_cached_algos(), plans);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMatmul,
                         ::testing::Values(std::make_tuple(1, 8, 8), std::make_tuple(17, 64, 24),
                                           std::make_tuple(33, 40, 72),
                                           std::make_tuple(64, 768, 256),
                                           std::make_tuple(256, 256, 1000),
                                           std::make_tuple(5, 3, 7)));

TEST_F(CudaTest, GemmAllTransposesBatched) {
  const int m = 24, n = 40, k = 16, batch = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
      const int64_t sa = (int64_t)m * k, sb = (int64_t)k * n, sc = (int64_t)m * n;
      const std::vector<float> a = randn(sa * batch, 20), b = randn(sb * batch, 21),
                               c0 = randn(sc * batch, 22);
      std::vector<float> r = c0;
      ref::gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, r.data(), ldc, batch,
                sa, sb, sc);
      DevBuf<bf16> da(a.size()), db(b.size()), dc(c0.size());
      DevBuf<float> dcf(c0.size());
      upload(da, a);
      upload(db, b);
      upload(dc, c0);
      upload(dcf, c0);
      cu::gemm(ta, tb, m, n, k, 0.5f, da.p, lda, db.p, ldb, 1.0f, dc.p, ldc, batch, sa, sb, sc);
      cu::gemm(ta, tb, m, n, k, 0.5f, da.p, lda, db.p, ldb, 1.0f, dcf.p, ldc, batch, sa, sb, sc);
      const std::string what = "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
      EXPECT_TRUE(close((what + " bf16").c_str(), download(dc), r, tol_bf16(r)));
      EXPECT_TRUE(close((what + " f32").c_str(), download(dcf), r, tol_f32(r, k)));
    }
  }
  EXPECT_GT(cu::matmul_cached_algos(), 0);
}

TEST_F(CudaTest, BiasAddAndBackward) {
  for (auto [N, C] : {std::make_pair(1, 1), std::make_pair(3, 17), std::make_pair(300, 33),
                      std::make_pair(1000, 768)}) {
    const std::vector<float> inp = randn((size_t)N * C, 30), bias = randn(C, 31),
                             db0 = randn(C, 32);
    std::vector<float> r((size_t)N * C), rdb = db0;
    ref::bias_add(r.data(), inp.data(), bias.data(), N, C);
    ref::bias_backward(rdb.data(), inp.data(), N, C);
    DevBuf<bf16> di(inp.size()), dbias(C), dout(inp.size());
    DevBuf<float> ddb(C);
    upload(di, inp);
    upload(dbias, bias);
    upload(ddb, db0);
    dout.poison();
    cu::bias_add(dout.p, di.p, dbias.p, N, C);
    cu::bias_backward(ddb.p, di.p, N, C);
    EXPECT_TRUE(close("bias_add", download(dout), r, tol_bf16(r))) << N << "x" << C;
    EXPECT_TRUE(close("bias_backward", download(ddb), rdb, tol_f32(rdb, N))) << N << "x" << C;
  }
}

// ---- layernorm, gelu ------------------------------------------------------------------------------

TEST_F(CudaTest, LayerNorm) {
  for (auto [N, C] : {std::make_pair(1, 768), std::make_pair(3, 17), std::make_pair(33, 64),
                      std::make_pair(64, 1600), std::make_pair(5, 20), std::make_pair(257, 768)}) {
    const size_t n = (size_t)N * C;
    std::vector<float> inp = randn(n, 40, 2.0f);
    for (auto& x : inp) x = round_bf16(x + 0.5f);  // a non-zero mean
    const std::vector<float> w = randn(C, 41), b = randn(C, 42), dout = randn(n, 43),
                             dinp0 = randn(n, 44), dw0 = randn(C, 45), db0 = randn(C, 46);
    std::vector<float> rout(n), rmean(N), rrstd(N), rdinp = dinp0, rdw = dw0, rdb = db0;
    ref::layernorm_forward(rout.data(), rmean.data(), rrstd.data(), inp.data(), w.data(),
                           b.data(), N, C);
    DevBuf<bf16> di(n), dw(C), db(C), dout_(n), dd(n), dgo(n);
    DevBuf<float> dmean(N), drstd(N), ddw(C), ddb(C);
    upload(di, inp);
    upload(dw, w);
    upload(db, b);
    dout_.poison();
    dmean.poison();
    drstd.poison();
    cu::layernorm_forward(dout_.p, dmean.p, drstd.p, di.p, dw.p, db.p, N, C);
    const std::string shape = std::to_string(N) + "x" + std::to_string(C);
    EXPECT_TRUE(close("layernorm_forward out", download(dout_), rout, tol_bf16(rout))) << shape;
    EXPECT_TRUE(close("layernorm_forward mean", download(dmean), rmean, tol_f32(rmean, C)))
        << shape;
    EXPECT_TRUE(close("layernorm_forward rstd", download(drstd), rrstd, tol_f32(rrstd, C)))
        << shape;
    // backward from the reference statistics, so both sides see the same mean and rstd
    ref::layernorm_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), inp.data(),
                            w.data(), rmean.data(), rrstd.data(), N, C);
    upload(dgo, dout);
    upload(dd, dinp0);
    upload(ddw, dw0);
    upload(ddb, db0);
    upload(dmean, rmean);
    upload(drstd, rrstd);
    cu::layernorm_backward(dd.p, ddw.p, ddb.p, dgo.p, di.p, dw.p, dmean.p, drstd.p, N, C);
    EXPECT_TRUE(close("layernorm_backward dinp", download(dd), rdinp, tol_bf16(rdinp))) << shape;
    EXPECT_TRUE(close("layernorm_backward dweight", download(ddw), rdw, tol_f32(rdw, N))) << shape;
    EXPECT_TRUE(close("layernorm_backward dbias", download(ddb), rdb, tol_f32(rdb, N))) << shape;
  }
}

TEST_F(CudaTest, Gelu) {
  for (int64_t n : {(int64_t)1, (int64_t)17, (int64_t)4099, (int64_t)8192}) {
    const std::vector<float> x = randn(n, 50, 3.0f), g = randn(n, 51), d0 = randn(n, 52);
    std::vector<float> r(n), rd = d0;
    ref::gelu_forward(r.data(), x.data(), n);
    ref::gelu_backward(rd.data(), x.data(), g.data(), n);
    DevBuf<bf16> dx(n), dg(n), dout(n), dd(n);
    upload(dx, x);
    upload(dg, g);
    upload(dd, d0);
    dout.poison();
    cu::gelu_forward(dout.p, dx.p, n);
    cu::gelu_backward(dd.p, dx.p, dg.p, n);
    EXPECT_TRUE(close("gelu_forward", download(dout), r, tol_bf16(r))) << n;
    EXPECT_TRUE(close("gelu_backward", download(dd), rd, tol_bf16(rd))) << n;
  }
}

// ---- attention ----------------------------------------------------------------------------------

// The tensor-core forward (head size 64: attention.cu) rounds the probabilities P to bf16
// before O = P V, as FlashAttention-2 does: out_i,d moves by at most 2^-8 sum_j P_ij |v_j,d|
// (bf16 keeps 8 significant bits: rounding to nearest moves a value by at most 2^-8 of it; the
// first version said 2^-9, found when the backward's allowance below, derived the same way,
// came out too small), allowed on top of the bf16 tolerance. P from
// the reference's lse, in double.
std::vector<float> p_rounding_allowance(const std::vector<float>& qkv, const std::vector<float>& lse,
                                        int B, int T, int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt((double)HS);
  std::vector<float> w((size_t)B * T * C);
  std::vector<double> acc(HS);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float* q = &qkv[((size_t)b * T + i) * 3 * C + h * HS];
        for (int j = 0; j <= i; ++j) {
          const float* k = &qkv[((size_t)b * T + j) * 3 * C + C + h * HS];
          double dot = 0.0;
          for (int d = 0; d < HS; ++d) dot += (double)q[d] * k[d];
          const double p = std::exp(dot * scale - lse[((size_t)b * NH + h) * T + i]);
          for (int d = 0; d < HS; ++d) acc[d] += p * std::fabs(k[C + d]);
        }
        for (int d = 0; d < HS; ++d)
          w[((size_t)b * T + i) * C + h * HS + d] = (float)std::ldexp(acc[d], -8);
      }
  return w;
}

// The tensor-core backward (head sizes 64 and 128) rounds P and dS to bf16 before the products
// that take them as an operand (dV = P^T dO; dK = scale dS^T Q, dQ = scale dS K), as
// FlashAttention-2 does: each with relative error 2^-8, so dv_j,d moves by at most
// 2^-8 sum_i P_ij |dO_i,d|, dk_j,d by 2^-8 scale sum_i |dS_ij| |q_i,d| and dq_i,d by
// 2^-8 scale sum_j |dS_ij| |k_j,d|, allowed on top of the bf16 tolerance. P from the reference's
// lse, dS = P (dP - D') with the kernel's D' = dout . out(bf16), in double.
std::vector<float> ds_rounding_allowance(const std::vector<float>& qkv, const std::vector<float>& dout,
                                         const std::vector<float>& out_bf16,
                                         const std::vector<float>& lse, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt((double)HS), u = std::ldexp(1.0, -8);
  std::vector<double> w((size_t)B * T * 3 * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const size_t qi = ((size_t)b * T + i) * 3 * C + h * HS, oi = ((size_t)b * T + i) * C + h * HS;
        double dd = 0.0;  // D'_i
        for (int d = 0; d < HS; ++d) dd += (double)dout[oi + d] * out_bf16[oi + d];
        for (int j = 0; j <= i; ++j) {
          const size_t kj = ((size_t)b * T + j) * 3 * C + C + h * HS;
          double s = 0.0, dp = 0.0;
          for (int d = 0; d < HS; ++d) {
            s += (double)qkv[qi + d] * qkv[kj + d];
            dp += (double)dout[oi + d] * qkv[kj + C + d];
          }
          const double p = std::exp(s * scale - lse[((size_t)b * NH + h) * T + i]);
          const double ds = std::fabs(p * (dp - dd)) * scale;
          for (int d = 0; d < HS; ++d) {
            w[qi + d] += ds * std::fabs(qkv[kj + d]);
            w[kj + d] += ds * std::fabs(qkv[qi + d]);
            w[kj + C + d] += p * std::fabs(dout[oi + d]);
          }
        }
      }
  std::vector<float> f(w.size());
  for (size_t e = 0; e < w.size(); ++e) f[e] = (float)(u * w[e]);
  return f;
}

// Which head sizes the tensor-core kernels take (attention.cu; aligned buffers, as DevBuf's).
bool attention_on_tensor_cores(int HS) { return HS == 64 || HS == 128; }


class CudaAttention : public CudaTest,
                      public ::testing::WithParamInterface<std::tuple<int, int, int, int>> {};

TEST_P(CudaAttention, FlashAndReferenceMatchCpu) {
  const auto [B, T, NH, HS] = GetParam();
  const int C = NH * HS;
  const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
  const std::vector<float> qkv = randn(nqkv, 60), dout = randn(nout, 61), dqkv0 = randn(nqkv, 62, 0.01f);
  std::vector<float> rout(nout), rlse(nlse), rdqkv = dqkv0;
  ref::attention_forward(rout.data(), rlse.data(), qkv.data(), B, T, C, NH);
  ref::attention_backward(rdqkv.data(), dout.data(), qkv.data(), rout.data(), rlse.data(), B, T,
                          C, NH);
  const std::vector<float> rdqkv_flash =
      flash_backward_reference(rdqkv, qkv, dout, rout, rounded(rout), rlse, B, T, C, NH);
  DevBuf<bf16> dqkv_in(nqkv), dgo(nout), dout_(nout), ddq(nqkv);
  DevBuf<float> dlse(nlse);
  upload(dqkv_in, qkv);
  upload(dgo, dout);
  const std::string shape = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" +
                            std::to_string(NH) + " HS" + std::to_string(HS);
  for (int flash = 0; flash < 2; ++flash) {
    if (flash && !cu::attention_flash_supported(HS)) continue;
    const char* name = flash ? "flash" : "ref";
    dout_.poison();
    dlse.poison();
    if (flash)
      cu::attention_forward(dout_.p, dlse.p, dqkv_in.p, B, T, C, NH);
    else
      cu::attention_forward_ref(dout_.p, dlse.p, dqkv_in.p, B, T, C, NH);
    const std::vector<float> gout = download(dout_);
    const std::vector<float> p_bf16 =
        flash && attention_on_tensor_cores(HS) ? p_rounding_allowance(qkv, rlse, B, T, C, NH)
                                               : std::vector<float>();
    EXPECT_TRUE(close((std::string(name) + " attention_forward out").c_str(), gout, rout,
                      tol_bf16(rout), p_bf16.empty() ? nullptr : &p_bf16))
        << shape;
    EXPECT_TRUE(close((std::string(name) + " attention_forward lse").c_str(), download(dlse), rlse,
                      tol_lse()))
        << shape;
    // backward from the CPU's out (rounded to bf16, as the GPU stores it) and lse
    DevBuf<bf16> dref_out(nout);
    upload(dref_out, rounded(rout));
    upload(dlse, rlse);
    upload(ddq, dqkv0);
    if (flash)
      cu::attention_backward(ddq.p, dgo.p, dqkv_in.p, dref_out.p, dlse.p, B, T, C, NH);
    else
      cu::attention_backward_ref(ddq.p, dgo.p, dqkv_in.p, dref_out.p, dlse.p, B, T, C, NH);
    // dqkv0 is small so the gradient dominates the sum.
    const std::vector<float>& want = flash ? rdqkv_flash : rdqkv;
    const std::vector<float> ds_bf16 =
        flash && attention_on_tensor_cores(HS)
            ? ds_rounding_allowance(qkv, dout, rounded(rout), rlse, B, T, C, NH)
            : std::vector<float>();
    EXPECT_TRUE(close((std::string(name) + " attention_backward dqkv").c_str(), download(ddq),
                      want, tol_bf16(want), ds_bf16.empty() ? nullptr : &ds_bf16))
        << shape;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(std::make_tuple(1, 1, 1, 16),
                                           std::make_tuple(2, 17, 3, 32),
                                           std::make_tuple(1, 33, 2, 64),
                                           std::make_tuple(2, 65, 4, 64),
                                           std::make_tuple(1, 100, 2, 128),
                                           std::make_tuple(1, 130, 1, 16),
                                           std::make_tuple(2, 9, 3, 12),  // reference only
                                           std::make_tuple(1, 256, 2, 64)));

// The tensor-core kernels at gpt2's context length and at a length no tile divides (head sizes
// 64 and 128), against the CPU: out within bf16's tolerance plus the P rounding above, lse within
// tol_lse, dqkv within bf16's plus the P and dS rounding; and the SIMT kernel that takes head
// size 64 when qkv is not 16-byte aligned, within bf16's alone.
TEST_F(CudaTest, FlashOnTensorCoresAtT1024AndRaggedT) {
  for (auto [B, T, NH, HS] : {std::make_tuple(1, 1024, 1, 64), std::make_tuple(2, 77, 2, 64),
                              std::make_tuple(1, 77, 2, 128)}) {
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    const std::vector<float> qkv = randn(nqkv, 80), dout = randn(nout, 82);
    std::vector<float> rout(nout), rlse(nlse), rdqkv(nqkv, 0.0f);
    ref::attention_forward(rout.data(), rlse.data(), qkv.data(), B, T, C, NH);
    ref::attention_backward(rdqkv.data(), dout.data(), qkv.data(), rout.data(), rlse.data(), B, T,
                            C, NH);
    const std::vector<float> want =
        flash_backward_reference(rdqkv, qkv, dout, rout, rounded(rout), rlse, B, T, C, NH);
    DevBuf<bf16> dqkv(nqkv), dout_(nout), dgo(nout), ddq(nqkv);
    DevBuf<float> dlse(nlse);
    upload(dqkv, qkv);
    upload(dgo, dout);
    dout_.poison();
    dlse.poison();
    cu::attention_forward(dout_.p, dlse.p, dqkv.p, B, T, C, NH);
    const std::vector<float> p_bf16 = p_rounding_allowance(qkv, rlse, B, T, C, NH);
    const std::string shape = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" +
                              std::to_string(NH) + " HS" + std::to_string(HS);
    EXPECT_TRUE(close("attention_forward out", download(dout_), rout, tol_bf16(rout), &p_bf16)) << shape;
    EXPECT_TRUE(close("attention_forward lse", download(dlse), rlse, tol_lse())) << shape;
    // backward from the CPU's out (rounded to bf16, as stored) and lse, into zeros
    upload(dout_, rounded(rout));
    upload(dlse, rlse);
    CUDA_CHECK(cudaMemset(ddq.p, 0, 2 * nqkv));
    cu::attention_backward(ddq.p, dgo.p, dqkv.p, dout_.p, dlse.p, B, T, C, NH);
    const std::vector<float> ds_bf16 = ds_rounding_allowance(qkv, dout, rounded(rout), rlse, B, T, C, NH);
    EXPECT_TRUE(close("attention_backward dqkv", download(ddq), want, tol_bf16(want), &ds_bf16)) << shape;
  }
  // qkv one element past a 16-byte boundary: cp.async cannot load it, the SIMT kernel runs.
  const int B = 1, T = 70, NH = 2, C = NH * 64;
  const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
  const std::vector<float> qkv = randn(nqkv, 81);
  std::vector<float> rout(nout), rlse(nlse);
  ref::attention_forward(rout.data(), rlse.data(), qkv.data(), B, T, C, NH);
  DevBuf<bf16> dqkv(nqkv + 1), dout(nout);
  DevBuf<float> dlse(nlse);
  std::vector<uint16_t> bits(nqkv);
  for (size_t i = 0; i < nqkv; ++i) bits[i] = f32_to_bf16_bits(qkv[i]);
  CUDA_CHECK(cudaMemcpy(dqkv.p + 1, bits.data(), 2 * nqkv, cudaMemcpyHostToDevice));
  dout.poison();
  dlse.poison();
  cu::attention_forward(dout.p, dlse.p, dqkv.p + 1, B, T, C, NH);
  EXPECT_TRUE(close("attention_forward out (unaligned qkv: SIMT)", download(dout), rout, tol_bf16(rout)));
  EXPECT_TRUE(close("attention_forward lse (unaligned qkv: SIMT)", download(dlse), rlse, tol_lse()));
  // The backward from the same unaligned qkv: the SIMT kernels (P and dS never rounded), within
  // bf16's tolerance alone.
  const std::vector<float> g = randn(nout, 83);
  std::vector<float> rdqkv(nqkv, 0.0f);
  ref::attention_backward(rdqkv.data(), g.data(), qkv.data(), rout.data(), rlse.data(), B, T, C, NH);
  const std::vector<float> want = flash_backward_reference(rdqkv, qkv, g, rout, rounded(rout), rlse, B, T, C,
                                                           NH);
  DevBuf<bf16> dg(nout), ddq(nqkv);
  upload(dg, g);
  upload(dout, rounded(rout));
  upload(dlse, rlse);
  CUDA_CHECK(cudaMemset(ddq.p, 0, 2 * nqkv));
  cu::attention_backward(ddq.p, dg.p, dqkv.p + 1, dout.p, dlse.p, B, T, C, NH);
  EXPECT_TRUE(close("attention_backward dqkv (unaligned qkv: SIMT)", download(ddq), want, tol_bf16(want)));
}

TEST_F(CudaTest, FlashAttentionIsDeterministicAndRejectsOddHeads) {
  const int B = 2, T = 200, NH = 2, HS = 64, C = NH * HS;
  const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
  DevBuf<bf16> qkv(nqkv), out(nout), g(nout), d1(nqkv), d2(nqkv);
  DevBuf<float> lse((size_t)B * NH * T);
  upload(qkv, randn(nqkv, 70));
  upload(g, randn(nout, 71));
  cu::attention_forward(out.p, lse.p, qkv.p, B, T, C, NH);
  CUDA_CHECK(cudaMemset(d1.p, 0, 2 * nqkv));
  CUDA_CHECK(cudaMemset(d2.p, 0, 2 * nqkv));
  cu::attention_backward(d1.p, g.p, qkv.p, out.p, lse.p, B, T, C, NH);
  cu::attention_backward(d2.p, g.p, qkv.p, out.p, lse.p, B, T, C, NH);
  std::vector<uint16_t> h1(nqkv), h2(nqkv);
  CUDA_CHECK(cudaMemcpy(h1.data(), d1.p, 2 * nqkv, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(h2.data(), d2.p, 2 * nqkv, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(h1 == h2);
  EXPECT_THROW(cu::attention_forward(out.p, lse.p, qkv.p, 1, 4, 24, 2), std::invalid_argument);
}

// ---- cross-entropy ---------------------------------------------------------------------------------

TEST_F(CudaTest, CrossEntropy) {
  const int32_t ignore = -100;
  for (auto [N, V] : {std::make_pair(1, 5), std::make_pair(3, 17), std::make_pair(17, 1000),
                      std::make_pair(4, 64), std::make_pair(8, 50257), std::make_pair(6, 50304)}) {
    const size_t n = (size_t)N * V;
    const std::vector<float> logits = randn(n, 80, 3.0f), d0 = randn(n, 81, 0.01f);
    std::vector<int32_t> targets(N);
    for (int i = 0; i < N; ++i) targets[i] = (int32_t)((i * 7919 + 13) % V);
    if (N > 2) targets[1] = ignore;
    const float dloss = 1.0f / N;
    std::vector<float> rloss(N), rlse(N), rd = d0, rd_fresh(n, 0.0f);
    ref::crossentropy_forward(rloss.data(), rlse.data(), logits.data(), targets.data(), N, V,
                              ignore);
    ref::crossentropy_backward(rd.data(), logits.data(), rlse.data(), targets.data(), dloss, N, V,
                               ignore);
    ref::crossentropy_backward(rd_fresh.data(), logits.data(), rlse.data(), targets.data(), dloss,
                               N, V, ignore);
    DevBuf<bf16> dl(n), dd(n);
    DevBuf<float> dloss_(N), dlse(N);
    DevBuf<int32_t> dt(N);
    upload(dl, logits);
    upload(dt, targets);
    dloss_.poison();
    dlse.poison();
    cu::crossentropy_forward(dloss_.p, dlse.p, dl.p, dt.p, N, V, ignore);
    const std::string shape = std::to_string(N) + "x" + std::to_string(V);
    EXPECT_TRUE(close("crossentropy_forward losses", download(dloss_), rloss, tol_lse()))
        << shape;
    EXPECT_TRUE(close("crossentropy_forward lse", download(dlse), rlse, tol_lse())) << shape;
    upload(dlse, rlse);
    upload(dd, d0);
    cu::crossentropy_backward(dd.p, dl.p, dlse.p, dt.p, dloss, N, V, ignore, true);
    EXPECT_TRUE(close("crossentropy_backward (accumulate)", download(dd), rd, tol_bf16(rd)))
        << shape;
    dd.poison();
    cu::crossentropy_backward(dd.p, dl.p, dlse.p, dt.p, dloss, N, V, ignore, false);
    EXPECT_TRUE(close("crossentropy_backward (overwrite)", download(dd), rd_fresh,
                      tol_bf16(rd_fresh)))
        << shape;
  }
}

// ---- embedding ---------------------------------------------------------------------------------------

TEST_F(CudaTest, Embedding) {
  for (auto [B, T, C, V] : {std::make_tuple(1, 1, 8, 3), std::make_tuple(2, 17, 24, 50),
                            std::make_tuple(3, 33, 3, 7), std::make_tuple(4, 64, 768, 1000)}) {
    const size_t n = (size_t)B * T * C;
    const std::vector<float> wte = randn((size_t)V * C, 90), wpe = randn((size_t)T * C, 91),
                             dout = randn(n, 92), dwte0 = randn((size_t)V * C, 93),
                             dwpe0 = randn((size_t)T * C, 94);
    std::vector<int32_t> tokens(B * T);
    for (int i = 0; i < B * T; ++i) tokens[i] = (int32_t)((i * i * 31 + 7) % V);  // repeats
    std::vector<float> rout(n), rdwte = dwte0, rdwpe = dwpe0;
    ref::embedding_forward(rout.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    ref::embedding_backward(rdwte.data(), rdwpe.data(), dout.data(), tokens.data(), B, T, C);
    DevBuf<bf16> dwte(wte.size()), dwpe(wpe.size()), dout_(n), dgo(n);
    DevBuf<float> ddwte(wte.size()), ddwpe(wpe.size());
    DevBuf<int32_t> dtok(B * T);
    upload(dwte, wte);
    upload(dwpe, wpe);
    upload(dtok, tokens);
    upload(dgo, dout);
    upload(ddwte, dwte0);
    upload(ddwpe, dwpe0);
    dout_.poison();
    cu::embedding_forward(dout_.p, dtok.p, dwte.p, dwpe.p, B, T, C);
    cu::embedding_backward(ddwte.p, ddwpe.p, dgo.p, dtok.p, B, T, C);
    const std::string shape = std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C);
    EXPECT_TRUE(close("embedding_forward", download(dout_), rout, tol_bf16(rout))) << shape;
    EXPECT_TRUE(close("embedding_backward dwte", download(ddwte), rdwte, tol_f32(rdwte, B * T)))
        << shape;
    EXPECT_TRUE(close("embedding_backward dwpe", download(ddwpe), rdwpe, tol_f32(rdwpe, B)))
        << shape;
  }
}

// ---- adamw -----------------------------------------------------------------------------------------------

TEST_F(CudaTest, AdamW) {
  for (int64_t n : {(int64_t)1, (int64_t)3, (int64_t)1027, (int64_t)4096}) {
    for (int step : {1, 5}) {
      const std::vector<float> p0 = randn(n, 100), g = randn(n, 101), m0 = randn(n, 102, 0.1f);
      std::vector<float> v0 = randn(n, 103, 0.1f);
      for (auto& x : v0) x = x * x;
      std::vector<float> rp = p0, rm = m0, rv = v0;
      ref::adamw_step(rp.data(), g.data(), rm.data(), rv.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                      0.1f, step);
      DevBuf<float> dp(n), dg(n), dm(n), dv(n);
      DevBuf<bf16> dh(n);
      upload(dp, p0);
      upload(dg, g);
      upload(dm, m0);
      upload(dv, v0);
      dh.poison();
      cu::adamw_step(dp.p, dh.p, dg.p, dm.p, dv.p, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      const std::string what = "n " + std::to_string(n) + " step " + std::to_string(step);
      EXPECT_TRUE(close("adamw param", download(dp), rp, tol_f32(rp, 1))) << what;
      EXPECT_TRUE(close("adamw m", download(dm), rm, tol_f32(rm, 1))) << what;
      EXPECT_TRUE(close("adamw v", download(dv), rv, tol_f32(rv, 1))) << what;
      EXPECT_TRUE(close("adamw bf16 copy", download(dh), rp, tol_bf16(rp))) << what;
    }
  }
}

// ---- tokens, fill i32, random numbers, spin ---------------------------------------------------

TEST_F(CudaTest, CheckTokensReplacesAndReportsTheFirstBadOne) {
  const int V = 50;
  std::vector<int32_t> tok(1001);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)(i * 7 % V);
  tok[700] = V;   // one past the end
  tok[333] = -2;  // negative: the first bad position
  DevBuf<int32_t> din(tok.size()), dout(tok.size());
  upload(din, tok);
  DevBuf<unsigned long long> report(1);
  const unsigned long long none = ~0ull;
  CUDA_CHECK(cudaMemcpy(report.p, &none, 8, cudaMemcpyHostToDevice));
  cu::check_tokens(dout.p, din.p, (int64_t)tok.size(), V, report.p);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> got(tok.size());
  CUDA_CHECK(cudaMemcpy(got.data(), dout.p, 4 * got.size(), cudaMemcpyDeviceToHost));
  unsigned long long word = 0;
  CUDA_CHECK(cudaMemcpy(&word, report.p, 8, cudaMemcpyDeviceToHost));
  EXPECT_EQ(word >> 32, 333u);
  EXPECT_EQ((int32_t)(uint32_t)word, -2);
  for (size_t i = 0; i < tok.size(); ++i)
    ASSERT_EQ(got[i], (i == 333 || i == 700) ? 0 : tok[i]) << i;
}

TEST_F(CudaTest, FillI32) {
  for (int64_t n : {(int64_t)1, (int64_t)1000003}) {
    DevBuf<int32_t> d(n);
    cu::fill(d.p, -7, n);
    std::vector<int32_t> got(n);
    CUDA_CHECK(cudaMemcpy(got.data(), d.p, 4 * n, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, std::vector<int32_t>(n, -7));
  }
}

TEST_F(CudaTest, RandomStreamsAreTheHosts) {
  const int64_t n = 4099;
  const uint64_t key = 0x1234, offset = 77;
  std::vector<float> uref(n), nref(n);
  for (int64_t i = 0; i < n; ++i) {
    uref[i] = -0.5f + (2.0f - -0.5f) * philox_uniform_at(key, offset + i);
    nref[i] = 0.25f + 3.0f * philox_normal_at(key, offset + i);
  }
  DevBuf<float> u(n), z(n);
  DevBuf<bf16> uh(n);
  u.poison();
  z.poison();
  uh.poison();
  cu::uniform(u.p, n, key, offset, -0.5f, 2.0f);
  cu::uniform(uh.p, n, key, offset, -0.5f, 2.0f);
  cu::normal(z.p, n, key, offset, 0.25f, 3.0f);
  const std::vector<float> ug = download(u), uhg = download(uh), zg = download(z);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(ug[i], uref[i]) << "uniform, bit for bit, i " << i;
    ASSERT_EQ(uhg[i], round_bf16(uref[i])) << "uniform bf16 i " << i;
  }
  // Box-Muller with the device's logf / cosf / sqrtf, each within a few ulps of the host's
  // libm: rtol 16 ulps (2^-23 each); atol for cos near its zeros, whose error is absolute
  // (4 ulps of 1), times the radius (sqrt(-2 ln 2^-24) < 6) and std 3.
  EXPECT_TRUE(close("normal", zg, nref, Tol{3.0 * 6 * 4 * std::ldexp(1.0, -24), 16 * std::ldexp(1.0, -23)}));
}

TEST_F(CudaTest, SpinHoldsTheStreamNotTheHost) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, s));
  cu::spin_ns(30 * 1000 * 1000, s);  // 30 ms
  CUDA_CHECK(cudaEventRecord(b, s));
  EXPECT_EQ(cudaEventQuery(b), cudaErrorNotReady);  // the host went on
  (void)cudaGetLastError();
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  EXPECT_GE(ms, 29.0f);
  EXPECT_LT(ms, 60.0f);  // __nanosleep steps of ~1 us; a loose bound
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace
}  // namespace gpumix::test
