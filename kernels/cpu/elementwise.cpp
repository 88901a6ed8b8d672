// Elementwise kernels, fill and fp32 <-> bf16 conversion, in fp32 and bf16 storage. Each
// body is one template; GPUMIX_ISA_VARIANTS compiles it for AVX-512 and for baseline
// x86-64. Memory-bound: threads only pay off on arrays larger than a cache.
#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr int64_t k_par_min = 1 << 15;

template <class T>
GPUMIX_INLINE void add_body(T* out, const T* a, const T* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}
template <class T>
GPUMIX_INLINE void scale_body(T* out, const T* a, float s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = from_f32<T>(to_f32(a[i]) * s);
}
template <class T, class A>
GPUMIX_INLINE void axpy_body(T* out, const A* a, float s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = from_f32<T>(to_f32(out[i]) + s * to_f32(a[i]));
}
template <class T>
GPUMIX_INLINE void fill_body(T* out, float value, int64_t n) {
  const T v = from_f32<T>(value);
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = v;
}
GPUMIX_INLINE void to_bf16_body(bf16* out, const float* in, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = from_f32<bf16>(in[i]);
}
GPUMIX_INLINE void to_f32_body(float* out, const bf16* in, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = to_f32(in[i]);
}

GPUMIX_ISA_VARIANTS(add_f32, add_body, (float* o, const float* a, const float* b, int64_t n), (o, a, b, n))
GPUMIX_ISA_VARIANTS(add_bf16, add_body, (bf16* o, const bf16* a, const bf16* b, int64_t n), (o, a, b, n))
GPUMIX_ISA_VARIANTS(scale_f32, scale_body, (float* o, const float* a, float s, int64_t n), (o, a, s, n))
GPUMIX_ISA_VARIANTS(scale_bf16, scale_body, (bf16* o, const bf16* a, float s, int64_t n), (o, a, s, n))
GPUMIX_ISA_VARIANTS(axpy_f32, axpy_body, (float* o, const float* a, float s, int64_t n), (o, a, s, n))
GPUMIX_ISA_VARIANTS(axpy_bf16, axpy_body, (bf16* o, const bf16* a, float s, int64_t n), (o, a, s, n))
GPUMIX_ISA_VARIANTS(axpy_f32_bf16, axpy_body, (float* o, const bf16* a, float s, int64_t n), (o, a, s, n))
GPUMIX_ISA_VARIANTS(fill_f32, fill_body, (float* o, float v, int64_t n), (o, v, n))
GPUMIX_ISA_VARIANTS(fill_bf16, fill_body, (bf16* o, float v, int64_t n), (o, v, n))
GPUMIX_ISA_VARIANTS(convert_to_bf16, to_bf16_body, (bf16* o, const float* in, int64_t n), (o, in, n))
GPUMIX_ISA_VARIANTS(convert_to_f32, to_f32_body, (float* o, const bf16* in, int64_t n), (o, in, n))

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { add_f32(out + i0, a + i0, b + i0, i1 - i0); });
}
void add(bf16* out, const bf16* a, const bf16* b, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { add_bf16(out + i0, a + i0, b + i0, i1 - i0); });
}
void scale(float* out, const float* a, float s, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { scale_f32(out + i0, a + i0, s, i1 - i0); });
}
void scale(bf16* out, const bf16* a, float s, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { scale_bf16(out + i0, a + i0, s, i1 - i0); });
}
void axpy(float* out, const float* a, float s, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { axpy_f32(out + i0, a + i0, s, i1 - i0); });
}
void axpy(bf16* out, const bf16* a, float s, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { axpy_bf16(out + i0, a + i0, s, i1 - i0); });
}
void axpy(float* out, const bf16* a, float s, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { axpy_f32_bf16(out + i0, a + i0, s, i1 - i0); });
}
void fill(float* out, float value, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { fill_f32(out + i0, value, i1 - i0); });
}
void fill(bf16* out, float value, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { fill_bf16(out + i0, value, i1 - i0); });
}
void f32_to_bf16(bf16* out, const float* in, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { convert_to_bf16(out + i0, in + i0, i1 - i0); });
}
void bf16_to_f32(float* out, const bf16* in, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { convert_to_f32(out + i0, in + i0, i1 - i0); });
}
// f16: the scalar conversion (no ISA variants: a storage format on the CPU, not a hot path).
void f32_to_f16(f16* out, const float* in, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) out[i] = f16(in[i]);
  });
}
void f16_to_f32(float* out, const f16* in, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) out[i] = (float)in[i];
  });
}

}  // namespace gpumix::kernels::cpu
