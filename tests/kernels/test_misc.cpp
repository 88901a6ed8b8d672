// AdamW, elementwise kernels, reductions and fp32 <-> bf16 conversion.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ref.h"
#include "kernels/cpu/vec_math.h"

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using gpumix::bf16;
using gpumix::kernels::test::all_close;
using gpumix::kernels::test::fp32_rtol;
using gpumix::kernels::test::random_floats;

class Sizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(Sizes, AdamWMatchesRefOverSteps) {
  const int64_t n = GetParam();
  auto p_f = random_floats(n, 1), p_r = p_f;
  std::vector<float> m_f(n, 0.0f), v_f(n, 0.0f), m_r(n, 0.0f), v_r(n, 0.0f);
  for (int step = 1; step <= 5; step++) {
    const auto g = random_floats(n, 10 + step, -0.1f, 0.1f);
    cpu::adamw_step(p_f.data(), g.data(), m_f.data(), v_f.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    ref::adamw_step(p_r.data(), g.data(), m_r.data(), v_r.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
  }
  // Each step rounds a handful of times; the update's size (lr) bounds the absolute error.
  const double rtol = fp32_rtol(5 * 8);
  EXPECT_TRUE(all_close("adamw m", m_f, m_r, rtol));
  EXPECT_TRUE(all_close("adamw v", v_f, v_r, rtol));
  EXPECT_TRUE(all_close("adamw param", p_f, p_r, rtol));
}

TEST_P(Sizes, ElementwiseMatchRefAndAlias) {
  const int64_t n = GetParam();
  const auto a = random_floats(n, 1), b = random_floats(n, 2);
  std::vector<float> f(n), r(n);
  cpu::add(f.data(), a.data(), b.data(), n);
  ref::add(r.data(), a.data(), b.data(), n);
  EXPECT_TRUE(all_close("add", f, r, fp32_rtol(1)));
  auto x = a;  // out == a
  cpu::add(x.data(), x.data(), b.data(), n);
  EXPECT_TRUE(all_close("add out==a", x, r, fp32_rtol(1)));
  x = b;  // out == b
  cpu::add(x.data(), a.data(), x.data(), n);
  EXPECT_TRUE(all_close("add out==b", x, r, fp32_rtol(1)));

  cpu::scale(f.data(), a.data(), -1.7f, n);
  ref::scale(r.data(), a.data(), -1.7f, n);
  EXPECT_TRUE(all_close("scale", f, r, fp32_rtol(1)));
  x = a;
  cpu::scale(x.data(), x.data(), -1.7f, n);
  EXPECT_TRUE(all_close("scale in place", x, r, fp32_rtol(1)));

  f = b;
  r = b;
  cpu::axpy(f.data(), a.data(), 0.3f, n);
  ref::axpy(r.data(), a.data(), 0.3f, n);
  EXPECT_TRUE(all_close("axpy", f, r, fp32_rtol(2)));
}

TEST_P(Sizes, ReductionsMatchRef) {
  const int64_t n = GetParam();
  const auto a = random_floats(n, 3, -1.0f, 3.0f);
  // Both accumulate in double: the order differs, the error is double rounding.
  const double tol_rel = 8 * DBL_EPSILON * std::sqrt((double)n);
  const double s_r = ref::sum(a.data(), n), q_r = ref::sum_squares(a.data(), n);
  double abs_sum = 0.0;
  for (float v : a) abs_sum += std::fabs(v);
  EXPECT_NEAR(cpu::sum(a.data(), n), s_r, tol_rel * abs_sum);
  EXPECT_NEAR(cpu::sum_squares(a.data(), n), q_r, tol_rel * q_r);
}

TEST_P(Sizes, Bf16ConversionMatchesRefBitwise) {
  const int64_t n = GetParam();
  auto a = random_floats(n, 4, -1e3f, 1e3f);
  if (n > 3) {
    a[0] = NAN;
    a[1] = INFINITY;
    a[2] = -FLT_MAX;
  }
  std::vector<bf16> h_f(n), h_r(n);
  cpu::f32_to_bf16(h_f.data(), a.data(), n);
  ref::f32_to_bf16(h_r.data(), a.data(), n);
  EXPECT_EQ(h_f, h_r);
  std::vector<float> back_f(n), back_r(n);
  cpu::bf16_to_f32(back_f.data(), h_f.data(), n);
  ref::bf16_to_f32(back_r.data(), h_r.data(), n);
  EXPECT_EQ(0, std::memcmp(back_f.data(), back_r.data(), n * sizeof(float)));
  // Round trip is within half a bf16 ulp (2^-8 relative) for finite, in-range values.
  for (int64_t i = 0; i < n; i++)
    if (std::isfinite(back_f[i]) && std::fabs(a[i]) < 1e30f) {
      EXPECT_LE(std::fabs(back_f[i] - a[i]), std::ldexp(std::fabs(a[i]), -8)) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(N, Sizes, ::testing::Values(1, 3, 17, 33, 100003));

namespace {
// Through the kernels, bits in and out.
uint16_t to_bf16(float x) {
  bf16 h;
  cpu::f32_to_bf16(&h, &x, 1);
  return h.bits;
}
float from_bf16(uint16_t bits) {
  float x;
  const bf16 h = bf16::from_bits(bits);
  cpu::bf16_to_f32(&x, &h, 1);
  return x;
}
}  // namespace

TEST(Bf16, RoundsToNearestTiesToEven) {
  // bf16 keeps 7 fraction bits: near 1 its ulp is 2^-7, so 1 + 2^-8 is a tie.
  EXPECT_EQ(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie, to even (down)
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));  // tie, up to even
  EXPECT_EQ(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));  // just above the tie: up
  EXPECT_EQ(from_bf16(to_bf16(-1.0f - 3 * std::ldexp(1.0f, -8))), -1.0f - std::ldexp(1.0f, -6));
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(to_bf16(0.0f), 0x0000);
  EXPECT_EQ(to_bf16(-0.0f), 0x8000);
}

TEST(Bf16, SpecialValues) {
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(-NAN))));
  // A NaN whose payload sits only in the low 16 bits must not truncate to infinity.
  uint32_t bits = 0x7f800001u;
  float low_nan;
  std::memcpy(&low_nan, &bits, 4);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(low_nan))));
  EXPECT_EQ(from_bf16(to_bf16(INFINITY)), INFINITY);
  EXPECT_EQ(from_bf16(to_bf16(-INFINITY)), -INFINITY);
  EXPECT_EQ(from_bf16(to_bf16(FLT_MAX)), INFINITY);  // rounds past the largest bf16
  EXPECT_EQ(from_bf16(to_bf16(-FLT_MAX)), -INFINITY);
  // The largest bf16 stays finite.
  EXPECT_EQ(from_bf16(to_bf16(from_bf16(0x7f7f))), from_bf16(0x7f7f));
  // Subnormals keep their bits.
  EXPECT_EQ(to_bf16(from_bf16(0x0001)), 0x0001);
}

