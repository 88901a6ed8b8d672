// Helpers of the core tests: THE fp32 comparison (a tolerance that is a formula of the
// dtype, docs/design.md) and a check that an expression throws an error whose message
// contains given pieces (docs/design.md: errors name the op, the shapes and the numbers).
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/half_types.h"

namespace gpumix::test {

// Passes when every element satisfies |got - ref| <= atol + rtol * |ref|. On failure,
// reports the worst element, its reference, and by how much the allowance is exceeded.
inline ::testing::AssertionResult all_close(const char* what, const std::vector<float>& got,
                                            const std::vector<double>& ref, double rtol,
                                            double atol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": sizes differ (" << got.size() << " vs "
                                         << ref.size() << ")";
  double worst = -1;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowance = atol + rtol * std::fabs(ref[i]);
    const double err = std::fabs((double)got[i] - ref[i]);
    const double excess = std::isnan(got[i]) ? INFINITY : err / allowance;
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  if (worst <= 1) return ::testing::AssertionSuccess();
  const double allowance = atol + rtol * std::fabs(ref[worst_i]);
  return ::testing::AssertionFailure()
         << what << ": worst element " << worst_i << " is " << got[worst_i] << ", reference "
         << ref[worst_i] << ", error " << std::fabs((double)got[worst_i] - ref[worst_i])
         << " = " << worst << " x the allowance " << allowance << " (atol " << atol << ", rtol "
         << rtol << ")";
}

// The unit roundoff of bf16 (8 significant bits): one rounding to nearest is off by at most
// 2^-8 of the value.
constexpr double kBf16Roundoff = 1.0 / 256;

// Relative tolerance of a bf16-path result against the fp32 path on the same inputs: `R`
// bf16 roundings on the way to it (R = 0: an fp32 output, such as a parameter gradient)
// plus the fp32 rounding of a k-term reduction done in another order ((k + 2) eps bounds a
// k-term sum's rounding relative to the sum of its terms' magnitudes).
inline double bf16_rtol(int R, int64_t k) {
  return R * kBf16Roundoff + (double)(k + 2) * FLT_EPSILON;
}
// The same for R roundings to any 16-bit format (its unit roundoff from core/dtype.h's table:
// 2^-8 for bf16, 2^-11 for f16).
inline double half_rtol(DType t, int R, int64_t k) {
  return R * dtype_unit_roundoff(t) + (double)(k + 2) * FLT_EPSILON;
}

// all_close with atol = rtol * rms(ref): every element is judged against the scale of the
// whole output too, since a rounded sum errs relative to its terms' size, not its result's
// (an element that cancels to near zero keeps the error of its terms).
inline ::testing::AssertionResult close_to_scale(const char* what, const std::vector<float>& got,
                                                 const std::vector<float>& ref, double rtol) {
  double squares = 0;
  for (float r : ref) squares += (double)r * r;
  const double rms = ref.empty() ? 0 : std::sqrt(squares / (double)ref.size());
  return all_close(what, got, std::vector<double>(ref.begin(), ref.end()), rtol, rtol * rms);
}

// The normalised mean squared error of a result after R bf16 roundings and a k-term fp32
// reduction: independent roundings, each uniform within +-u of the value, add in
// quadrature to an expected R u^2 / 3 (u = 2^-8); allowed: R u^2, plus the fp32 part.
inline double bf16_nmse(int R, int64_t k) {
  const double fp32 = (double)(k + 2) * FLT_EPSILON;
  return R * kBf16Roundoff * kBf16Roundoff + fp32 * fp32;
}

// A deep composition (a model's logits or gradients) against a reference: every element
// within bf16_rtol(R, k) of the scale (the first-order worst case, roundings adding up)
// and the whole within bf16_nmse(R, k) in the mean (sum (got - ref)^2 / sum ref^2), which
// is what makes the check tight where the worst case is loose.
inline ::testing::AssertionResult model_close(const char* what, const std::vector<float>& got,
                                              const std::vector<float>& ref, int R, int64_t k) {
  ::testing::AssertionResult each = close_to_scale(what, got, ref, bf16_rtol(R, k));
  if (!each) return each;
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
    norm += (double)ref[i] * ref[i];
  }
  const double nmse = norm > 0 ? err / norm : err, bound = bf16_nmse(R, k);
  if (nmse <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": normalised mean squared error " << nmse
                                       << " = " << nmse / bound << " x the allowance " << bound
                                       << " (R " << R << ", k " << k << ")";
}

// Random values in [lo, hi) rounded to bf16, so that f32 and bf16 tensors (and the CPU and
// a GPU) hold the same numbers.
inline std::vector<float> bf16_values(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = bf16_bits_to_f32(f32_to_bf16_bits(dist(gen)));
  return v;
}

// Bitwise equality of two fp32 vectors, reporting the first difference.
inline ::testing::AssertionResult bitwise_equal(const char* what, const std::vector<float>& a,
                                                const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes differ (" << a.size() << " vs "
                                         << b.size() << ")";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << what << ": element " << i << " differs: " << a[i]
                                           << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

}  // namespace gpumix::test

// Expects `stmt` to throw `type` whose what() contains every one of the given strings.
#define EXPECT_THROW_WITH(stmt, type, ...)                                                  \
  do {                                                                                      \
    bool caught_ = false;                                                                   \
    try {                                                                                   \
      stmt;                                                                                 \
    } catch (const type& e_) {                                                              \
      caught_ = true;                                                                       \
      const std::string msg_ = e_.what();                                                   \
      for (const char* piece_ : {__VA_ARGS__})                                              \
        EXPECT_NE(msg_.find(piece_), std::string::npos)                                     \
            << "message of " #stmt " lacks \"" << piece_ << "\": " << msg_;                 \
    } catch (const std::exception& e_) {                                                    \
      ADD_FAILURE() << #stmt " threw another exception type: " << e_.what();                \
      caught_ = true;                                                                       \
    }                                                                                       \
    if (!caught_) ADD_FAILURE() << #stmt " did not throw " #type;                           \
  } while (0)
