// bf16 GEMM, linear layer and bias kernels: the fast kernels (every instruction-set path)
// against the fp32 reference twin on the widened inputs. The oneDNN GEMMs take bf16
// operands exactly and accumulate in fp32, so a result in fp32 is held to fp32's
// tolerance over k terms and a bf16 result to that plus its one final rounding.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ref.h"

using gpumix::bf16;

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using namespace gpumix::kernels::test;

namespace {

struct GemmCase {
  int m, n, k, batch;
};

std::vector<float> widen(const std::vector<float>& x) { return x; }
std::vector<float> widen(const std::vector<bf16>& h) { return to_f32(h); }

template <class Out>
std::vector<Out> random_out(size_t n, uint32_t seed);
template <>
std::vector<float> random_out<float>(size_t n, uint32_t seed) { return random_floats(n, seed); }
template <>
std::vector<bf16> random_out<bf16>(size_t n, uint32_t seed) { return random_bf16(n, seed); }
template <class Out>
Out poison();
template <>
float poison<float>() { return NAN; }
template <>
bf16 poison<bf16>() { return k_bf16_nan; }

template <class Out>
double out_rtol(int64_t k) {
  return sizeof(Out) == 2 ? bf16_out_rtol(k) : fp32_rtol(k);
}

// Every transpose combination, padded leading dimensions, batch strides with a gap (or 0:
// one matrix for all), alpha and beta != 1, and beta == 0 with NaN in C (C is not read).
template <class Out>
void check_gemm(const GemmCase& g, bool ta, bool tb, float alpha, float beta, bool share_b,
                uint32_t seed) {
  const int pad = 3;
  const int a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = g.n + pad;
  const int64_t sa = (int64_t)a_rows * lda + 5, sb = share_b ? 0 : (int64_t)b_rows * ldb + 7,
                sc = (int64_t)g.m * ldc + 11;
  const auto a = random_bf16(sa * g.batch, seed);
  const auto b = random_bf16(std::max<int64_t>(sb, (int64_t)b_rows * ldb) * g.batch, seed + 1);
  auto c = random_out<Out>(sc * g.batch, seed + 2);
  if (beta == 0.0f)
    for (int p = 0; p < g.batch; p++)
      for (int i = 0; i < g.m; i++)
        for (int j = 0; j < g.n; j++) c[p * sc + (int64_t)i * ldc + j] = poison<Out>();
  auto c_ref = widen(c);
  cpu::gemm(ta, tb, g.m, g.n, g.k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc,
            g.batch, sa, sb, sc);
  ref::gemm(ta, tb, g.m, g.n, g.k, alpha, to_f32(a).data(), lda, to_f32(b).data(), ldb, beta,
            c_ref.data(), ldc, g.batch, sa, sb, sc);
  // The whole buffer, padding included: padding must come back untouched.
  EXPECT_TRUE(all_close("bf16 gemm C", widen(c), c_ref, out_rtol<Out>(g.k + 1)))
      << "C " << (sizeof(Out) == 2 ? "bf16" : "fp32") << " m=" << g.m << " n=" << g.n
      << " k=" << g.k << " batch=" << g.batch << " ta=" << ta << " tb=" << tb
      << " alpha=" << alpha << " beta=" << beta << " stride_b=" << sb;
}

const GemmCase k_cases[] = {{1, 1, 1, 1},   {3, 17, 33, 1},  {17, 3, 1, 2},  {33, 33, 17, 3},
                            {1, 33, 64, 4}, {64, 65, 70, 2}, {130, 70, 96, 2}};

}  // namespace

// The GEMMs are oneDNN's whatever cpu_isa() says (it dispatches on its own), so they run
// once, not per path; the "kernels_no_bf16_isa" test run caps oneDNN's ISA instead.
TEST(GemmBf16, MatchesRefAllTransposesBothResultTypes) {
  uint32_t seed = 1;
  for (const auto& g : k_cases)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (float beta : {0.0f, 1.0f, -0.6f}) {
          check_gemm<bf16>(g, ta, tb, 0.7f, beta, false, seed++);
          check_gemm<float>(g, ta, tb, beta == 1.0f ? 1.0f : 0.7f, beta, false, seed++);
        }
}

