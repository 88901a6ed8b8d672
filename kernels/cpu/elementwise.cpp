// Elementwise kernels and fp32 <-> bf16 conversion. Memory-bound: threads only pay off
// on arrays larger than a cache.
#include "kernels/bf16.h"
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr int64_t k_par_min = 1 << 15;
}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void scale(float* out, const float* a, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] * s;
}

void axpy(float* out, const float* a, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) out[i] += s * a[i];
}

void f32_to_bf16(uint16_t* out, const float* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16_bits(in[i]);
}

void bf16_to_f32(float* out, const uint16_t* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) out[i] = bf16_bits_to_f32(in[i]);
}

}  // namespace gpumix::kernels::cpu
