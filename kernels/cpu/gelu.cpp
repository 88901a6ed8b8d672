// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), in
// fp32 and bf16 storage, computed in fp32. Computed as x * sigmoid(2u), the same function:
// 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)), which avoids the cancellation of 1 + tanh(u) for
// negative x and vectorises with exp_vec.
#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr float k_sqrt_2_over_pi = 0.7978845608028654f;
constexpr int64_t k_par_min = 1 << 14;

template <class T>
GPUMIX_INLINE void gelu_forward_body(T* out, const T* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const float x = to_f32(inp[i]);
    const float u = k_sqrt_2_over_pi * (x + 0.044715f * x * x * x);
    out[i] = from_f32<T>(x / (1.0f + exp_vec(-2.0f * u)));
  }
}

template <class T>
GPUMIX_INLINE void gelu_backward_body(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const float x = to_f32(inp[i]);
    const float u = k_sqrt_2_over_pi * (x + 0.044715f * x * x * x);
    const float s = 1.0f / (1.0f + exp_vec(-2.0f * u));  // 0.5 (1 + tanh u)
    const float du = k_sqrt_2_over_pi * (1.0f + 3.0f * 0.044715f * x * x);
    // d/dx [x s] = s + x * 0.5 (1 - tanh^2 u) du, with 1 - tanh^2 = 4 s (1 - s)
    dinp[i] = from_f32<T>(to_f32(dinp[i]) + (s + 2.0f * x * s * (1.0f - s) * du) * to_f32(dout[i]));
  }
}

// The AVX-512 path, written out: the loops above compiled for AVX-512 cost ~2x these
// instructions (exp_vec's exponent bits, the compiler's remainder loops). The same formulas
// (exp16 for exp_vec: a few ulp apart), one vdivps for the division.
template <class T>
GPUMIX_TARGET_AVX512 void gelu_forward_avx512(T* out, const T* inp, int64_t n) {
  const __m512 c1 = _mm512_set1_ps(-2.0f * k_sqrt_2_over_pi), c3 = _mm512_set1_ps(-2.0f * k_sqrt_2_over_pi * 0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes_below(n, i);
    const __m512 x = load16(inp + i, m);
    const __m512 minus_2u = x * _mm512_fmadd_ps(x * x, c3, c1);
    store16(out + i, _mm512_div_ps(x, exp16(minus_2u) + _mm512_set1_ps(1.0f)), m);
  }
}

template <class T>
GPUMIX_TARGET_AVX512 void gelu_backward_avx512(T* dinp, const T* inp, const T* dout, int64_t n) {
  const __m512 c1 = _mm512_set1_ps(-2.0f * k_sqrt_2_over_pi), c3 = _mm512_set1_ps(-2.0f * k_sqrt_2_over_pi * 0.044715f);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes_below(n, i);
    const __m512 x = load16(inp + i, m), x2 = x * x;
    const __m512 s = _mm512_div_ps(one, exp16(x * _mm512_fmadd_ps(x2, c3, c1)) + one);  // 0.5 (1 + tanh u)
    const __m512 du = _mm512_set1_ps(k_sqrt_2_over_pi) * _mm512_fmadd_ps(x2, _mm512_set1_ps(3.0f * 0.044715f), one);
    const __m512 grad = _mm512_fmadd_ps(_mm512_set1_ps(2.0f) * x * s * (one - s), du, s);
    store16(dinp + i, _mm512_fmadd_ps(grad, load16(dout + i, m), load16(dinp + i, m)), m);
  }
}

// The path cpu_isa() names.
template <class T>
void gelu_fwd(T* out, const T* inp, int64_t n) {
  if (cpu_isa() >= Isa::avx512)
    gelu_forward_avx512(out, inp, n);
  else
    gelu_forward_body(out, inp, n);
}
template <class T>
void gelu_bwd(T* dinp, const T* inp, const T* dout, int64_t n) {
  if (cpu_isa() >= Isa::avx512)
    gelu_backward_avx512(dinp, inp, dout, n);
  else
    gelu_backward_body(dinp, inp, dout, n);
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { gelu_fwd(out + i0, inp + i0, i1 - i0); });
}
void gelu_forward(bf16* out, const bf16* inp, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { gelu_fwd(out + i0, inp + i0, i1 - i0); });
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    gelu_bwd(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    gelu_bwd(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}

}  // namespace gpumix::kernels::cpu
