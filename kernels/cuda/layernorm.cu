// LayerNorm over the last axis, 16-bit (bf16 or f16) in/out, fp32 statistics; one source
// templated over the format H.
// Forward: one warp per row; three sweeps over the row (sum, centred sum of squares,
// write), the re-reads hitting L1/L2; 16-byte accesses when C % 8 == 0 and the pointers
// are 16-byte aligned.
// Backward: dinp by one warp per row (two sweeps: the two row means, then the write);
// dweight and dbias by the deterministic column reduction (common.cuh).
#include "kernels/cuda/common.cuh"

namespace gpumix::kernels::cuda {

namespace {

using detail::Half8;
using detail::to_f32;
using detail::from_f32;

constexpr float kEps = 1e-5f;
constexpr int kThreads = 256;  // 8 rows per block

template <class H, bool VEC>
__global__ void layernorm_forward_kernel(H* __restrict__ out, float* __restrict__ mean,
                                         float* __restrict__ rstd, const H* __restrict__ inp,
                                         const H* __restrict__ weight,
                                         const H* __restrict__ bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const H* x = inp + (int64_t)row * C;
  H* y = out + (int64_t)row * C;
  float s = 0.0f;
  if (VEC) {
    for (int i = lane * 8; i < C; i += 32 * 8) {
      float f[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) s += f[j];
    }
  } else {
    for (int i = lane; i < C; i += 32) s += to_f32(x[i]);
  }
  const float m = detail::warp_sum(s) / C;
  float v = 0.0f;
  if (VEC) {
    for (int i = lane * 8; i < C; i += 32 * 8) {
      float f[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) v += (f[j] - m) * (f[j] - m);
    }
  } else {
    for (int i = lane; i < C; i += 32) {
      const float d = to_f32(x[i]) - m;
      v += d * d;
    }
  }
  const float rs = rsqrtf(detail::warp_sum(v) / C + kEps);
  if (VEC) {
    for (int i = lane * 8; i < C; i += 32 * 8) {
      float f[8], w[8], b[8], o[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
      detail::unpack8(*(const Half8<H>*)(weight + i), w);
      detail::unpack8(*(const Half8<H>*)(bias + i), b);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = (f[j] - m) * rs * w[j] + b[j];
      *(Half8<H>*)(y + i) = detail::pack8<H>(o);
    }
  } else {
    for (int i = lane; i < C; i += 32)
      y[i] = from_f32<H>((to_f32(x[i]) - m) * rs * to_f32(weight[i]) + to_f32(bias[i]));
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = rs;
  }
}

template <class H, bool VEC>
__global__ void layernorm_backward_dinp_kernel(H* __restrict__ dinp,
                                               const H* __restrict__ dout,
                                               const H* __restrict__ inp,
                                               const H* __restrict__ weight,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const int64_t off = (int64_t)row * C;
  const float m = mean[row], rs = rstd[row];
  // Sums of dnorm = dout * weight and of dnorm * xhat over the row.
  float s1 = 0.0f, s2 = 0.0f;
  if (VEC) {
    for (int i = lane * 8; i < C; i += 32 * 8) {
      float x[8], g[8], w[8];
      detail::unpack8(*(const Half8<H>*)(inp + off + i), x);
      detail::unpack8(*(const Half8<H>*)(dout + off + i), g);
      detail::unpack8(*(const Half8<H>*)(weight + i), w);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float dn = g[j] * w[j];
        s1 += dn;
        s2 += dn * (x[j] - m) * rs;
      }
    }
  } else {
    for (int i = lane; i < C; i += 32) {
      const float dn = to_f32(dout[off + i]) * to_f32(weight[i]);
      s1 += dn;
      s2 += dn * (to_f32(inp[off + i]) - m) * rs;
    }
  }
  const float mean_dn = detail::warp_sum(s1) / C;
  const float mean_dn_xhat = detail::warp_sum(s2) / C;
  if (VEC) {
    for (int i = lane * 8; i < C; i += 32 * 8) {
      float x[8], g[8], w[8], d[8];
      detail::unpack8(*(const Half8<H>*)(inp + off + i), x);
      detail::unpack8(*(const Half8<H>*)(dout + off + i), g);
      detail::unpack8(*(const Half8<H>*)(weight + i), w);
      detail::unpack8(*(const Half8<H>*)(dinp + off + i), d);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float xhat = (x[j] - m) * rs;
        d[j] += (g[j] * w[j] - mean_dn - xhat * mean_dn_xhat) * rs;
      }
      *(Half8<H>*)(dinp + off + i) = detail::pack8<H>(d);
    }
  } else {
    for (int i = lane; i < C; i += 32) {
      const float xhat = (to_f32(inp[off + i]) - m) * rs;
      const float dn = to_f32(dout[off + i]) * to_f32(weight[i]);
      dinp[off + i] = from_f32<H>(to_f32(dinp[off + i]) + (dn - mean_dn - xhat * mean_dn_xhat) * rs);
    }
  }
}

// out[0]: dout * xhat (dweight), out[1]: dout (dbias).
template <class H>
struct LnParamGrad {
  const H* dout;
  const H* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int r, int c, float* out) const {
    const int64_t i = (int64_t)r * C + c;
    const float g = to_f32(dout[i]);
    out[0] = g * (to_f32(inp[i]) - mean[r]) * rstd[r];
    out[1] = g;
  }
};

template <class H>
void layernorm_forward_t(H* out, float* mean, float* rstd, const H* inp, const H* weight,
                       const H* bias, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int grid = detail::ceil_div(N, kThreads / 32);
  const bool vec = C % 8 == 0 && detail::aligned16(out) && detail::aligned16(inp) &&
                   detail::aligned16(weight) && detail::aligned16(bias);
  auto* layernorm_forward = vec ? &layernorm_forward_kernel<H, true> : &layernorm_forward_kernel<H, false>;
  GPUMIX_LAUNCH(layernorm_forward, grid, kThreads, 0, stream, out, mean, rstd, inp, weight, bias, N, C);
  CUDA_CHECK_LAST();
}

template <class H>
void layernorm_backward_t(H* dinp, float* dweight, float* dbias, const H* dout,
                        const H* inp, const H* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  if (dinp) {
    const int grid = detail::ceil_div(N, kThreads / 32);
    const bool vec = C % 8 == 0 && detail::aligned16(dinp) && detail::aligned16(dout) &&
                     detail::aligned16(inp) && detail::aligned16(weight);
    auto* layernorm_backward_dinp = vec ? &layernorm_backward_dinp_kernel<H, true> : &layernorm_backward_dinp_kernel<H, false>;
    GPUMIX_LAUNCH(layernorm_backward_dinp, grid, kThreads, 0, stream, dinp, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAST();
  }
  if (dweight || dbias)
    detail::colreduce<2>(dweight, dbias, N, C, LnParamGrad<H>{dout, inp, mean, rstd, C}, stream);
}

}  // namespace

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, cudaStream_t stream) {
  layernorm_forward_t(out, mean, rstd, inp, weight, bias, N, C, stream);
}
void layernorm_forward(f16* out, float* mean, float* rstd, const f16* inp, const f16* weight,
                       const f16* bias, int N, int C, cudaStream_t stream) {
  layernorm_forward_t(out, mean, rstd, inp, weight, bias, N, C, stream);
}
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  layernorm_backward_t(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream);
}
void layernorm_backward(f16* dinp, float* dweight, float* dbias, const f16* dout, const f16* inp,
                        const f16* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  layernorm_backward_t(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream);
}

}  // namespace gpumix::kernels::cuda
