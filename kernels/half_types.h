// The two 16-bit float storage formats, as distinct types (so that a kernel taking one
// does not compile given the other), and their scalar conversions to and from fp32,
// shared by the CPU kernels, core/ and the CUDA code.
//
// - bf16: the top 16 bits of an IEEE fp32 (8 exponent bits, 7 mantissa bits).
// - f16: IEEE binary16 (5 exponent bits, 10 mantissa bits): largest finite 65504, smallest
//   normal 2^-14, smallest subnormal 2^-24.
//
// From fp32 both round to nearest, ties to even; overflow gives inf (bf16 only above
// fp32's own range; f16 from 65520 up); NaN stays a (quiet) NaN; f16 keeps subnormals.
// To fp32 both are exact.
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

GPUMIX_HD inline uint16_t f32_to_f16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN: quiet
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 (the tie above 65504): inf
  if (a >= 0x38800000u) {  // normal in f16 (>= 2^-14): rebias the exponent by 127 - 15
    const uint32_t r = a - 0x38000000u;
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));  // nearest, ties to even
  }
  // Subnormal (or zero) in f16: the value in units of 2^-24, rounded to nearest even. The
  // fp32 significand M (24 bits with the implicit one) is worth M * 2^(e - 126) such units.
  const uint32_t e = a >> 23;
  if (e < 102) return (uint16_t)sign;  // below 2^-25: rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return (uint16_t)(sign | (q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u)));
}

GPUMIX_HD inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);  // inf, NaN (payload kept)
  } else if (e != 0) {
    u = sign | ((e + 112) << 23) | (m << 13);
  } else {
    const float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact (zero, subnormals)
    memcpy(&u, &v, sizeof u);
    u |= sign;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// One bf16 value. Trivially constructible (device shared memory may hold it); `bf16{}` is
// +0. Conversions are explicit: to fp32 exact, from fp32 rounded as f32_to_bf16_bits.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  GPUMIX_HD explicit bf16(float f) : bits(f32_to_bf16_bits(f)) {}
  GPUMIX_HD explicit operator float() const { return bf16_bits_to_f32(bits); }
  GPUMIX_HD static constexpr bf16 from_bits(uint16_t b) {
    bf16 h{};
    h.bits = b;
    return h;
  }
};

// One IEEE binary16 value; as bf16 above.
struct f16 {
  uint16_t bits;
  f16() = default;
  GPUMIX_HD explicit f16(float f) : bits(f32_to_f16_bits(f)) {}
  GPUMIX_HD explicit operator float() const { return f16_bits_to_f32(bits); }
  GPUMIX_HD static constexpr f16 from_bits(uint16_t b) {
    f16 h{};
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "16-bit storage types hold their bits only");

}  // namespace gpumix
