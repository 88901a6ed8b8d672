// AdamW on fp32 master weights, one pass: reads param, grad, m, v; writes param, m, v and
// the 16-bit copy of param (bf16 or f16). Four elements per thread with 16-byte accesses (8 for the
// copy) when aligned, else scalar; grid-stride loops. Same order of operations as the
// CPU reference: decoupled weight decay first, then the bias-corrected Adam update.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace gpumix::kernels::cuda {

namespace {

struct AdamParams {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
};

__device__ __forceinline__ float adamw_one(float p, float g, float& m, float& v,
                                           const AdamParams& a) {
  p -= a.lr * a.weight_decay * p;
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
  const float mhat = m / a.bc1;
  const float vhat = v / a.bc2;
  return p - a.lr * mhat / (sqrtf(vhat) + a.eps);
}

template <class H>
__global__ void adamw_vec_kernel(float4* param, uint2* param_half, const float4* grad, float4* m,
                                 float4* v, int64_t nvec, AdamParams a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec;
       i += (int64_t)gridDim.x * blockDim.x) {
    float4 p = param[i], mm = m[i], vv = v[i];
    const float4 g = grad[i];
    p.x = adamw_one(p.x, g.x, mm.x, vv.x, a);
    p.y = adamw_one(p.y, g.y, mm.y, vv.y, a);
    p.z = adamw_one(p.z, g.z, mm.z, vv.z, a);
    p.w = adamw_one(p.w, g.w, mm.w, vv.w, a);
    param[i] = p;
    m[i] = mm;
    v[i] = vv;
    if (param_half) {
      uint2 h;
      h.x = detail::pack2<H>(p.x, p.y);
      h.y = detail::pack2<H>(p.z, p.w);
      param_half[i] = h;
    }
  }
}

template <class H>
__global__ void adamw_kernel(float* param, H* param_half, const float* grad, float* m,
                             float* v, int64_t start, int64_t n, AdamParams a) {
  for (int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float mm = m[i], vv = v[i];
    const float p = adamw_one(param[i], grad[i], mm, vv, a);
    param[i] = p;
    m[i] = mm;
    v[i] = vv;
    if (param_half) param_half[i] = detail::from_f32<H>(p);
  }
}

template <class H>
void adamw_step_t(float* param, H* param_half, const float* grad, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                  cudaStream_t stream) {
  if (n <= 0) return;
  AdamParams a;
  a.lr = lr;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.weight_decay = weight_decay;
  a.bc1 = (float)(1.0 - std::pow((double)beta1, step));
  a.bc2 = (float)(1.0 - std::pow((double)beta2, step));
  const bool vec = detail::aligned16(param) && detail::aligned16(grad) && detail::aligned16(m) &&
                   detail::aligned16(v) && ((uintptr_t)param_half & 7u) == 0;
  const int64_t nvec = vec ? n / 4 : 0;
  if (nvec > 0) {
    auto* adamw_vec = &adamw_vec_kernel<H>;
    GPUMIX_LAUNCH(adamw_vec, detail::grid_for(nvec, 256), 256, 0, stream,
        (float4*)param, (uint2*)param_half, (const float4*)grad, (float4*)m, (float4*)v, nvec, a);
    CUDA_CHECK_LAST();
  }
  if (nvec * 4 < n) {
    auto* adamw = &adamw_kernel<H>;
    GPUMIX_LAUNCH(adamw, detail::grid_for(n - nvec * 4, 256), 256, 0, stream,
        param, param_half, grad, m, v, nvec * 4, n, a);
    CUDA_CHECK_LAST();
  }
}

}  // namespace

void adamw_step(float* param, bf16* param_bf16, const float* grad, float* m, float* v, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                cudaStream_t stream) {
  adamw_step_t(param, param_bf16, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, stream);
}
void adamw_step(float* param, f16* param_f16, const float* grad, float* m, float* v, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                cudaStream_t stream) {
  adamw_step_t(param, param_f16, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, stream);
}

}  // namespace gpumix::kernels::cuda
