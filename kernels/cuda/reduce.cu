// Sum and sum of squares into one double, deterministic: a fixed grid of blocks (a
// function of the device's SM count) accumulates in double per thread, reduces each
// block with warp shuffles, writes one partial per block; one block then adds the
// partials in a fixed order.
#include "kernels/cuda/map.cuh"

namespace gpumix::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum; the result is valid in thread 0.
__device__ double block_sum_d(double v) {
  GPUMIX_SHARED(double, sh, [32]);
  v = warp_sum_d(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) / 32;
  v = (warp == 0 && lane < nwarps) ? sh[lane] : 0.0;
  if (warp == 0) v = warp_sum_d(v);
  return v;
}

template <bool SQUARE, typename T>
__global__ void reduce_partial_kernel(double* partial, const T* a, int64_t n) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double x = detail::lds(a + i);
    acc += SQUARE ? x * x : x;
  }
  acc = block_sum_d(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void reduce_final_kernel(double* out, const double* partial, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum_d(acc);
  if (threadIdx.x == 0) *out = acc;
}

template <bool SQUARE, typename T>
void reduce(double* out, const T* a, int64_t n, cudaStream_t stream) {
  const int blocks = n > 0 ? detail::grid_for(n, kThreads) : 1;
  double* partial = (double*)detail::scratch_alloc(sizeof(double) * blocks, stream);
  if (n > 0) {
    auto* reduce_partial = &reduce_partial_kernel<SQUARE, T>;
    GPUMIX_LAUNCH(reduce_partial, blocks, kThreads, 0, stream, partial, a, n);
    CUDA_CHECK_LAST();
  }
  GPUMIX_LAUNCH(reduce_final_kernel, 1, 1024, 0, stream, out, partial, n > 0 ? blocks : 0);
  CUDA_CHECK_LAST();
  detail::scratch_free(partial, stream);
}

template <bool SQUARE>
double reduce_sync(const float* a, int64_t n, cudaStream_t stream) {
  double* d = (double*)detail::scratch_alloc(sizeof(double), stream);
  reduce<SQUARE>(d, a, n, stream);
  double h = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, stream));
  detail::scratch_free(d, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return h;
}

__global__ void scale_to_f32_kernel(float* out, const double* in, double scale) {
  *out = (float)(scale * *in);
}

}  // namespace

void scale_to_f32(float* out, const double* in, double scale, cudaStream_t stream) {
  GPUMIX_LAUNCH(scale_to_f32_kernel, 1, 1, 0, stream, out, in, scale);
  CUDA_CHECK_LAST();
}

void sum(double* out, const float* a, int64_t n, cudaStream_t stream) {
  reduce<false>(out, a, n, stream);
}
void sum(double* out, const bf16* a, int64_t n, cudaStream_t stream) {
  reduce<false>(out, a, n, stream);
}
void sum(double* out, const f16* a, int64_t n, cudaStream_t stream) {
  reduce<false>(out, a, n, stream);
}
void sum_squares(double* out, const float* a, int64_t n, cudaStream_t stream) {
  reduce<true>(out, a, n, stream);
}
void sum_squares(double* out, const bf16* a, int64_t n, cudaStream_t stream) {
  reduce<true>(out, a, n, stream);
}
void sum_squares(double* out, const f16* a, int64_t n, cudaStream_t stream) {
  reduce<true>(out, a, n, stream);
}
double sum_sync(const float* a, int64_t n, cudaStream_t stream) {
  return reduce_sync<false>(a, n, stream);
}
double sum_squares_sync(const float* a, int64_t n, cudaStream_t stream) {
  return reduce_sync<true>(a, n, stream);
}

}  // namespace gpumix::kernels::cuda
