// bf16 and f16 (IEEE binary16): round to nearest, ties to even; NaN stays NaN; infinities;
// overflow to inf; denormals; and the same conversions through Tensor::to(DType) on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/ops.h"
#include "core/tensor.h"
#include "test_util.h"

namespace gpumix {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
uint16_t bf(float f) { return bf16(f).bits; }

// An independent oracle: of the two bf16 neighbours of a finite x (truncation and the next
// one up in magnitude), the nearer in exact (double) arithmetic; on a tie, the even one.
uint16_t reference_bf16(float x) {
  const uint32_t u = to_bits(x);
  const uint16_t lo = (uint16_t)(u >> 16);
  const uint16_t hi = (uint16_t)(lo + 1);  // next magnitude up (may become inf: 0x7f80)
  const double dx = std::fabs((double)x);
  const double dlo = std::fabs((double)bf16_bits_to_f32(lo));
  const double dhi = (hi & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128)  // inf stands for 2^128
                                             : std::fabs((double)bf16_bits_to_f32(hi));
  const double elo = dx - dlo, ehi = dhi - dx;
  if (elo < ehi) return lo;
  if (ehi < elo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(BF16, RoundsToNearestEven) {
  const float one = 1.0f;
  EXPECT_EQ(bf(one), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the tie goes to the even 1.
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ((float)bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd mantissa 0x3f81) and 1 + 2^-6 (even
  // 0x3f82): ties to even give 1 + 2^-6.
  EXPECT_EQ(bf(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ((float)bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  // Just past a tie rounds up, just short of it rounds down; not a tie: nearest.
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -8) - std::ldexp(1.0f, -20)), 0x3f80);
  EXPECT_EQ(bf(1.0f + 3 * std::ldexp(1.0f, -9)), 0x3f81);  // 0.75 ulp -> up to 1 + 2^-7
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -9)), 0x3f80);      // 0.25 ulp -> down
  // A tie that carries into the exponent: (2 - 2^-8) is halfway between 2 - 2^-7 (odd)
  // and 2 (even).
  EXPECT_EQ(bf(2.0f - std::ldexp(1.0f, -8)), 0x4000);
}

TEST(BF16, NegativeValuesRoundLikePositive) {
  EXPECT_EQ(bf(-1.0f), 0xbf80);
  EXPECT_EQ(bf(-(1.0f + std::ldexp(1.0f, -8))), 0xbf80);
  EXPECT_EQ(bf(-(1.0f + 3 * std::ldexp(1.0f, -8))), 0xbf82);
  EXPECT_EQ(bf(-(1.0f + 3 * std::ldexp(1.0f, -9))), 0xbf81);
  EXPECT_EQ(bf(-0.0f), 0x8000);
  EXPECT_EQ(bf(0.0f), 0x0000);
}

TEST(BF16, NaNStaysNaN) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan((float)bf16(qnan)));
  EXPECT_TRUE(std::isnan((float)bf16(-qnan)));
  // NaNs whose payload lives only in the low 16 bits would become inf if truncated, and
  // rounding up the largest payload would carry into the sign bit.
  for (uint32_t u : {0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u, 0xffffffffu, 0x7fc00000u}) {
    const bf16 h(from_bits(u));
    EXPECT_TRUE(std::isnan((float)h)) << std::hex << u << " -> " << h.bits;
    EXPECT_EQ(h.bits & 0x8000, (u >> 16) & 0x8000) << "sign of NaN " << std::hex << u;
  }
}

TEST(BF16, Infinities) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf(inf), 0x7f80);
  EXPECT_EQ(bf(-inf), 0xff80);
  EXPECT_EQ((float)bf16(inf), inf);
  EXPECT_EQ((float)bf16(-inf), -inf);
}