TEST(ExpVec, WithinTwoUlpOfExpAndSpecialValues) {
  // The vectorisable exp used by gelu, softmax and cross-entropy, against exp in double
  // over its whole normal range, in steps much finer than its polynomial's pieces.
  using gpumix::kernels::cpu::exp_vec;
  double worst_ulp = 0.0;
  float worst_x = 0.0f;
  for (float x = -87.3f; x < 88.7f; x += 1e-3f) {
    const double e = std::exp((double)x);
    const float ef = (float)e;
    const double ulp = (double)std::nextafter(ef, INFINITY) - ef;
    const double err = std::fabs(exp_vec(x) - e) / ulp;
    if (err > worst_ulp) {
      worst_ulp = err;
      worst_x = x;
    }
  }
  EXPECT_LE(worst_ulp, 2.0) << "at x = " << worst_x;
  EXPECT_EQ(exp_vec(0.0f), 1.0f);
  EXPECT_EQ(exp_vec(-INFINITY), 0.0f);  // masked attention scores
  EXPECT_EQ(exp_vec(-1000.0f), 0.0f);
  EXPECT_EQ(exp_vec(INFINITY), INFINITY);
  EXPECT_EQ(exp_vec(1000.0f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_vec(NAN)));
  EXPECT_TRUE(std::isfinite(exp_vec(88.7f)));  // near FLT_MAX, still finite
}

