// Internal: elementwise maps over fp32 / bf16 / f16 arrays. out[i] = op(a[i], b[i], out[i]) with
// a and b optional (read as 0 when null) and out read only when Op::kReadsOut. Eight
// elements per thread with 16-byte accesses when every pointer is 16-byte aligned, then a
// scalar tail; grid-stride loops. out may alias a or b (each element is read and written
// by the same thread).
#pragma once

#include "kernels/cuda/common.cuh"

namespace gpumix::kernels::cuda::detail {

template <class T>
__device__ __forceinline__ float lds(const T* p) { return to_f32(*p); }
template <class T>
__device__ __forceinline__ void sts(T* p, float v) { *p = from_f32<T>(v); }

__device__ __forceinline__ void loadv(const float* p, float* f) {
  const float4 x = ((const float4*)p)[0], y = ((const float4*)p)[1];
  f[0] = x.x, f[1] = x.y, f[2] = x.z, f[3] = x.w, f[4] = y.x, f[5] = y.y, f[6] = y.z, f[7] = y.w;
}
template <class H>
__device__ __forceinline__ void loadv(const H* p, float* f) { unpack8(*(const Half8<H>*)p, f); }
__device__ __forceinline__ void storev(float* p, const float* f) {
  ((float4*)p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  ((float4*)p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
template <class H>
__device__ __forceinline__ void storev(H* p, const float* f) { *(Half8<H>*)p = pack8<H>(f); }

template <typename TO, typename TA, typename TB, typename Op>
__global__ void map_vec_kernel(TO* out, const TA* a, const TB* b, Op op, int64_t nvec) {
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec;
       v += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = v * 8;
    float x[8] = {}, y[8] = {}, o[8] = {};
    if (a) loadv(a + i, x);
    if (b) loadv(b + i, y);
    if (Op::kReadsOut) loadv(out + i, o);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = op(x[j], y[j], o[j]);
    storev(out + i, o);
  }
}

template <typename TO, typename TA, typename TB, typename Op>
__global__ void map_kernel(TO* out, const TA* a, const TB* b, Op op, int64_t start, int64_t n) {
  for (int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float x = a ? lds(a + i) : 0.0f;
    const float y = b ? lds(b + i) : 0.0f;
    const float o = Op::kReadsOut ? lds(out + i) : 0.0f;
    sts(out + i, op(x, y, o));
  }
}

template <typename TO, typename TA, typename TB, typename Op>
void launch_map(TO* out, const TA* a, const TB* b, Op op, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(out) && aligned16(a) && aligned16(b);
  const int64_t nvec = vec ? n / 8 : 0;
  if (nvec > 0) {
    auto* map_vec = &map_vec_kernel<TO, TA, TB, Op>;
    GPUMIX_LAUNCH(map_vec, grid_for(nvec, 256), 256, 0, stream, out, a, b, op, nvec);
    CUDA_CHECK_LAST();
  }
  if (nvec * 8 < n) {
    auto* map_scalar = &map_kernel<TO, TA, TB, Op>;
    GPUMIX_LAUNCH(map_scalar, grid_for(n - nvec * 8, 256), 256, 0, stream, out, a, b, op, nvec * 8, n);
    CUDA_CHECK_LAST();
  }
}

}  // namespace gpumix::kernels::cuda::detail