TEST(BF16, AboveMaxRoundsToInf) {
  const uint16_t max_bits = 0x7f7f;  // (2 - 2^-7) * 2^127
  const float bf16_max = bf16_bits_to_f32(max_bits);
  EXPECT_EQ(bf(bf16_max), max_bits);
  EXPECT_EQ(bf(from_bits(0x7f7f7fffu)), max_bits);  // below the midpoint to 2^128
  EXPECT_EQ(bf(from_bits(0x7f7f8000u)), 0x7f80);     // the midpoint: ties to even = inf
  EXPECT_EQ(bf(FLT_MAX), 0x7f80);
  EXPECT_EQ(bf(-FLT_MAX), 0xff80);
  EXPECT_EQ(bf(-bf16_max), 0xff7f);
}

TEST(BF16, Denormals) {
  // The smallest fp32 denormal is far below half a bf16 denormal step: +0 (sign kept).
  EXPECT_EQ(bf(from_bits(0x00000001u)), 0x0000);
  EXPECT_EQ(bf(from_bits(0x80000001u)), 0x8000);
  // bf16 denormals convert exactly both ways.
  EXPECT_EQ(bf(from_bits(0x00010000u)), 0x0001);
  EXPECT_EQ(bf16_bits_to_f32(0x0001), from_bits(0x00010000u));
  EXPECT_EQ(bf(from_bits(0x807f0000u)), 0x807f);
  // Ties among denormals go to even: 1.5 steps -> 2, 2.5 steps -> 2.
  EXPECT_EQ(bf(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(bf(from_bits(0x00028000u)), 0x0002);
  EXPECT_EQ(bf(from_bits(0x00028001u)), 0x0003);
  // The largest denormal rounds up into the smallest normal.
  EXPECT_EQ(bf(from_bits(0x007fffffu)), 0x0080);
}

TEST(BF16, EveryBF16RoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_bits_to_f32((uint16_t)h);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan((float)bf16(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(bf(f), h) << "bf16 0x" << std::hex << h << " did not round-trip";
  }
}

TEST(BF16, MatchesAnIndependentOracle) {
  // Random finite floats of every exponent, plus every value one unit around each tie.
  std::mt19937 gen(7);
  int checked = 0;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = gen();
    const float x = from_bits(u);
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(bf(x), reference_bf16(x)) << "x = " << x << " (bits 0x" << std::hex << u << ")";
    ++checked;
  }
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u, 0x0001u, 0xffffu}) {
      const float x = from_bits((h << 16) | low);
      if (!std::isfinite(x)) continue;
      ASSERT_EQ(bf(x), reference_bf16(x)) << "bits 0x" << std::hex << ((h << 16) | low);
      ++checked;
    }
  }
  EXPECT_GT(checked, 900000);
}

TEST(BF16, ThroughTensorToDtype) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> in = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                                 -(1.0f + 3 * std::ldexp(1.0f, -8)), FLT_MAX, -inf,
                                 from_bits(0x00018000u), 3.14159265f, -0.0f,
                                 std::numeric_limits<float>::quiet_NaN()};
  Tensor f = Tensor::from_vector(in, {3, 3});
  Tensor h = f.to(DType::bf16);
  EXPECT_EQ(h.dtype(), DType::bf16);
  EXPECT_EQ(h.shape(), f.shape());
  EXPECT_EQ(h.nbytes(), 18);
  const bf16* hb = h.data<bf16>();
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i]))
      EXPECT_TRUE(std::isnan((float)hb[i]));
    else
      EXPECT_EQ(hb[i].bits, reference_bf16(in[i])) << "element " << i << " = " << in[i];
  }
  Tensor back = h.to(DType::f32);
  EXPECT_EQ(back.dtype(), DType::f32);
  const std::vector<float> b = back.to_vector();
  const std::vector<float> via_to_vector = h.to_vector();  // bf16 -> fp32 on the way out
  const std::vector<float> expected = {1.0f, 1.0f + std::ldexp(1.0f, -6),
                                       -(1.0f + std::ldexp(1.0f, -6)), inf, -inf,
                                       from_bits(0x00020000u), 3.140625f, -0.0f, NAN};
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(b[i]) && std::isnan(via_to_vector[i]));
      continue;
    }
    EXPECT_EQ(to_bits(b[i]), to_bits(expected[i])) << "element " << i;
    EXPECT_EQ(to_bits(via_to_vector[i]), to_bits(expected[i])) << "element " << i;
  }

  // A large random tensor goes through the (parallel) kernel: same as the scalar oracle.
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> big(100003);
  for (float& v : big) v = normal(gen);
  const std::vector<float> round = Tensor::from_vector(big, {(int64_t)big.size()}).to(DType::bf16).to_vector();
  for (size_t i = 0; i < big.size(); ++i)
    ASSERT_EQ(to_bits(round[i]), (uint32_t)reference_bf16(big[i]) << 16) << "element " << i;
}

