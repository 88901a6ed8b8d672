// gemm, matmul_forward/backward, bias_add, bias_backward: fast against ref.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ref.h"

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using gpumix::kernels::test::all_close;
using gpumix::kernels::test::fp32_rtol;
using gpumix::kernels::test::random_floats;

namespace {

struct GemmCase {
  int m, n, k, batch;
};

// Every transpose combination, padded leading dimensions, batch strides with a gap,
// alpha and beta != 1, and beta == 0 with NaN in C (BLAS must not read C then).
void check_gemm(const GemmCase& g, bool ta, bool tb, float alpha, float beta, uint32_t seed) {
  const int pad = 3;
  const int a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = g.n + pad;
  const int64_t sa = (int64_t)a_rows * lda + 5, sb = (int64_t)b_rows * ldb + 7,
                sc = (int64_t)g.m * ldc + 11;
  const auto a = random_floats(sa * g.batch, seed);
  const auto b = random_floats(sb * g.batch, seed + 1);
  auto c_fast = random_floats(sc * g.batch, seed + 2);
  if (beta == 0.0f) {
    for (int p = 0; p < g.batch; p++)
      for (int i = 0; i < g.m; i++)
        for (int j = 0; j < g.n; j++) c_fast[p * sc + (int64_t)i * ldc + j] = NAN;
  }
  auto c_ref = c_fast;
  cpu::gemm(ta, tb, g.m, g.n, g.k, alpha, a.data(), lda, b.data(), ldb, beta, c_fast.data(),
            ldc, g.batch, sa, sb, sc);
  ref::gemm(ta, tb, g.m, g.n, g.k, alpha, a.data(), lda, b.data(), ldb, beta, c_ref.data(),
            ldc, g.batch, sa, sb, sc);
  // The whole buffer, padding included: padding must come back untouched.
  EXPECT_TRUE(all_close("gemm C", c_fast, c_ref, fp32_rtol(g.k + 1)))
      << "m=" << g.m << " n=" << g.n << " k=" << g.k << " batch=" << g.batch << " ta=" << ta
      << " tb=" << tb << " alpha=" << alpha << " beta=" << beta;
}

}  // namespace

TEST(Gemm, MatchesRefAllTransposes) {
  const GemmCase cases[] = {{1, 1, 1, 1},   {3, 17, 33, 1},  {17, 3, 1, 2},  {33, 33, 17, 3},
                            {1, 33, 64, 4}, {64, 65, 70, 2}, {130, 70, 96, 2}};
  uint32_t seed = 1;
  for (const auto& g : cases)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (float beta : {0.0f, 1.0f, -0.6f}) check_gemm(g, ta, tb, 0.7f, beta, seed++);
}

TEST(Gemm, ZeroKScalesC) {
  std::vector<float> c_fast = {1, 2, 3, 4, 5, 6}, c_ref = c_fast;
  cpu::gemm(false, false, 2, 3, 0, 1.0f, (const float*)nullptr, 1, (const float*)nullptr, 3, 0.5f, c_fast.data(), 3);
  ref::gemm(false, false, 2, 3, 0, 1.0f, (const float*)nullptr, 1, (const float*)nullptr, 3, 0.5f, c_ref.data(), 3);
  EXPECT_EQ(c_fast, c_ref);
  EXPECT_EQ(c_fast[5], 3.0f);
}

class Matmul : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Matmul, ForwardMatchesRef) {
  const auto [N, C, OC] = GetParam();
  const auto inp = random_floats((size_t)N * C, 10);
  const auto w = random_floats((size_t)OC * C, 11);
  const auto bias = random_floats(OC, 12);
  for (const float* bp : {bias.data(), (const float*)nullptr}) {
    std::vector<float> out_fast((size_t)N * OC, NAN), out_ref((size_t)N * OC);
    cpu::matmul_forward(out_fast.data(), inp.data(), w.data(), bp, N, C, OC);
    ref::matmul_forward(out_ref.data(), inp.data(), w.data(), bp, N, C, OC);
    EXPECT_TRUE(all_close("matmul out", out_fast, out_ref, fp32_rtol(C + 1))) << "bias " << (bp != nullptr);
  }
}

