// Internal to kernels/cpu: an exp() that the compiler can vectorise. Without -ffast-math
// and libmvec, std::exp in a loop stays a scalar libm call per element; this one inlines
// into `#pragma omp simd` loops (Cephes expf: range reduction by ln 2, a degree-6
// polynomial, then the exponent bits), within 2 ulp of expf over its whole range.
//
// Then the same on 16 lanes in AVX-512 intrinsics (exp16), with 16-lane loads and stores of
// fp32 or bf16 storage, for the kernels whose AVX-512 path is written out by hand because
// the compiler's vectorisation of the loop above costs twice as many instructions
// (attention's softmax, GELU, cross-entropy).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa.h"

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

// ---- 16 lanes in AVX-512 ------------------------------------------------------------------

// exp_vec's range reduction and polynomial on 16 lanes, in fused multiply-adds, with 2^n by
// vscalefps: half of exp_vec's instructions, the same accuracy (a few ulp; not always the
// same bits: the fused multiply-adds round once). Outside exp_vec's range it gives 0 and inf
// as exp_vec does (-inf: 0); NaN propagates.
GPUMIX_TARGET_AVX512 GPUMIX_INLINE __m512 exp16(__m512 x) {
  const __mmask16 all = 0xffff;
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
  const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
  x = _mm512_maskz_min_ps(all, _mm512_set1_ps(88.72283f), _mm512_maskz_max_ps(all, _mm512_set1_ps(-87.33654f), x));
  const __m512 n = _mm512_maskz_roundscale_ps(all, x * _mm512_set1_ps(1.44269504088896341f),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, r * r, r + _mm512_set1_ps(1.0f));
  return _mm512_mask_mov_ps(_mm512_maskz_scalef_ps((__mmask16)~under, p, n), over, _mm512_set1_ps(__builtin_inff()));
}

// The max or the sum of x's 16 lanes, in a tree. Only intrinsics that take no undefined
// operand (GCC 12's unmasked ones warn at -O3 that it may be used uninitialised).
template <bool Max>
GPUMIX_TARGET_AVX512 GPUMIX_INLINE float all_lanes(__m512 x) {
  const __mmask16 all = 0xffff;
  for (int step = 0; step < 4; step++) {
    const __m512 z = step == 0   ? _mm512_maskz_shuffle_f32x4(all, x, x, _MM_SHUFFLE(1, 0, 3, 2))
                     : step == 1 ? _mm512_maskz_shuffle_f32x4(all, x, x, _MM_SHUFFLE(2, 3, 0, 1))
                     : step == 2 ? _mm512_maskz_permute_ps(all, x, _MM_SHUFFLE(1, 0, 3, 2))
                                 : _mm512_maskz_permute_ps(all, x, _MM_SHUFFLE(2, 3, 0, 1));
    x = Max ? _mm512_maskz_max_ps(all, x, z) : x + z;
  }
  return x[0];
}

// The lanes c0 .. c0+15 that are below count.
GPUMIX_TARGET_AVX512 GPUMIX_INLINE __mmask16 lanes_below(int64_t count, int64_t c0) {
  const int64_t k = count - c0;
  return k >= 16 ? (__mmask16)0xffff : k <= 0 ? (__mmask16)0 : (__mmask16)((1u << k) - 1);
}

// 16 lanes of fp32 or bf16 storage as fp32 (the masked-off lanes zero), and back: bf16
// rounded to nearest, ties to even, NaN kept a quiet NaN, bit for bit f32_to_bf16_bits.
// Masked forms throughout: GCC 12's unmasked ones pass an undefined operand and warn at -O3.
GPUMIX_TARGET_AVX512 GPUMIX_INLINE __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
GPUMIX_TARGET_AVX512 GPUMIX_INLINE __m512 load16(const bf16* p, __mmask16 m) {
  const __mmask16 all = 0xffff;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, _mm256_maskz_loadu_epi16(m, p)), 16));
}
GPUMIX_TARGET_AVX512 GPUMIX_INLINE void store16(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
GPUMIX_TARGET_AVX512 GPUMIX_INLINE void store16(bf16* p, __m512 v, __mmask16 m) {
  const __mmask16 all = 0xffff;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(all, u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(all, _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), high, _mm512_set1_epi32(0x40));
  _mm512_mask_cvtepi32_storeu_epi16(p, m, r);
}

}  // namespace gpumix::kernels::cpu