// More rows of a transposed A than one block: the product runs block by block
// (kGemmTransARowBlock), the last one short, each on its own rows of C and columns of A.
TEST(GemmBf16, ATransposedOfManyRowsRunsInRowBlocks) {
  const GemmCase g{2 * cpu::kGemmTransARowBlock + 5, 3, 4, 1};
  uint32_t seed = 500;
  for (int tb = 0; tb < 2; tb++)
    for (float beta : {0.0f, 1.0f}) {
      check_gemm<bf16>(g, true, tb, 0.7f, beta, false, seed++);
      check_gemm<float>(g, true, tb, 1.0f, beta, false, seed++);
    }
}

TEST(GemmBf16, SharedOperandAcrossTheBatch) {
  // stride_b == 0: one B for every batch matrix (oneDNN broadcasts it).
  check_gemm<bf16>({33, 20, 17, 3}, false, true, 1.0f, 0.0f, true, 7);
  check_gemm<float>({33, 20, 17, 3}, true, false, 0.5f, 1.0f, true, 8);
}

TEST(GemmBf16, SameCForEveryBatchMatrixAccumulatesInOrder) {
  // stride_c == 0 with beta 1: C += A_p B_p for p = 0, 1, 2, as the reference loop does.
  const int m = 5, n = 6, k = 7, batch = 3;
  const auto a = random_bf16((size_t)m * k * batch, 1), b = random_bf16((size_t)k * n * batch, 2);
  auto c = random_floats((size_t)m * n, 3);
  auto c_ref = c;
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f, c.data(), n, batch,
            (int64_t)m * k, (int64_t)k * n, 0);
  ref::gemm(false, false, m, n, k, 1.0f, to_f32(a).data(), k, to_f32(b).data(), n, 1.0f,
            c_ref.data(), n, batch, (int64_t)m * k, (int64_t)k * n, 0);
  EXPECT_TRUE(all_close("gemm stride_c 0", c, c_ref, fp32_rtol(batch * k + 1)));
}

