// The emulated CUDA device's <cuda_bf16.h>: the bf16 type and its conversions, bit-exact to
// CUDA's (cuda_bf16.hpp, CUDA 13):
//   __nv_bfloat16 (nv_bfloat16): 2 bytes, the top half of an IEEE fp32;
//   __float2bfloat16, __float2bfloat16_rn: round to nearest, ties to even; overflow gives
//     inf; any NaN gives the canonical NaN 0x7fff (as CUDA's, unlike kernels/half_types.h, which
//     keeps the NaN's sign and payload: both are NaN);
//   __bfloat162float: exact;
//   __bfloat16_as_ushort, __ushort_as_bfloat16: the bits.
// Nothing else (arithmetic operators, bf162 pairs, ...) is provided: a compile error.
#pragma once

#include <cstdint>
#include <cstring>

struct alignas(2) __nv_bfloat16 {
  unsigned short __x;
};
typedef __nv_bfloat16 nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  __nv_bfloat16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.__x = 0x7fffu;
  } else {
    r.__x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return r;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = (uint32_t)h.__x << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