TEST_P(Matmul, BackwardMatchesRefAndAccumulates) {
  const auto [N, C, OC] = GetParam();
  const auto inp = random_floats((size_t)N * C, 20);
  const auto w = random_floats((size_t)OC * C, 21);
  const auto dout = random_floats((size_t)N * OC, 22);
  // Nonzero starting gradients: the kernels must add to them.
  const auto dinp0 = random_floats((size_t)N * C, 23);
  const auto dw0 = random_floats((size_t)OC * C, 24);
  const auto db0 = random_floats(OC, 25);
  auto dinp_f = dinp0, dw_f = dw0, db_f = db0;
  auto dinp_r = dinp0, dw_r = dw0, db_r = db0;
  cpu::matmul_backward(dinp_f.data(), dw_f.data(), db_f.data(), dout.data(), inp.data(),
                       w.data(), N, C, OC);
  ref::matmul_backward(dinp_r.data(), dw_r.data(), db_r.data(), dout.data(), inp.data(),
                       w.data(), N, C, OC);
  EXPECT_TRUE(all_close("matmul dinp", dinp_f, dinp_r, fp32_rtol(OC + 1)));
  EXPECT_TRUE(all_close("matmul dweight", dw_f, dw_r, fp32_rtol(N + 1)));
  EXPECT_TRUE(all_close("matmul dbias", db_f, db_r, fp32_rtol(N + 1)));
  // From zero, plus the starting values, gives the same (accumulation, not overwrite).
  std::vector<float> dinp_z((size_t)N * C, 0.0f), dw_z((size_t)OC * C, 0.0f), db_z(OC, 0.0f);
  cpu::matmul_backward(dinp_z.data(), dw_z.data(), db_z.data(), dout.data(), inp.data(),
                       w.data(), N, C, OC);
  for (size_t i = 0; i < dinp_z.size(); i++) dinp_z[i] += dinp0[i];
  for (size_t i = 0; i < dw_z.size(); i++) dw_z[i] += dw0[i];
  for (size_t i = 0; i < db_z.size(); i++) db_z[i] += db0[i];
  EXPECT_TRUE(all_close("matmul dinp accumulates", dinp_f, dinp_z, fp32_rtol(OC + 1)));
  EXPECT_TRUE(all_close("matmul dweight accumulates", dw_f, dw_z, fp32_rtol(N + 1)));
  EXPECT_TRUE(all_close("matmul dbias accumulates", db_f, db_z, fp32_rtol(N + 1)));
}

TEST_P(Matmul, BackwardNullGradients) {
  const auto [N, C, OC] = GetParam();
  const auto inp = random_floats((size_t)N * C, 30);
  const auto w = random_floats((size_t)OC * C, 31);
  const auto dout = random_floats((size_t)N * OC, 32);
  for (int mask = 0; mask < 8; mask++) {
    std::vector<float> dinp_f((size_t)N * C, 0.5f), dw_f((size_t)OC * C, 0.5f), db_f(OC, 0.5f);
    auto dinp_r = dinp_f, dw_r = dw_f, db_r = db_f;
    cpu::matmul_backward(mask & 1 ? dinp_f.data() : nullptr, mask & 2 ? dw_f.data() : nullptr,
                         mask & 4 ? db_f.data() : nullptr, dout.data(), inp.data(), w.data(), N,
                         C, OC);
    ref::matmul_backward(mask & 1 ? dinp_r.data() : nullptr, mask & 2 ? dw_r.data() : nullptr,
                         mask & 4 ? db_r.data() : nullptr, dout.data(), inp.data(), w.data(), N,
                         C, OC);
    EXPECT_TRUE(all_close("matmul dinp (null mask)", dinp_f, dinp_r, fp32_rtol(OC + 1))) << mask;
    EXPECT_TRUE(all_close("matmul dweight (null mask)", dw_f, dw_r, fp32_rtol(N + 1))) << mask;
    EXPECT_TRUE(all_close("matmul dbias (null mask)", db_f, db_r, fp32_rtol(N + 1))) << mask;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Matmul,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(3, 17, 33),
                                           std::make_tuple(17, 3, 1), std::make_tuple(33, 64, 17),
                                           std::make_tuple(64, 33, 96),
                                           std::make_tuple(257, 96, 130)));

class Bias : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Bias, AddMatchesRefInPlace) {
  const auto [N, C] = GetParam();
  const auto inp = random_floats((size_t)N * C, 40);
  const auto bias = random_floats(C, 41);
  std::vector<float> out_ref((size_t)N * C);
  ref::bias_add(out_ref.data(), inp.data(), bias.data(), N, C);
  std::vector<float> out_fast((size_t)N * C);
  cpu::bias_add(out_fast.data(), inp.data(), bias.data(), N, C);
  EXPECT_TRUE(all_close("bias_add", out_fast, out_ref, fp32_rtol(1)));
  auto inplace = inp;  // out aliases inp
  cpu::bias_add(inplace.data(), inplace.data(), bias.data(), N, C);
  EXPECT_TRUE(all_close("bias_add in place", inplace, out_ref, fp32_rtol(1)));
}

TEST_P(Bias, BackwardMatchesRefAndAccumulates) {
  const auto [N, C] = GetParam();
  const auto dout = random_floats((size_t)N * C, 42);
  const auto db0 = random_floats(C, 43);
  auto db_f = db0, db_r = db0;
  cpu::bias_backward(db_f.data(), dout.data(), N, C);
  ref::bias_backward(db_r.data(), dout.data(), N, C);
  EXPECT_TRUE(all_close("bias_backward", db_f, db_r, fp32_rtol(N + 1)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bias,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(3, 17),
                                           std::make_tuple(33, 3), std::make_tuple(17, 33),
                                           std::make_tuple(300, 130), std::make_tuple(1024, 768)));
