// AdamW (PyTorch semantics): decoupled weight decay, bias-corrected moments.
#include <cmath>

#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int step) {
  // Bias corrections once, in double: beta2^step is close to 1 for small steps.
  const float bc1 = (float)(1.0 - std::pow((double)beta1, step));
  const float bc2 = (float)(1.0 - std::pow((double)beta2, step));
  const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; i++) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - lr * (mi / bc1) / (std::sqrt(vi / bc2) + eps);
  }
}

}  // namespace gpumix::kernels::cpu