// ---- f16 (IEEE binary16) --------------------------------------------------------------------

uint16_t h16(float f) { return f16(f).bits; }

// An independent decoder: sign, 5 exponent bits (bias 15), 10 mantissa bits, by ldexp.
double reference_f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0 ? std::ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                              : std::ldexp((double)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

// An independent rounding oracle in double: |x| in units of its f16 ulp (2^-24 below 2^-14,
// else 2^(exponent - 10)), rounded to nearest even by nearbyint (the default rounding mode);
// from 65520 (the tie between 65504 and 2^16) up: inf.
double reference_f16(float x) {
  const double a = std::fabs((double)x);
  double q;
  if (a >= 65520.0) {
    q = INFINITY;
  } else {
    int e;
    std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the exponent of a is e - 1
    const int ulp_exp = std::max(-24, e - 1 - 10);
    q = std::ldexp(std::nearbyint(std::ldexp(a, -ulp_exp)), ulp_exp);
  }
  return std::signbit(x) ? -q : q;
}

TEST(F16, DecodesEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_bits_to_f32((uint16_t)h);
    const double want = reference_f16_value((uint16_t)h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan((float)f16(f))) << std::hex << h;  // NaN stays NaN
      ASSERT_EQ(h16(f) & 0x8000, h & 0x8000) << "sign of NaN " << std::hex << h;
      continue;
    }
    ASSERT_EQ((double)f, want) << "f16 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(h16(f), h) << "f16 0x" << std::hex << h << " did not round-trip";
  }
}

