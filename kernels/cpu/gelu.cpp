// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Computed as x * sigmoid(2u), the same function: 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)),
// which avoids the cancellation of 1 + tanh(u) for negative x and vectorises with exp_vec.
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr float k_sqrt_2_over_pi = 0.7978845608028654f;
constexpr int64_t k_par_min = 1 << 14;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) {
    const float x = inp[i];
    const float u = k_sqrt_2_over_pi * (x + 0.044715f * x * x * x);
    out[i] = x / (1.0f + exp_vec(-2.0f * u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
  for (int64_t i = 0; i < n; i++) {
    const float x = inp[i];
    const float u = k_sqrt_2_over_pi * (x + 0.044715f * x * x * x);
    const float s = 1.0f / (1.0f + exp_vec(-2.0f * u));  // 0.5 (1 + tanh u)
    const float du = k_sqrt_2_over_pi * (1.0f + 3.0f * 0.044715f * x * x);
    // d/dx [x s] = s + x * 0.5 (1 - tanh^2 u) du, with 1 - tanh^2 = 4 s (1 - s)
    dinp[i] += (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

}  // namespace gpumix::kernels::cpu
