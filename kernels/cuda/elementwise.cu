// Elementwise ops, fp32, bf16 and f16 (map.cuh: 16-byte accesses, fp32 arithmetic).
#include "kernels/cuda/map.cuh"

namespace gpumix::kernels::cuda {

namespace {
struct AddOp {
  static constexpr bool kReadsOut = false;
  __device__ float operator()(float x, float y, float) const { return x + y; }
};
struct ScaleOp {
  static constexpr bool kReadsOut = false;
  float s;
  __device__ float operator()(float x, float, float) const { return x * s; }
};
struct AxpyOp {
  static constexpr bool kReadsOut = true;
  float s;
  __device__ float operator()(float x, float, float o) const { return o + s * x; }
};
struct CopyOp {
  static constexpr bool kReadsOut = false;
  __device__ float operator()(float x, float, float) const { return x; }
};
struct FillOp {
  static constexpr bool kReadsOut = false;
  float value;
  __device__ float operator()(float, float, float) const { return value; }
};
const float* kNoF32 = nullptr;
const bf16* kNoBf16 = nullptr;
const f16* kNoF16 = nullptr;
}  // namespace

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, b, AddOp{}, n, stream);
}
void add(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, b, AddOp{}, n, stream);
}
void add(f16* out, const f16* a, const f16* b, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, b, AddOp{}, n, stream);
}
void scale(float* out, const float* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoF32, ScaleOp{s}, n, stream);
}
void scale(bf16* out, const bf16* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoBf16, ScaleOp{s}, n, stream);
}
void scale(f16* out, const f16* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoF16, ScaleOp{s}, n, stream);
}
void axpy(float* out, const float* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoF32, AxpyOp{s}, n, stream);
}
void axpy(bf16* out, const bf16* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoBf16, AxpyOp{s}, n, stream);
}
void axpy(f16* out, const f16* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoF16, AxpyOp{s}, n, stream);
}
void axpy(float* out, const bf16* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoBf16, AxpyOp{s}, n, stream);
}
void axpy(float* out, const f16* a, float s, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, a, kNoF16, AxpyOp{s}, n, stream);
}
void f32_to_bf16(bf16* out, const float* in, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, in, kNoF32, CopyOp{}, n, stream);
}
void f32_to_f16(f16* out, const float* in, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, in, kNoF32, CopyOp{}, n, stream);
}
void bf16_to_f32(float* out, const bf16* in, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, in, kNoBf16, CopyOp{}, n, stream);
}
void f16_to_f32(float* out, const f16* in, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, in, kNoF16, CopyOp{}, n, stream);
}
void fill(float* out, float value, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, kNoF32, kNoF32, FillOp{value}, n, stream);
}
void fill(bf16* out, float value, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, kNoBf16, kNoBf16, FillOp{value}, n, stream);
}
void fill(f16* out, float value, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, kNoF16, kNoF16, FillOp{value}, n, stream);
}

namespace {
__global__ void fill_i32_kernel(int32_t* out, int32_t value, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = value;
}
}  // namespace

void fill(int32_t* out, int32_t value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  GPUMIX_LAUNCH(fill_i32_kernel, detail::grid_for(n, 256), 256, 0, stream, out, value, n);
  CUDA_CHECK_LAST();
}

}  // namespace gpumix::kernels::cuda
