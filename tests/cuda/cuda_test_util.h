// Helpers of the CUDA kernel tests: device buffers, 16-bit-rounded random inputs, and the
// tolerance check that prints the worst element.
//
// Tolerances are a formula of the output's dtype (docs/design.md, "Numbers and precision"), never tuned:
//   |got - ref| <= atol + rtol * |ref|
// - bf16 outputs: rtol = 2^-7 (two roundings of a bf16 result, unit roundoff 2^-9 each,
//   with room for the fp32 rounding differences before them), atol = rtol * rms(ref) / 16
//   for elements that come out of cancellation near zero.
// - fp32 outputs of a K-term reduction: rtol = 2^-16, atol = K * 2^-22 * rms(ref)
//   (fp32 sums of K terms in another order; the CPU reference sums in double).
// Inputs are rounded to bf16 before either side sees them, so both compute on the same
// numbers. Outputs are poisoned with NaN (all bits set) before each call; a NaN left in an
// output fails the check.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"

namespace gpumix::test {

namespace cu = gpumix::kernels::cuda;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cu::cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc((void**)&p, sizeof(T) * (n ? n : 1)));
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, sizeof(T) * n)); }  // NaN in bf16, f16 and fp32
};

inline float round_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
inline float round_f16(float x) { return f16_bits_to_f32(f32_to_f16_bits(x)); }

// Normal(0, stddev) values rounded to bf16.
inline std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(dist(gen));
  return v;
}

// 16-bit buffers (H = bf16 or f16) take and give fp32 values, rounded to nearest even on
// the way in (kernels/half_types.h).
template <class H>
inline void upload_16bit(DevBuf<H>& d, const std::vector<float>& h) {
  std::vector<H> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = H(h[i]);
  CUDA_CHECK(cudaMemcpy(d.p, v.data(), 2 * h.size(), cudaMemcpyHostToDevice));
}
template <class H>
inline std::vector<float> download_16bit(const DevBuf<H>& d) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<H> v(d.n);
  CUDA_CHECK(cudaMemcpy(v.data(), d.p, 2 * d.n, cudaMemcpyDeviceToHost));
  std::vector<float> h(d.n);
  for (size_t i = 0; i < d.n; ++i) h[i] = (float)v[i];
  return h;
}
inline void upload(DevBuf<bf16>& d, const std::vector<float>& h) { upload_16bit(d, h); }
inline void upload(DevBuf<f16>& d, const std::vector<float>& h) { upload_16bit(d, h); }
inline void upload(DevBuf<float>& d, const std::vector<float>& h) {
  CUDA_CHECK(cudaMemcpy(d.p, h.data(), 4 * h.size(), cudaMemcpyHostToDevice));
}
inline void upload(DevBuf<int32_t>& d, const std::vector<int32_t>& h) {
  CUDA_CHECK(cudaMemcpy(d.p, h.data(), 4 * h.size(), cudaMemcpyHostToDevice));
}
inline std::vector<float> download(const DevBuf<bf16>& d) { return download_16bit(d); }
inline std::vector<float> download(const DevBuf<f16>& d) { return download_16bit(d); }
inline std::vector<float> download(const DevBuf<float>& d) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> h(d.n);
  CUDA_CHECK(cudaMemcpy(h.data(), d.p, 4 * d.n, cudaMemcpyDeviceToHost));
  return h;
}

struct Tol {
  double atol, rtol;
};

inline double rms(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += (double)x * x;
  return v.empty() ? 0.0 : std::sqrt(s / v.size());
}

inline Tol tol_bf16(const std::vector<float>& ref) {
  const double rtol = std::ldexp(1.0, -7);
  return Tol{rtol * rms(ref) / 16.0 + 1e-30, rtol};
}
// f16 outputs: the same formula with f16's unit roundoff 2^-11 (two roundings, room for the
// fp32 differences before them: rtol = 4 * 2^-11 = 2^-9), for values inside f16's normal
// range; inputs rounded to f16 on both sides.
inline Tol tol_f16(const std::vector<float>& ref) {
  const double rtol = std::ldexp(1.0, -9);
  return Tol{rtol * rms(ref) / 16.0 + 1e-30, rtol};
}
// A log-sum-exp in fp32 (cross-entropy, attention): the sum of exps is accumulated
// sequentially over at most ~V/512 or T terms per thread, then by a tree, each term within a
// few ulps (__expf, exp2f): relative error of the sum below ~2^-17 for our sizes, which is
// the absolute error of its log; 2^-13 leaves a margin of 16.
inline Tol tol_lse() { return Tol{std::ldexp(1.0, -13), std::ldexp(1.0, -16)}; }
inline Tol tol_f32(const std::vector<float>& ref, int64_t K) {
  return Tol{(double)K * std::ldexp(1.0, -22) * rms(ref) + 1e-30, std::ldexp(1.0, -16)};
}

