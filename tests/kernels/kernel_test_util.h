// Shared helpers of the kernel tests: random inputs and THE comparison with a tolerance
// that is a formula of the dtype (STYLE.md item 2).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gpumix::kernels::test {

// Uniform floats in [lo, hi), reproducible from the seed.
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// Uniform integers in [lo, hi].
std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t lo, int32_t hi);

// Relative tolerance of an fp32 result that sums k rounded terms: rounding errors of a
// k-term sum grow like sqrt(k) ulps (random walk); 8 leaves room for the max over many
// elements and for the difference between two implementations.
double fp32_rtol(int64_t k);

// Passes when every element satisfies |fast - ref| <= atol + rtol * |ref|, with
// atol = rtol * rms(ref): an element that cancels to near zero is judged against the
// scale of the whole output, as its rounding error is. NaN matches only NaN; infinities
// must be equal. On failure, reports the worst element, its reference value and by how
// much the allowance is exceeded.
::testing::AssertionResult all_close(const char* what, const float* fast, const float* ref,
                                     int64_t n, double rtol);
inline ::testing::AssertionResult all_close(const char* what, const std::vector<float>& fast,
                                            const std::vector<float>& ref, double rtol) {
  if (fast.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": sizes differ (" << fast.size()
                                         << " vs " << ref.size() << ")";
  return all_close(what, fast.data(), ref.data(), (int64_t)fast.size(), rtol);
}

}  // namespace gpumix::kernels::test