TEST(GemmBf16, EdgeCasesFollowTheContract) {
  // k == 0: C = beta * C (beta 0 writes zeros over NaN); m or n == 0: nothing is touched.
  std::vector<bf16> c = to_bf16({1, 2, 3, 4, 5, 6});
  cpu::gemm(false, false, 2, 3, 0, 1.0f, (const bf16*)nullptr, 1, nullptr, 3, 0.5f, c.data(), 3);
  EXPECT_EQ(to_f32(c), (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  std::vector<float> cf(6, NAN);
  cpu::gemm(false, false, 2, 3, 0, 1.0f, (const bf16*)nullptr, 1, nullptr, 3, 0.0f, cf.data(), 3);
  EXPECT_EQ(cf, std::vector<float>(6, 0.0f));
  std::vector<bf16> untouched(6, k_bf16_nan);
  cpu::gemm(false, false, 0, 3, 4, 1.0f, (const bf16*)nullptr, 4, nullptr, 3, 1.0f, untouched.data(), 3);
  cpu::gemm(false, false, 2, 0, 4, 1.0f, (const bf16*)nullptr, 4, nullptr, 3, 1.0f, untouched.data(), 3);
  EXPECT_EQ(untouched, std::vector<bf16>(6, k_bf16_nan));
}

TEST(GemmBf16, BadLeadingDimensionIsAClearError) {
  const auto a = random_bf16(64, 1), b = random_bf16(64, 2);
  std::vector<bf16> c(64);
  try {
    cpu::gemm(false, false, 4, 4, 8, 1.0f, a.data(), 5, b.data(), 4, 0.0f, c.data(), 4);
    FAIL() << "lda 5 < k 8 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lda = 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(">= 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu::gemm(false, true, 4, 4, 8, 1.0f, a.data(), 8, b.data(), 7, 0.0f, c.data(), 4),
               std::invalid_argument);
  EXPECT_THROW(cpu::gemm(false, false, 4, 6, 8, 1.0f, a.data(), 8, b.data(), 6, 0.0f, c.data(), 5),
               std::invalid_argument);
}

TEST(GemmBf16, PrimitivesAreCachedAndTheBf16PathIsNamed) {
  const auto a = random_bf16(48 * 40, 1), b = random_bf16(40 * 24, 2);
  std::vector<bf16> c(48 * 24);
  cpu::gemm(false, false, 48, 24, 40, 1.0f, a.data(), 40, b.data(), 24, 0.0f, c.data(), 24);
  const int64_t cached = cpu::gemm_cached_primitives();
  for (int i = 0; i < 3; i++)
    cpu::gemm(false, false, 48, 24, 40, 1.0f, a.data(), 40, b.data(), 24, 0.0f, c.data(), 24);
  EXPECT_EQ(cpu::gemm_cached_primitives(), cached);  // the same shape: no new primitive
  const std::string impl = cpu::gemm_impl_info(cpu::GemmKind::bf16_to_bf16);
  EXPECT_FALSE(impl.empty());
  // Where the CPU has bf16 dot products, oneDNN must find its bf16 kernels, not a
  // reference loop (unless DNNL_MAX_CPU_ISA caps it, as the fallback test run does).
  if (cpu::isa_supported(cpu::Isa::avx512_bf16) && !std::getenv("DNNL_MAX_CPU_ISA")) {
    EXPECT_NE(impl.find("bf16"), std::string::npos) << impl;
  }
  std::printf("oneDNN bf16->bf16 matmul: %s\n", impl.c_str());
}

TEST(Gemm, ConcurrentThreadsShareCachedPrimitivesSafely) {
  // Ranks run as threads of one process, each with its own OpenMP team, and meet the same
  // shapes: they run one cached primitive at once. Each must get its own product (a
  // primitive's shared scratchpad once garbled them).
  const int n_threads = 3, iters = 40;
  std::vector<double> worst(n_threads, 0.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; t++)
    threads.emplace_back([&, t] {
      omp_set_num_threads(1);
      for (int it = 0; it < iters; it++) {
        const int m = 8 + (it % 5) * 7, n = 16 + (it % 3) * 5, k = 32 + (it % 4) * 3;
        const auto a = random_floats((size_t)m * k, 1000 * t + it), b = random_floats((size_t)n * k, 7 + it);
        const auto ah = random_bf16((size_t)m * k, 2000 * t + it), bh = random_bf16((size_t)n * k, 9 + it);
        std::vector<float> c((size_t)m * n), c_ref(c.size()), ch(c.size()), ch_ref(c.size());
        cpu::gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
        ref::gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c_ref.data(), n);
        cpu::gemm(false, true, m, n, k, 1.0f, ah.data(), k, bh.data(), k, 0.0f, ch.data(), n);
        ref::gemm(false, true, m, n, k, 1.0f, to_f32(ah).data(), k, to_f32(bh).data(), k, 0.0f,
                  ch_ref.data(), n);
        for (size_t i = 0; i < c.size(); i++)
          worst[t] = std::max({worst[t], (double)std::fabs(c[i] - c_ref[i]), (double)std::fabs(ch[i] - ch_ref[i])});
      }
    });
  for (auto& th : threads) th.join();
  // |c| <= k <= 41 and the sums hold k terms: fp32_rtol(k) * k bounds their rounding.
  for (int t = 0; t < n_threads; t++) EXPECT_LE(worst[t], fp32_rtol(41) * 41) << "thread " << t;
}

class MatmulBf16 : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(MatmulBf16, ForwardMatchesRefEveryElementWritten) {
  const auto& params = GetParam();  // not a structured binding: clang 14 lambdas cannot capture one
  const int N = std::get<0>(params), C = std::get<1>(params), OC = std::get<2>(params);
  const auto inp = random_bf16((size_t)N * C, 10), w = random_bf16((size_t)OC * C, 11),
             bias = random_bf16(OC, 12);
  for_each_isa([&] {
    for (const bf16* bp : {bias.data(), (const bf16*)nullptr}) {
      std::vector<bf16> out((size_t)N * OC, k_bf16_nan);
      std::vector<float> out_ref((size_t)N * OC);
      cpu::matmul_forward(out.data(), inp.data(), w.data(), bp, N, C, OC);
      const auto b32 = to_f32(bias);
      ref::matmul_forward(out_ref.data(), to_f32(inp).data(), to_f32(w).data(), bp ? b32.data() : nullptr,
                          N, C, OC);
      EXPECT_TRUE(all_close("bf16 matmul out", out, out_ref, bf16_out_rtol(C + 1))) << "bias " << (bp != nullptr);
    }
  });
}

TEST_P(MatmulBf16, BackwardMatchesRefAndAccumulates) {
  const auto& params = GetParam();
  const int N = std::get<0>(params), C = std::get<1>(params), OC = std::get<2>(params);
  const auto inp = random_bf16((size_t)N * C, 20), w = random_bf16((size_t)OC * C, 21),
             dout = random_bf16((size_t)N * OC, 22);
  // Nonzero starting gradients: the kernels must add to them.
  const auto dinp0 = random_bf16((size_t)N * C, 23);
  const auto dw0 = random_floats((size_t)OC * C, 24), db0 = random_floats(OC, 25);
  for_each_isa([&] {
    for (int mask = 0; mask < 8; mask++) {
      auto dinp = dinp0;
      auto dw = dw0, db = db0;
      auto dinp_r = to_f32(dinp0);
      auto dw_r = dw0, db_r = db0;
      cpu::matmul_backward(mask & 1 ? dinp.data() : nullptr, mask & 2 ? dw.data() : nullptr,
                           mask & 4 ? db.data() : nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
      ref::matmul_backward(mask & 1 ? dinp_r.data() : nullptr, mask & 2 ? dw_r.data() : nullptr,
                           mask & 4 ? db_r.data() : nullptr, to_f32(dout).data(), to_f32(inp).data(),
                           to_f32(w).data(), N, C, OC);
      EXPECT_TRUE(all_close("bf16 matmul dinp", dinp, dinp_r, bf16_out_rtol(OC + 1))) << mask;
      EXPECT_TRUE(all_close("bf16 matmul dweight", dw, dw_r, fp32_rtol(N + 1))) << mask;
      EXPECT_TRUE(all_close("bf16 matmul dbias", db, db_r, fp32_rtol(N + 1))) << mask;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulBf16,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(3, 17, 33),
                                           std::make_tuple(17, 3, 1), std::make_tuple(33, 64, 17),
                                           std::make_tuple(64, 33, 96),
                                           std::make_tuple(257, 96, 130)));

class BiasBf16 : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(BiasBf16, AddIsTheRoundedSumInPlaceToo) {
  const auto& params = GetParam();
  const int N = std::get<0>(params), C = std::get<1>(params);
  const auto inp = random_bf16((size_t)N * C, 40), bias = random_bf16(C, 41);
  const auto x = to_f32(inp), b = to_f32(bias);
  std::vector<float> sum((size_t)N * C);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) sum[(size_t)i * C + c] = x[(size_t)i * C + c] + b[c];
  const auto expected = to_bf16(sum);  // exact: one fp32 add, one rounding
  for_each_isa([&] {
    std::vector<bf16> out((size_t)N * C, k_bf16_nan);
    cpu::bias_add(out.data(), inp.data(), bias.data(), N, C);
    EXPECT_EQ(out, expected);
    auto inplace = inp;
    cpu::bias_add(inplace.data(), inplace.data(), bias.data(), N, C);
    EXPECT_EQ(inplace, expected);
  });
}

TEST_P(BiasBf16, BackwardMatchesRefAndAccumulates) {
  const auto& params = GetParam();
  const int N = std::get<0>(params), C = std::get<1>(params);
  const auto dout = random_bf16((size_t)N * C, 42);
  const auto db0 = random_floats(C, 43);
  for_each_isa([&] {
    auto db = db0, db_r = db0;
    cpu::bias_backward(db.data(), dout.data(), N, C);
    ref::bias_backward(db_r.data(), to_f32(dout).data(), N, C);
    EXPECT_TRUE(all_close("bf16 bias_backward", db, db_r, fp32_rtol(N + 1)));
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, BiasBf16,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(3, 17),
                                           std::make_tuple(33, 3), std::make_tuple(17, 33),
                                           std::make_tuple(300, 130), std::make_tuple(1024, 768)));