// The 16-lane AVX-512 forms of vec_math.h (GELU, cross-entropy and attention's softmax use
// them on the avx512 paths): exp16 within 2 ulp of exp with exp_vec's special values, and
// the bf16 loads and stores bit for bit the scalar conversion, masked tails untouched.
namespace {
GPUMIX_TARGET_AVX512 void exp16_of(float* y, const float* x, int n) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = cpu::lanes_below(n, i);
    cpu::store16(y + i, cpu::exp16(cpu::load16(x + i, m)), m);
  }
}
GPUMIX_TARGET_AVX512 void bf16_round_trip(bf16* h, float* back, const float* x, int n) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = cpu::lanes_below(n, i);
    cpu::store16(h + i, cpu::load16(x + i, m), m);
    cpu::store16(back + i, cpu::load16(h + i, m), m);
  }
}
}  // namespace

TEST(Exp16, WithinTwoUlpOfExpAndSpecialValues) {
  if (!cpu::isa_supported(cpu::Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<float> x, y;
  for (float v = -87.3f; v < 88.7f; v += 1e-3f) x.push_back(v);
  const std::vector<float> special = {0.0f, -INFINITY, -1000.0f, INFINITY, 1000.0f, NAN, 88.7f};
  x.insert(x.end(), special.begin(), special.end());
  y.assign(x.size(), 0.0f);
  exp16_of(y.data(), x.data(), (int)x.size());
  double worst_ulp = 0.0;
  float worst_x = 0.0f;
  const size_t n = x.size() - special.size();
  for (size_t i = 0; i < n; i++) {
    const double e = std::exp((double)x[i]);
    const float ef = (float)e;
    const double err = std::fabs(y[i] - e) / ((double)std::nextafter(ef, INFINITY) - ef);
    if (err > worst_ulp) worst_ulp = err, worst_x = x[i];
  }
  EXPECT_LE(worst_ulp, 2.0) << "at x = " << worst_x;
  const float* s = y.data() + n;
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(s[2], 0.0f);
  EXPECT_EQ(s[3], INFINITY);
  EXPECT_EQ(s[4], INFINITY);
  EXPECT_TRUE(std::isnan(s[5]));
  EXPECT_TRUE(std::isfinite(s[6]));
}

TEST(Bf16, SixteenLaneStoresRoundAsTheScalarConversion) {
  if (!cpu::isa_supported(cpu::Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<float> x = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), -1.0f - 3 * std::ldexp(1.0f, -8),
                          0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, from_bf16(0x7f7f),
                          from_bf16(0x0001), FLT_MIN, -FLT_MIN / 4};
  uint32_t bits = 0x7f800001u;  // a NaN with its payload in the low 16 bits only
  float low_nan;
  std::memcpy(&low_nan, &bits, 4);
  x.push_back(low_nan);
  const std::vector<float> r = random_floats(1000, 11, -3.0f, 3.0f);
  x.insert(x.end(), r.begin(), r.end());  // 1016 values: a masked tail of 8
  const int n = (int)x.size();
  std::vector<bf16> h(n + 16, bf16::from_bits(0xbeef));
  std::vector<float> back(n + 16, -7.0f);
  bf16_round_trip(h.data(), back.data(), x.data(), n);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(h[i].bits, to_bf16(x[i])) << "x[" << i << "] = " << x[i];
    const float widened = from_bf16(h[i].bits);
    ASSERT_EQ(std::memcmp(&back[i], &widened, 4), 0) << i;
  }
  for (int i = n; i < n + 16; i++) {
    EXPECT_EQ(h[i].bits, 0xbeef) << "the store wrote past the mask at " << i;
    EXPECT_EQ(back[i], -7.0f) << i;
  }
}