// Every element within tolerance and not NaN; reports the worst one. `extra`, when given,
// adds a derived per-element allowance (an intermediate rounded to bf16, say).
inline ::testing::AssertionResult close(const char* what, const std::vector<float>& got,
                                        const std::vector<float>& ref, Tol tol,
                                        const std::vector<float>* extra = nullptr) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  double worst = -1e300;
  size_t wi = 0, bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allow =
        tol.atol + tol.rtol * std::fabs((double)ref[i]) + (extra ? (double)(*extra)[i] : 0.0);
    const double diff = std::fabs((double)got[i] - (double)ref[i]);
    const double over = std::isnan(got[i]) || std::isnan(ref[i]) ? INFINITY : diff - allow;
    if (over > 0) ++bad;
    if (over > worst) {
      worst = over;
      wi = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const double allow =
      tol.atol + tol.rtol * std::fabs((double)ref[wi]) + (extra ? (double)(*extra)[wi] : 0.0);
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements out of tolerance; worst ["
         << wi << "] got " << got[wi] << " ref " << ref[wi] << " |diff| "
         << std::fabs((double)got[wi] - ref[wi]) << " allowed " << allow << " (atol "
         << tol.atol << ", rtol " << tol.rtol << ")";
}

// ref values as the CUDA side stores them: rounded to bf16.
inline std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = round_bf16(x);
  return v;
}

// The reference dqkv (rdqkv, from the exact D_i) as the flash backward computes it, from D'_i.
// The flash backward takes D_i = dout_i . out_i from the 16-bit out it is handed (out_stored:
// rout rounded to bf16 or f16; as the CPU bf16 kernel and FlashAttention do); the reference
// uses the exact D_i = sum_j P_ij dP_ij.
// |D_i| reaches ~sqrt(HS), so out's rounding (2^-9 relative) moves D_i by up to ~2e-2 and
// every score gradient dS_ij = P_ij (dP_ij - D_i) with it: far beyond a bf16 tolerance on
// dq and dk (found by the emulated device; a GPU would have failed the same way). The
// flash check therefore adds, in double, the exact effect of that D_i to the reference:
// dq_i += scale sum_j P_ij (D_i - D'_i) k_j, dk_j += scale sum_i P_ij (D_i - D'_i) q_i.
inline std::vector<float> flash_backward_reference(const std::vector<float>& rdqkv, const std::vector<float>& qkv,
                                                   const std::vector<float>& dout, const std::vector<float>& rout,
                                                   const std::vector<float>& out_stored,
                                                   const std::vector<float>& rlse, int B, int T, int C, int NH) {
  const int HS = C / NH;
  std::vector<float> rdqkv_flash = rdqkv;
  const double scale = 1.0 / std::sqrt((double)HS);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const size_t oi = ((size_t)b * T + i) * C + h * HS;
        const size_t qi = ((size_t)b * T + i) * 3 * C + h * HS;
        double dd = 0.0;  // D_i - D'_i
        for (int d = 0; d < HS; ++d) dd += (double)dout[oi + d] * (rout[oi + d] - out_stored[oi + d]);
        const double l = rlse[((size_t)b * NH + h) * T + i];
        for (int j = 0; j <= i; ++j) {
          const size_t kj = ((size_t)b * T + j) * 3 * C + C + h * HS;
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += (double)qkv[qi + d] * qkv[kj + d];
          const double ds = std::exp(s * scale - l) * dd * scale;
          for (int d = 0; d < HS; ++d) {
            rdqkv_flash[qi + d] += (float)(ds * qkv[kj + d]);
            rdqkv_flash[kj + d] += (float)(ds * qkv[qi + d]);
          }
        }
      }
  return rdqkv_flash;
}

}  // namespace gpumix::test
