// Internal to kernels/cpu: what the kernel bodies share.
//
// Storage types: activations are `float` or `bf16` (kernels/half_types.h; fp16 is no CPU
// compute dtype). A kernel body is a
// template over its storage type: to_f32 widens a stored value (exact), from_f32 rounds an
// fp32 result to the storage type (to nearest even, kernels/half_types.h), once, at the end.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels/half_types.h"
#include "kernels/cpu/isa.h"

namespace gpumix::kernels::cpu {

GPUMIX_INLINE float to_f32(float x) { return x; }
GPUMIX_INLINE float to_f32(bf16 h) { return bf16_bits_to_f32(h.bits); }
template <class T>
GPUMIX_INLINE T from_f32(float x);
template <>
GPUMIX_INLINE float from_f32<float>(float x) { return x; }
template <>
GPUMIX_INLINE bf16 from_f32<bf16>(float x) { return bf16::from_bits(f32_to_bf16_bits(x)); }

// Runs f(i0, i1) over [0, n) split into one contiguous range per thread, each a multiple
// of grain (64 elements: no two threads share a cache line of a 16- or 32-bit array; 1
// for rows); one call f(0, n) on this thread when !par (too little work for threads to
// pay off).
template <class F>
void parallel_ranges(int64_t n, int64_t grain, bool par, F f) {
  if (n <= 0) return;
  if (!par || omp_get_max_threads() == 1) {
    f((int64_t)0, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (n + nt - 1) / nt;
    const int64_t step = (per + grain - 1) / grain * grain;
    const int64_t i0 = std::min(n, t * step), i1 = std::min(n, i0 + step);
    if (i0 < i1) f(i0, i1);
  }
}

}  // namespace gpumix::kernels::cpu
