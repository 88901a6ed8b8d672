// The tensor-core primitives (kernels/cuda/tensor_core.cuh) against plain products and copies
// on random data, on a GPU or the emulated device (tests/cuda/tensor_core_kernels.cu); and a
// GEMM whose fragment mapping is off by one lane or row, which the comparison must catch.
// The emulator's refusals (wrong mask, divergent warp, misaligned or non-shared address, a read
// before cp.async's wait) are tests/cuda_emulator/test_tensor_core.cpp.
//
// Tolerance of an fp32 accumulation of K bf16 products (exact in fp32) and c: each addition
// rounds, or truncates on tensor cores, by at most 2^-23 relative, so
//   |got - ref| <= (K + 1) 2^-23 (|c| + sum_k |a_k b_k|)     (ref in double).
#include <cstring>
#include <random>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/tensor_core_kernels.h"

namespace gpumix::test {
namespace {

// The bits of n bf16-rounded normal values.
std::vector<uint16_t> randn_bits(size_t n, uint32_t seed) {
  const std::vector<float> v = randn(n, seed);
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16_bits(v[i]);
  return b;
}
template <typename T>
void to_device(DevBuf<T>& d, const std::vector<T>& h) {
  CUDA_CHECK(cudaMemcpy(d.p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice));
}
template <typename T>
std::vector<T> to_host(const DevBuf<T>& d) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(d.n);
  CUDA_CHECK(cudaMemcpy(h.data(), d.p, sizeof(T) * d.n, cudaMemcpyDeviceToHost));
  return h;
}
float f(uint16_t b) { return bf16_bits_to_f32(b); }

// How a product compares with the plain one: elements over the tolerance above, and the worst.
struct ProductCheck {
  size_t bad = 0, worst = 0;
  double worst_over = 0.0;  // |diff| / allowed of the worst element
  std::string report(const std::vector<float>& got, const std::vector<double>& ref) const {
    return std::to_string(bad) + " of " + std::to_string(got.size()) +
           " elements over the fp32 tolerance; worst [" + std::to_string(worst) + "] got " +
           std::to_string(got[worst]) + " ref " + std::to_string(ref[worst]) + ", " +
           std::to_string(worst_over) + "x its allowance";
  }
};
// ref[i] = c + sum of products, mag[i] = |c| + sum of |products|, over K products each.
ProductCheck check_product(const std::vector<float>& got, const std::vector<double>& ref,
                           const std::vector<double>& mag, int K) {
  ProductCheck r;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allow = (K + 1) * std::ldexp(1.0, -23) * mag[i];
    const double over = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - ref[i]) / allow;
    if (over > 1.0) ++r.bad;
    if (over > r.worst_over || std::isnan(got[i])) {
      r.worst_over = over;
      r.worst = i;
    }
  }
  return r;
}

TEST_F(CudaTest, MmaM16n8k16MatchesPlainProduct) {
  const std::vector<uint16_t> a = randn_bits(16 * 16, 1), b = randn_bits(16 * 8, 2);
  const std::vector<float> c = randn(16 * 8, 3);
  DevBuf<uint16_t> da(a.size()), db(b.size());
  DevBuf<float> dc(c.size()), dd(c.size());
  to_device(da, a);
  to_device(db, b);
  to_device(dc, c);
  dd.poison();
  tc::mma_tile(dd.p, da.p, db.p, dc.p);
  const std::vector<float> got = to_host(dd);
  std::vector<double> ref(16 * 8), mag(16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = c[i * 8 + j], m = std::fabs(c[i * 8 + j]);
      for (int k = 0; k < 16; ++k) {
        s += (double)f(a[i * 16 + k]) * f(b[k * 8 + j]);
        m += std::fabs((double)f(a[i * 16 + k]) * f(b[k * 8 + j]));
      }
      ref[i * 8 + j] = s;
      mag[i * 8 + j] = m;
    }
  const ProductCheck r = check_product(got, ref, mag, 16);
  EXPECT_EQ(r.bad, 0u) << r.report(got, ref);
}

