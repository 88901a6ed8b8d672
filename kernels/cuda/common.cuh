// Internal helpers shared by the .cu files of kernels/cuda (not installed).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/half_types.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/launch.cuh"

namespace gpumix::kernels::cuda::detail {

// The 16-bit storage formats on the device (kernels/half_types.h: bf16, f16), overloaded so
// that one kernel body serves both: to_f32 widens (exact), from_f32<H> rounds to nearest
// even, with the host's bit arithmetic (kernels/half_types.h), so both sides round alike.
// Kernels templated over their 16-bit format take `H` (bf16 or f16).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 h) { return __uint_as_float((uint32_t)h.bits << 16); }
__device__ __forceinline__ float to_f32(f16 h) { return f16_bits_to_f32(h.bits); }
template <class H>
__device__ __forceinline__ H from_f32(float f);
template <>
__device__ __forceinline__ float from_f32<float>(float f) { return f; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16::from_bits((uint16_t)((u >> 16) | 0x0040u));  // NaN
  return bf16::from_bits((uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float f) { return f16::from_bits(f32_to_f16_bits(f)); }

// Two values of a 16-bit format in one 32-bit register, the first in the low half (the
// layout of a tensor-core fragment register and of a 4-byte load).
template <class H>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return (uint32_t)from_f32<H>(lo).bits | ((uint32_t)from_f32<H>(hi).bits << 16);
}
template <class H>
__device__ __forceinline__ float lo_of(uint32_t r) { return to_f32(H::from_bits((uint16_t)(r & 0xffffu))); }
template <class H>
__device__ __forceinline__ float hi_of(uint32_t r) { return to_f32(H::from_bits((uint16_t)(r >> 16))); }

// 8 values of a 16-bit format in one 16-byte word.
template <class H>
struct alignas(16) Half8 {
  H h[8];
};
template <class H>
__device__ __forceinline__ void unpack8(const Half8<H>& p, float* f) {
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f32(p.h[i]);
}
template <class H>
__device__ __forceinline__ Half8<H> pack8(const float* f) {
  Half8<H> p;
#pragma unroll
  for (int i = 0; i < 8; ++i) p.h[i] = from_f32<H>(f[i]);
  return p;
}

inline bool aligned16(const void* p) { return p == nullptr || ((uintptr_t)p & 15u) == 0; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

inline int ceil_div(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

// Blocks for a grid-stride loop over n items with `threads` per block: enough to fill the
// device several times over, no more than needed.
int grid_for(int64_t n, int threads);

// Number of multiprocessors of the current device (cached per device).
int sm_count();

// Stream-ordered scratch memory from a private pool of the current device and this stream
// (device.cu says why per stream; release threshold: unlimited, so freed blocks are kept for
// reuse). Free with scratch_free on the same stream once the kernels using it are enqueued.
void* scratch_alloc(size_t bytes, cudaStream_t stream);
void scratch_free(void* p, cudaStream_t stream);
void scratch_trim_all();  // release_resources

// Column reduction, deterministic: for every column c < C, dst[c] += sum over rows r < N
// of f(r, c) (NV = 1 or 2 outputs; f returns them through out[]). Two launches: partial
// sums of row chunks into scratch, then a fixed-order sum of the partials.
template <int NV, typename F>
__global__ void colreduce_partial_kernel(float* partial, int N, int C, int rows_per_chunk, F f) {
  GPUMIX_SHARED(float, sh, [NV][8][33]);
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float acc[NV];
#pragma unroll
  for (int v = 0; v < NV; ++v) acc[v] = 0.0f;
  if (c < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float out[NV];
      f(r, c, out);
#pragma unroll
      for (int v = 0; v < NV; ++v) acc[v] += out[v];
    }
  }
#pragma unroll
  for (int v = 0; v < NV; ++v) sh[v][threadIdx.y][threadIdx.x] = acc[v];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      float s = 0.0f;
      for (int y = 0; y < 8; ++y) s += sh[v][y][threadIdx.x];
      partial[((size_t)v * gridDim.y + blockIdx.y) * C + c] = s;
    }
  }
}

template <int NV>
__global__ void colreduce_final_kernel(float* dst0, float* dst1, const float* partial,
                                       int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    float* dst = v == 0 ? dst0 : dst1;
    if (dst == nullptr) continue;
    float s = 0.0f;
    for (int k = 0; k < chunks; ++k) s += partial[((size_t)v * chunks + k) * C + c];
    dst[c] += s;
  }
}

template <int NV, typename F>
void colreduce(float* dst0, float* dst1, int N, int C, F f, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int rows_per_chunk = 64;
  const int chunks = ceil_div(N, rows_per_chunk);
  float* partial = (float*)scratch_alloc(sizeof(float) * NV * (size_t)chunks * C, stream);
  const dim3 grid(ceil_div(C, 32), chunks);
  auto* colreduce_partial = &colreduce_partial_kernel<NV, F>;
  GPUMIX_LAUNCH(colreduce_partial, grid, dim3(32, 8), 0, stream, partial, N, C,
                                                                     rows_per_chunk, f);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(colreduce_final_kernel<NV>, ceil_div(C, 256), 256, 0, stream, dst0, dst1, partial,
                                                                    chunks, C);
  CUDA_CHECK_LAST();
  scratch_free(partial, stream);
}

}  // namespace gpumix::kernels::cuda::detail
