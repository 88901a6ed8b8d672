// Helpers of the core tests: THE fp32 comparison (a tolerance that is a formula of the
// dtype, STYLE.md item 2) and a check that an expression throws an error whose message
// contains given pieces (STYLE.md item 9: errors name the op, the shapes and the numbers).
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

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