// Every element of every matrix lands in the register and half the PTX ISA names
// (9.7.14.5.15): lane l, register m = matrix m's row l/4, columns 2(l%4) and +1 (low, high);
// transposed: rows 2(l%4) and +1 of column l/4.
TEST_F(CudaTest, LdmatrixPlacesEveryElement) {
  for (int num : {1, 2, 4})
    for (bool trans : {false, true}) {
      std::vector<uint16_t> src(num * 64);
      for (size_t i = 0; i < src.size(); ++i) src[i] = (uint16_t)(0x100 + i);  // all distinct
      DevBuf<uint16_t> ds(src.size());
      DevBuf<uint32_t> dout(32 * num);
      to_device(ds, src);
      dout.poison();
      tc::ldmatrix_registers(dout.p, ds.p, num, trans);
      const std::vector<uint32_t> got = to_host(dout);
      for (int l = 0; l < 32; ++l)
        for (int m = 0; m < num; ++m) {
          auto at = [&](int row, int col) { return (uint32_t)src[m * 64 + row * 8 + col]; };
          const int g = l / 4, t = l % 4;
          const uint32_t want = trans ? at(2 * t, g) | at(2 * t + 1, g) << 16
                                      : at(g, 2 * t) | at(g, 2 * t + 1) << 16;
          ASSERT_EQ(got[l * num + m], want) << ".x" << num << (trans ? ".trans" : "") << " lane "
                                            << l << " register " << m;
        }
    }
}

// A (M, K) B with B as (N, K) or (K, N), from the tensor-core GEMM and in double.
struct Gemm {
  int M = 64, N = 64, K = 64;
  std::vector<uint16_t> a, b;
  std::vector<double> ref, mag;
  explicit Gemm(bool b_nk) {
    a = randn_bits((size_t)M * K, 11);
    b = randn_bits((size_t)K * N, 12);
    ref.assign((size_t)M * N, 0.0);
    mag.assign((size_t)M * N, 0.0);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        for (int k = 0; k < K; ++k) {
          const double p = (double)f(a[(size_t)i * K + k]) *
                           f(b_nk ? b[(size_t)j * K + k] : b[(size_t)k * N + j]);
          ref[(size_t)i * N + j] += p;
          mag[(size_t)i * N + j] += std::fabs(p);
        }
  }
  std::vector<float> run(bool b_nk, tc::FragmentBug bug) const {
    DevBuf<uint16_t> da(a.size()), db(b.size());
    DevBuf<float> dc((size_t)M * N);
    to_device(da, a);
    to_device(db, b);
    dc.poison();
    tc::gemm(dc.p, da.p, db.p, M, N, K, b_nk, bug);
    return to_host(dc);
  }
};

TEST_F(CudaTest, GemmFromLdmatrixCpAsyncAndMmaMatchesPlainProduct) {
  for (bool b_nk : {true, false}) {
    const Gemm g(b_nk);
    const std::vector<float> got = g.run(b_nk, tc::FragmentBug::none);
    const ProductCheck r = check_product(got, g.ref, g.mag, g.K);
    EXPECT_EQ(r.bad, 0u) << (b_nk ? "B as (N, K), ldmatrix: " : "B as (K, N), ldmatrix.trans: ")
                         << r.report(got, g.ref);
  }
}

