// Fused softmax + cross-entropy over 16-bit (bf16 or f16) logits (N,V), one block per row;
// one source templated over the format H.
// Forward: one pass; each thread keeps an online (max, sum of exp) over its elements,
// merged across the block; writes lse and the loss. Backward: one pass; recomputes each
// probability from the saved lse (the probabilities are never stored).
// The fused classifier (classifier_kernel): both in one launch, one block per row, the
// row's dlogits written over its logits (the second read of a row hits L2), on logits
// (N,Vp) whose columns [V, Vp) are padding (no class; written 0).
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/common.cuh"

namespace gpumix::kernels::cuda {

namespace {

using detail::Half8;
using detail::to_f32;
using detail::from_f32;

constexpr int kThreads = 512;

struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return MaxSum{m, 0.0f};
  return MaxSum{m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ void online_add(MaxSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * __expf(a.m - x) + 1.0f;  // exp(-inf) = 0 on the first element
    a.m = x;
  } else {
    a.s += __expf(x - a.m);
  }
}

// The block's (max, sum) from each thread's, valid on thread 0: across each warp by
// shuffles, then across the warps through `sh` (kThreads / 32 entries) in warp order.
__device__ __forceinline__ MaxSum block_merge(MaxSum a, MaxSum* sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum b{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
    a = merge(a, b);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) sh[warp] = a;
  __syncthreads();
  MaxSum t = sh[0];
  if (threadIdx.x == 0)
    for (int w = 1; w < (int)(blockDim.x / 32); ++w) t = merge(t, sh[w]);
  return t;
}

template <class H, bool VEC>
__global__ void __launch_bounds__(kThreads) crossentropy_forward_kernel(
    float* __restrict__ losses, float* __restrict__ lse, const H* __restrict__ logits,
    const int32_t* __restrict__ targets, int V, int32_t ignore_index) {
  const int row = blockIdx.x;
  const H* x = logits + (int64_t)row * V;
  MaxSum a{-INFINITY, 0.0f};
  if (VEC) {
    for (int i = threadIdx.x * 8; i < V; i += blockDim.x * 8) {
      float f[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) online_add(a, f[j]);
    }
  } else {
    for (int i = threadIdx.x; i < V; i += blockDim.x) online_add(a, to_f32(x[i]));
  }
  GPUMIX_SHARED(MaxSum, sh, [kThreads / 32]);
  const MaxSum t = block_merge(a, sh);
  if (threadIdx.x == 0) {
    const float l = t.m + logf(t.s);
    lse[row] = l;
    const int32_t target = targets[row];
    losses[row] = target == ignore_index ? 0.0f : l - to_f32(x[target]);
  }
}

template <class H, bool VEC>
__global__ void __launch_bounds__(kThreads) crossentropy_backward_kernel(
    H* dlogits, const H* logits, const float* __restrict__ lse,
    const int32_t* __restrict__ targets, const float* __restrict__ dloss, float factor, int V,
    int32_t ignore_index, bool accumulate) {
  const int row = blockIdx.x;
  const int32_t target = targets[row];
  const bool ignored = target == ignore_index;
  if (ignored && accumulate) return;  // adds nothing
  const float l = lse[row];
  const float scale = ignored ? 0.0f : dloss ? factor * *dloss : factor;
  const H* x = logits + (int64_t)row * V;
  H* d = dlogits + (int64_t)row * V;
  if (VEC) {
    for (int i = threadIdx.x * 8; i < V; i += blockDim.x * 8) {
      float f[8], o[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
      if (accumulate) detail::unpack8(*(const Half8<H>*)(d + i), o);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float g = scale * (__expf(f[j] - l) - (i + j == target ? 1.0f : 0.0f));
        o[j] = accumulate ? o[j] + g : g;
      }
      *(Half8<H>*)(d + i) = detail::pack8<H>(o);
    }
  } else {
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
      const float g = scale * (__expf(to_f32(x[i]) - l) - (i == target ? 1.0f : 0.0f));
      d[i] = from_f32<H>(accumulate ? to_f32(d[i]) + g : g);
    }
  }
}

// One row: the online (max, sum) over the V classes, merged across the block; then, with
// grad, every element of the row (padding included) rewritten as its gradient. With VEC,
// Vp is a multiple of 8 and the row 16-byte aligned: whole vectors, the classes masked.
template <class H, bool VEC>
__global__ void __launch_bounds__(kThreads) classifier_kernel(
    float* __restrict__ losses, float* __restrict__ lse, H* logits, const int32_t* __restrict__ targets,
    float scale, int V, int Vp, int32_t ignore_index, bool grad) {
  const int row = blockIdx.x;
  H* x = logits + (int64_t)row * Vp;
  MaxSum a{-INFINITY, 0.0f};
  if (VEC) {
    for (int i = threadIdx.x * 8; i < V; i += blockDim.x * 8) {
      float f[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (i + j < V) online_add(a, f[j]);
    }
  } else {
    for (int i = threadIdx.x; i < V; i += blockDim.x) online_add(a, to_f32(x[i]));
  }
  GPUMIX_SHARED(MaxSum, sh, [kThreads / 32]);
  GPUMIX_SHARED(float, row_lse, [1]);
  const MaxSum t = block_merge(a, sh);
  const int32_t target = targets[row];
  if (threadIdx.x == 0) {
    const float l = t.m + logf(t.s);
    lse[row] = l;
    row_lse[0] = l;
    losses[row] = target == ignore_index ? 0.0f : l - to_f32(x[target]);  // read before any write
  }
  if (!grad) return;
  __syncthreads();
  const float l = row_lse[0];
  const float s = target == ignore_index ? 0.0f : scale;
  if (VEC) {
    for (int i = threadIdx.x * 8; i < Vp; i += blockDim.x * 8) {
      float f[8];
      detail::unpack8(*(const Half8<H>*)(x + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        f[j] = i + j < V ? s * (__expf(f[j] - l) - (i + j == target ? 1.0f : 0.0f)) : 0.0f;
      *(Half8<H>*)(x + i) = detail::pack8<H>(f);
    }
  } else {
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
      const float g = i < V ? s * (__expf(to_f32(x[i]) - l) - (i == target ? 1.0f : 0.0f)) : 0.0f;
      x[i] = from_f32<H>(g);
    }
  }
}

// d *= *dloss, unless it is 1 (every block returns at once: the loss was backward's root).
template <class H>
__global__ void __launch_bounds__(256) classifier_rescale_kernel(H* d, const float* __restrict__ dloss,
                                                                   int64_t n) {
  const float f = *dloss;
  if (f == 1.0f) return;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    d[i] = from_f32<H>(f * to_f32(d[i]));
}

template <class H>
void crossentropy_forward_t(float* losses, float* lse, const H* logits, const int32_t* targets,
                          int N, int V, int32_t ignore_index, cudaStream_t stream) {
  if (N <= 0) return;
  const bool vec = V % 8 == 0 && detail::aligned16(logits);
  auto* crossentropy_forward = vec ? &crossentropy_forward_kernel<H, true> : &crossentropy_forward_kernel<H, false>;
  GPUMIX_LAUNCH(crossentropy_forward, N, kThreads, 0, stream, losses, lse, logits, targets, V, ignore_index);
  CUDA_CHECK_LAST();
}

template <class H>
void crossentropy_backward_t(H* dlogits, const H* logits, const float* lse,
                           const int32_t* targets, const float* dloss, float scale, int N, int V,
                           int32_t ignore_index, bool accumulate, cudaStream_t stream) {
  if (N <= 0) return;
  const bool vec = V % 8 == 0 && detail::aligned16(logits) && detail::aligned16(dlogits);
  auto* crossentropy_backward = vec ? &crossentropy_backward_kernel<H, true> : &crossentropy_backward_kernel<H, false>;
  GPUMIX_LAUNCH(crossentropy_backward, N, kThreads, 0, stream, dlogits, logits, lse, targets, dloss, scale, V, ignore_index, accumulate);
  CUDA_CHECK_LAST();
}

template <class H>
void classifier_forward_t(float* losses, float* lse, H* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad, cudaStream_t stream) {
  if (N <= 0) return;
  const bool vec = Vp % 8 == 0 && detail::aligned16(logits);
  auto* classifier = vec ? &classifier_kernel<H, true> : &classifier_kernel<H, false>;
  GPUMIX_LAUNCH(classifier, N, kThreads, 0, stream, losses, lse, logits, targets, scale, V, Vp, ignore_index, grad);
  CUDA_CHECK_LAST();
}

template <class H>
void classifier_rescale_t(H* dlogits, const float* dloss, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  auto* classifier_rescale = &classifier_rescale_kernel<H>;
  GPUMIX_LAUNCH(classifier_rescale, (int)blocks, 256, 0, stream, dlogits, dloss, n);
  CUDA_CHECK_LAST();
}

}  // namespace

void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* targets, int N, int V,
                          int32_t ignore_index, cudaStream_t stream) {
  crossentropy_forward_t(losses, lse, logits, targets, N, V, ignore_index, stream);
}
void crossentropy_forward(float* losses, float* lse, const f16* logits, const int32_t* targets, int N, int V,
                          int32_t ignore_index, cudaStream_t stream) {
  crossentropy_forward_t(losses, lse, logits, targets, N, V, ignore_index, stream);
}
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse, const int32_t* targets,
                           const float* dloss, float scale, int N, int V, int32_t ignore_index, bool accumulate,
                           cudaStream_t stream) {
  crossentropy_backward_t(dlogits, logits, lse, targets, dloss, scale, N, V, ignore_index, accumulate, stream);
}
void crossentropy_backward(f16* dlogits, const f16* logits, const float* lse, const int32_t* targets,
                           const float* dloss, float scale, int N, int V, int32_t ignore_index, bool accumulate,
                           cudaStream_t stream) {
  crossentropy_backward_t(dlogits, logits, lse, targets, dloss, scale, N, V, ignore_index, accumulate, stream);
}
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V, int32_t ignore_index, bool accumulate, cudaStream_t stream) {
  crossentropy_backward_t(dlogits, logits, lse, targets, nullptr, dloss, N, V, ignore_index, accumulate, stream);
}
void crossentropy_backward(f16* dlogits, const f16* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V, int32_t ignore_index, bool accumulate, cudaStream_t stream) {
  crossentropy_backward_t(dlogits, logits, lse, targets, nullptr, dloss, N, V, ignore_index, accumulate, stream);
}

// ---- the fused classifier ----------------------------------------------------------------

void classifier_forward(float* losses, float* lse, bf16* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad, cudaStream_t stream) {
  classifier_forward_t(losses, lse, logits, targets, scale, N, V, Vp, ignore_index, grad, stream);
}
void classifier_forward(float* losses, float* lse, f16* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad, cudaStream_t stream) {
  classifier_forward_t(losses, lse, logits, targets, scale, N, V, Vp, ignore_index, grad, stream);
}
void classifier_rescale(bf16* dlogits, const float* dloss, int64_t n, cudaStream_t stream) {
  classifier_rescale_t(dlogits, dloss, n, stream);
}
void classifier_rescale(f16* dlogits, const float* dloss, int64_t n, cudaStream_t stream) {
  classifier_rescale_t(dlogits, dloss, n, stream);
}

}  // namespace gpumix::kernels::cuda
