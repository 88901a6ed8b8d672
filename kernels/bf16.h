// bf16 <-> fp32 scalar conversion, shared by the CPU kernels, core/ and the CUDA code.
// bf16 is the top 16 bits of an IEEE fp32; conversion rounds to nearest, ties to even,
// and keeps NaN a (quiet) NaN.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GPUMIX_HD __host__ __device__
#else
#define GPUMIX_HD
#endif

namespace gpumix {

GPUMIX_HD inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t lsb = (u >> 16) & 1u;
  const uint32_t rounded = (u + 0x7fffu + lsb) >> 16;  // nearest, ties to even; overflow: inf
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  // A select, not a branch: loops over it vectorise (kernels/cpu).
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

GPUMIX_HD inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace gpumix