// The seeded fragment bug: lane l loads the row of lane l + 1 (A), or B's rows are off by one.
// The comparison must fail, by far: most elements over their allowance.
TEST_F(CudaTest, GemmWithAFragmentMappingOffByOneFailsTheComparison) {
  for (bool b_nk : {true, false})
    for (tc::FragmentBug bug : {tc::FragmentBug::a_lane_off_by_one, tc::FragmentBug::b_row_off_by_one}) {
      const Gemm g(b_nk);
      const std::vector<float> got = g.run(b_nk, bug);
      const ProductCheck r = check_product(got, g.ref, g.mag, g.K);
      const std::string what = std::string(b_nk ? "B (N, K)" : "B (K, N)") +
                               (bug == tc::FragmentBug::a_lane_off_by_one ? ", A's lane + 1"
                                                                          : ", B's row + 1");
      EXPECT_GT(r.bad, got.size() / 2) << what << ": the wrong mapping passed: " << r.report(got, g.ref);
      EXPECT_GT(r.worst_over, 1000.0) << what << ": " << r.report(got, g.ref);
      std::printf("seeded bug (%s) caught: %s\n", what.c_str(), r.report(got, g.ref).c_str());
    }
}

TEST_F(CudaTest, CpAsyncGroupsCompleteInOrderAndZeroFill) {
  const std::vector<uint16_t> src = randn_bits(3 * 64 * 8, 21);
  DevBuf<uint16_t> ds(src.size()), dout(64 * 3 * 8);
  to_device(ds, src);
  dout.poison();
  tc::cp_async_groups(dout.p, ds.p);
  const std::vector<uint16_t> got = to_host(dout);
  for (int t = 0; t < 64; ++t)
    for (int g = 0; g < 3; ++g)
      for (int e = 0; e < 8; ++e) {
        // group 2 read 8 of its 16 source bytes: elements 4..7 are zero-filled
        const uint16_t want = g == 2 && e >= 4 ? 0 : src[(g * 64 + t) * 8 + e];
        ASSERT_EQ(got[(t * 3 + g) * 8 + e], want) << "thread " << t << " group " << g << " element " << e;
      }
}

TEST_F(CudaTest, WarpShuffleBallotAndSyncwarp) {
  std::mt19937 gen(31);
  std::vector<int> in(64);
  for (int& x : in) x = (int)(gen() % 201) - 100;
  DevBuf<int> din(64), dout(64 * 7);
  to_device(din, in);
  dout.poison();
  tc::warp_intrinsics(dout.p, din.p);
  const std::vector<int> got = to_host(dout);
  for (int w = 0; w < 2; ++w) {
    const int* v = in.data() + 32 * w;
    // __shfl_down_sync tree: a source past the segment's end gives the lane's own value.
    std::vector<int> sum(v, v + 32), half(v, v + 16);
    for (int o = 16; o > 0; o >>= 1) {
      std::vector<int> next(sum);
      for (int l = 0; l < 32; ++l) next[l] += l + o < 32 ? sum[l + o] : sum[l];
      sum = next;
    }
    for (int o = 8; o > 0; o >>= 1) {
      std::vector<int> next(half);
      for (int l = 0; l < 16; ++l) next[l] += l + o < 16 ? half[l + o] : half[l];
      half = next;
    }
    unsigned vote = 0;
    for (int l = 0; l < 32; ++l) vote |= (v[l] > 0 ? 1u : 0u) << l;
    for (int l = 0; l < 32; ++l) {
      const int* o = got.data() + (32 * w + l) * 7;
      const std::string at = "warp " + std::to_string(w) + " lane " + std::to_string(l);
      EXPECT_EQ(o[0], v[5]) << at << " __shfl_sync from lane 5";
      EXPECT_EQ(o[1], v[(l & ~7) + 3]) << at << " __shfl_sync width 8";
      EXPECT_EQ(o[2], sum[l]) << at << " __shfl_down_sync";
      EXPECT_EQ((unsigned)o[3], vote) << at << " __ballot_sync";
      EXPECT_EQ((unsigned)o[4], l < 16 ? vote & 0xffffu : 0u) << at << " __ballot_sync(0xffff)";
      EXPECT_EQ(o[5], l < 16 ? half[l] : 0) << at << " __shfl_down_sync(0xffff, width 16)";
      EXPECT_EQ(o[6], v[31 - l]) << at << " shared memory after __syncwarp";
    }
  }
}

}  // namespace
}  // namespace gpumix::test
