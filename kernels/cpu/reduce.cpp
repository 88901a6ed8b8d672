// Reductions, accumulated in double, over fp32 or bf16. Each thread sums its own
// contiguous range and the partial sums are added in thread order, so the result is the
// same on every run with the same thread count (its last bits may differ from the
// sequential reference).
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr int64_t k_par_min = 1 << 15;

template <class T>
GPUMIX_INLINE double sum_body(const T* a, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; i++) acc += to_f32(a[i]);
  return acc;
}
template <class T>
GPUMIX_INLINE double sum_squares_body(const T* a, int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; i++) {
    const double x = to_f32(a[i]);
    acc += x * x;
  }
  return acc;
}

// The variants return through *out: GPUMIX_ISA_VARIANTS makes void functions.
template <class T>
GPUMIX_INLINE void sum_into(double* out, const T* a, int64_t n) { *out = sum_body(a, n); }
template <class T>
GPUMIX_INLINE void sum_squares_into(double* out, const T* a, int64_t n) { *out = sum_squares_body(a, n); }
GPUMIX_ISA_VARIANTS(sum_f32, sum_into, (double* o, const float* a, int64_t n), (o, a, n))
GPUMIX_ISA_VARIANTS(sum_bf16, sum_into, (double* o, const bf16* a, int64_t n), (o, a, n))
GPUMIX_ISA_VARIANTS(sum_squares_f32, sum_squares_into, (double* o, const float* a, int64_t n), (o, a, n))
GPUMIX_ISA_VARIANTS(sum_squares_bf16, sum_squares_into, (double* o, const bf16* a, int64_t n), (o, a, n))

template <class T>
double reduce(void (*range_sum)(double*, const T*, int64_t), const T* a, int64_t n) {
  std::vector<double> partial(omp_get_max_threads(), 0.0);
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    range_sum(&partial[omp_get_thread_num()], a + i0, i1 - i0);
  });
  double acc = 0.0;
  for (double p : partial) acc += p;
  return acc;
}

}  // namespace

double sum(const float* a, int64_t n) { return reduce(sum_f32, a, n); }
double sum(const bf16* a, int64_t n) { return reduce(sum_bf16, a, n); }
double sum_squares(const float* a, int64_t n) { return reduce(sum_squares_f32, a, n); }
double sum_squares(const bf16* a, int64_t n) { return reduce(sum_squares_bf16, a, n); }

}  // namespace gpumix::kernels::cpu