TEST(F16, Edges) {
  EXPECT_EQ(h16(1.0f), 0x3c00);
  EXPECT_EQ(h16(-2.0f), 0xc000);
  EXPECT_EQ(h16(65504.0f), 0x7bff);                   // the largest finite
  EXPECT_EQ(h16(65519.996f), 0x7bff);                 // below the tie to 2^16
  EXPECT_EQ(h16(65520.0f), 0x7c00);                   // the tie: to even = inf
  EXPECT_EQ(h16(-65520.0f), 0xfc00);
  EXPECT_EQ(h16(1e10f), 0x7c00);
  EXPECT_EQ(h16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(h16(std::ldexp(1.0f, -14)), 0x0400);       // the smallest normal
  EXPECT_EQ(h16(std::ldexp(1.0f, -24)), 0x0001);       // the smallest subnormal
  EXPECT_EQ(h16(std::ldexp(1.0f, -25)), 0x0000);       // the tie to 0 and 2^-24: even = 0
  EXPECT_EQ(h16(std::ldexp(1.0f, -25) * 1.0000001f), 0x0001);  // just past it
  EXPECT_EQ(h16(std::ldexp(3.0f, -25)), 0x0002);       // 1.5 steps: to even 2
  EXPECT_EQ(h16(std::ldexp(5.0f, -25)), 0x0002);       // 2.5 steps: to even 2
  EXPECT_EQ(h16(std::ldexp(1023.5f, -24)), 0x0400);    // the largest subnormal's tie up: normal
  EXPECT_EQ(h16(-std::ldexp(1.0f, -26)), 0x8000);      // -0 keeps its sign
  EXPECT_EQ(h16(from_bits(0x00000001u)), 0x0000);      // an fp32 denormal
  EXPECT_EQ(h16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: to even 1
  EXPECT_EQ(h16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: to even 1 + 2^-9
  EXPECT_EQ(h16(2.0f - std::ldexp(1.0f, -12)), 0x4000);      // carries into the exponent
  for (uint32_t u : {0x7f800001u, 0x7fffffffu, 0xff800001u, 0x7fc00000u, 0x7f802000u}) {
    EXPECT_TRUE(std::isnan((float)f16(from_bits(u)))) << std::hex << u;  // low payloads too
    EXPECT_EQ(h16(from_bits(u)) & 0x8000, (u >> 16) & 0x8000) << std::hex << u;
  }
  EXPECT_EQ(dtype_info(DType::f16).max_finite, (double)(float)f16::from_bits(0x7bff));
  EXPECT_EQ(dtype_info(DType::f16).min_normal, (double)(float)f16::from_bits(0x0400));
  EXPECT_EQ(dtype_info(DType::bf16).max_finite, (double)(float)bf16::from_bits(0x7f7f));
}

TEST(F16, MatchesAnIndependentOracle) {
  std::mt19937 gen(13);
  int checked = 0;
  auto check = [&](float x) {
    if (std::isnan(x)) return;
    const float got = (float)f16(x);
    ASSERT_EQ((double)got, reference_f16(x)) << "x = " << x << " (bits 0x" << std::hex << to_bits(x) << ")";
    ASSERT_EQ(std::signbit(got), std::signbit(x)) << x;
#if defined(__FLT16_MAX__)
    // The compiler's own _Float16 (x86-64 GCC 12+), a second oracle where it exists.
    const _Float16 c = (_Float16)x;
    uint16_t cb;
    std::memcpy(&cb, &c, sizeof cb);
    ASSERT_EQ(h16(x), cb) << "x = " << x;
#endif
    ++checked;
  };
  // Random floats of every exponent, and the f16 range densely (random bits below 2^17).
  for (int i = 0; i < 300000; ++i) check(from_bits(gen()));
  for (int i = 0; i < 300000; ++i) check(from_bits((gen() % (0x47ffffffu - 0x33000000u)) + 0x33000000u) * ((i & 1) ? -1.0f : 1.0f));
  // Every f16 value's neighbourhood in fp32: just below, at and just above each tie.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = reference_f16_value((uint16_t)h), hi = reference_f16_value((uint16_t)(h + 1));
    const float tie = (float)((lo + hi) / 2);  // exact in fp32
    check(tie);
    check(std::nextafter(tie, 0.0f));
    check(std::nextafter(tie, INFINITY));
  }
  EXPECT_GT(checked, 600000);
}

TEST(F16, ThroughTensorToDtype) {
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 3000.0f);
  std::vector<float> in(50003);
  for (float& v : in) v = normal(gen) * (gen() % 3 == 0 ? 1e-7f : 1.0f);
  in[0] = 70000.0f, in[1] = -65520.0f, in[2] = std::ldexp(1.0f, -25), in[3] = NAN;
  Tensor f = Tensor::from_vector(in, {(int64_t)in.size()});
  Tensor h = f.to(DType::f16);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.nbytes(), 2 * (int64_t)in.size());
  const std::vector<float> back = h.to_vector();
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(back[i]));
      continue;
    }
    ASSERT_EQ((double)back[i], reference_f16(in[i])) << "element " << i << " = " << in[i];
  }
  // bf16 -> f16 goes through fp32 (exact in fp32, one rounding to f16).
  const std::vector<float> via_bf16 = f.to(DType::bf16).to(DType::f16).to_vector();
  const std::vector<float> bf = f.to(DType::bf16).to_vector();
  for (size_t i = 4; i < in.size(); ++i) ASSERT_EQ((double)via_bf16[i], reference_f16(bf[i])) << i;
  // f16 is storage only on the CPU: computing in it is refused, naming the fix.
  Tensor out = Tensor::empty({(int64_t)in.size()}, DType::f16);
  EXPECT_THROW_WITH(ops::gelu_forward(out, h), InputError, "the CPU backend computes in f32 and bf16",
                    "CUDA device");
}

}  // namespace
}  // namespace gpumix
