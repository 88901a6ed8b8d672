// Shared helpers of the kernel tests: random inputs and THE comparison with a tolerance
// that is a formula of the dtype (docs/design.md, "Numbers and precision").
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "tests/half_bits.h"

namespace gpumix::kernels::test {

// Uniform floats in [lo, hi), reproducible from the seed.
std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// Uniform integers in [lo, hi].
std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t lo, int32_t hi);

// Relative tolerance of an fp32 result that sums k rounded terms: rounding errors of a
// k-term sum grow like sqrt(k) ulps (random walk); 8 leaves room for the max over many
// elements and for the difference between two implementations.
double fp32_rtol(int64_t k);

// Relative tolerance of a bf16 result that the kernel computes in fp32 from the same bf16
// inputs as the fp32 reference and rounds once at the end, over k accumulated terms: the
// final rounding (half a bf16 ulp: 2^-8 relative; bf16 keeps 8 significant bits) plus
// the fp32 accumulation error. The reference is the fp32 twin on the widened inputs,
// unrounded.
double bf16_out_rtol(int64_t k);
// Relative tolerance of a result that also sums k bf16-rounded intermediates (e.g. the
// probabilities that attention's bf16 tile products take): each carries up to 2^-8
// relative error, independently, so their sum's error grows like sqrt(k) (random walk);
// 2 sqrt(k) leaves room for the worst of many elements. Plus the final rounding.
double bf16_rtol(int64_t k);

// bf16 bits <-> fp32 (exact widening; round to nearest even).
std::vector<bf16> to_bf16(const std::vector<float>& x);
std::vector<float> to_f32(const std::vector<bf16>& h);
// Uniform floats in [lo, hi) rounded to bf16, as bits.
std::vector<bf16> random_bf16(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// A quiet NaN in bf16: poisons outputs, so an element the kernel does not write fails.
constexpr bf16 k_bf16_nan = bf16::from_bits(0x7fc0);

// Runs f once for every instruction-set path (kernels/cpu/isa.h) this CPU supports, with
// that path set and its name in the failure messages; restores the path it found.
void for_each_isa(const std::function<void()>& f);

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

inline ::testing::AssertionResult all_close(const char* what, const std::vector<bf16>& fast,
                                            const std::vector<float>& ref, double rtol) {
  return all_close(what, to_f32(fast), ref, rtol);
}

}  // namespace gpumix::kernels::test
