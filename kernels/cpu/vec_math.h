// Internal to kernels/cpu: an exp() that the compiler can vectorise. Without -ffast-math
// and libmvec, std::exp in a loop stays a scalar libm call per element; this one inlines
// into `#pragma omp simd` loops (Cephes expf: range reduction by ln 2, a degree-6
// polynomial, then the exponent bits), within 2 ulp of expf over its whole range.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpumix::kernels::cpu {

#pragma omp declare simd notinbranch
inline float exp_vec(float x) {
  // Outside [-87.3, 88.7] the result is below FLT_MIN or above FLT_MAX: flush to 0 / inf
  // (-inf gives 0, as the masked scores of attention need). NaN propagates.
  const float lo = -87.33654f, hi = 88.72283f;
  const bool under = x < lo, over = x > hi;
  x = under ? lo : (over ? hi : x);
  // x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two so that n * ln2 is exact enough.
  const float t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: round to nearest
  const float n = t - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n through the exponent bits. n is in [-126, 128] after the clamp and 2^128 is not a
  // float, so positive n go in as 2^(n-1) * 2 (p < 2 keeps the product finite).
  const int32_t ni = n == n ? (int32_t)n : 0;  // NaN x: no int cast (UB); p is NaN anyway
  const int32_t k = ni > 0 ? 1 : 0;
  const int32_t bits = (ni - k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float y = p * scale * (k ? 2.0f : 1.0f);
  return under ? 0.0f : (over ? __builtin_inff() : y);
}

}  // namespace gpumix::kernels::cpu
