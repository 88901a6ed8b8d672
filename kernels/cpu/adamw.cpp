// AdamW (PyTorch semantics): decoupled weight decay, bias-corrected moments, on fp32 master
// weights and moments; optionally writes the bf16 compute copy of the weights in the same
// pass (one read of the weights instead of two).
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr int64_t k_par_min = 1 << 14;

struct Coefs {
  float lr, beta1, beta2, eps, bc1, bc2, decay;
};

template <bool Copy>
GPUMIX_INLINE void update(float* param, bf16* param_bf16, const float* grad, float* m,
                          float* v, int64_t n, const Coefs& k) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const float g = grad[i];
    const float mi = k.beta1 * m[i] + (1.0f - k.beta1) * g;
    const float vi = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] * k.decay - k.lr * (mi / k.bc1) / (std::sqrt(vi / k.bc2) + k.eps);
    param[i] = p;
    if (Copy) param_bf16[i] = from_f32<bf16>(p);
  }
}

GPUMIX_INLINE void update_body(float* param, bf16* param_bf16, const float* grad, float* m,
                               float* v, int64_t n, const Coefs& k) {
  if (param_bf16)
    update<true>(param, param_bf16, grad, m, v, n, k);
  else
    update<false>(param, nullptr, grad, m, v, n, k);
}

GPUMIX_ISA_VARIANTS(update_range, update_body,
                    (float* p, bf16* pb, const float* g, float* m, float* v, int64_t n, const Coefs& k),
                    (p, pb, g, m, v, n, k))

}  // namespace

void adamw_step(float* param, bf16* param_bf16, const float* grad, float* m, float* v,
                int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                int step) {
  // Bias corrections once, in double: beta2^step is close to 1 for small steps.
  const Coefs k{lr, beta1, beta2, eps, (float)(1.0 - std::pow((double)beta1, step)),
                (float)(1.0 - std::pow((double)beta2, step)), 1.0f - lr * weight_decay};
  parallel_ranges(n, 64, n >= k_par_min, [&](int64_t i0, int64_t i1) {
    update_range(param + i0, param_bf16 ? param_bf16 + i0 : nullptr, grad + i0, m + i0, v + i0,
                 i1 - i0, k);
  });
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int step) {
  adamw_step(param, nullptr, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
}

}  // namespace gpumix::kernels::cpu
