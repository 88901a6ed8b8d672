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

GPUMIX_ISA_VARIANTS(gelu_fwd_f32, gelu_forward_body, (float* o, const float* x, int64_t n), (o, x, n))
GPUMIX_ISA_VARIANTS(gelu_fwd_bf16, gelu_forward_body, (uint16_t* o, const uint16_t* x, int64_t n), (o, x, n))
GPUMIX_ISA_VARIANTS(gelu_bwd_f32, gelu_backward_body,
                    (float* dx, const float* x, const float* dy, int64_t n), (dx, x, dy, n))
GPUMIX_ISA_VARIANTS(gelu_bwd_bf16, gelu_backward_body,
                    (uint16_t* dx, const uint16_t* x, const uint16_t* dy, int64_t n), (dx, x, dy, n))

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { gelu_fwd_f32(out + i0, inp + i0, i1 - i0); });
}
void gelu_forward(uint16_t* out, const uint16_t* inp, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) { gelu_fwd_bf16(out + i0, inp + i0, i1 - i0); });
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    gelu_bwd_f32(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}
void gelu_backward(uint16_t* dinp, const uint16_t* inp, const uint16_t* dout, int64_t n) {
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    gelu_bwd_bf16(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}

}  // namespace gpumix::kernels::cpu
