// Reductions, accumulated in double. Thread partial sums combine in an unspecified order,
// so the last bits may differ from the sequential reference.
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr int64_t k_par_min = 1 << 15;
}  // namespace

double sum(const float* a, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) acc += a[i];
  return acc;
}

double sum_squares(const float* a, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) acc += (double)a[i] * a[i];
  return acc;
}

}  // namespace gpumix::kernels::cpu
