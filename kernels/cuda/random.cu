// Counter-based random numbers on the device: the same Philox streams as the CPU
// (kernels/philox.h, __host__ __device__), one thread per element, grid-stride.
#include "kernels/cuda/map.cuh"
#include "kernels/philox.h"

namespace gpumix::kernels::cuda {

namespace {

// low + (high - low) * u with explicit roundings, as the host computes it (no FMA).
struct UniformAt {
  uint64_t key, offset;
  float low, high;
  __device__ float operator()(int64_t i) const {
    return __fadd_rn(low, __fmul_rn(__fsub_rn(high, low), philox_uniform_at(key, offset + i)));
  }
};
struct NormalAt {
  uint64_t key, offset;
  float mean, std;
  __device__ float operator()(int64_t i) const {
    return __fadd_rn(mean, __fmul_rn(std, philox_normal_at(key, offset + i)));
  }
};

template <typename T, typename F>
__global__ void generate_kernel(T* out, int64_t n, F value_at) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    detail::sts(out + i, value_at(i));
}

template <typename T, typename F>
void generate(T* out, int64_t n, F value_at, cudaStream_t stream) {
  if (n <= 0) return;
  auto* generate = &generate_kernel<T, F>;
  GPUMIX_LAUNCH(generate, detail::grid_for(n, 256), 256, 0, stream, out, n, value_at);
  CUDA_CHECK_LAST();
}

}  // namespace

void uniform(float* out, int64_t n, uint64_t key, uint64_t offset, float low, float high,
             cudaStream_t stream) {
  generate(out, n, UniformAt{key, offset, low, high}, stream);
}
void uniform(bf16* out, int64_t n, uint64_t key, uint64_t offset, float low, float high,
             cudaStream_t stream) {
  generate(out, n, UniformAt{key, offset, low, high}, stream);
}
void uniform(f16* out, int64_t n, uint64_t key, uint64_t offset, float low, float high,
             cudaStream_t stream) {
  generate(out, n, UniformAt{key, offset, low, high}, stream);
}
void normal(float* out, int64_t n, uint64_t key, uint64_t offset, float mean, float std,
            cudaStream_t stream) {
  generate(out, n, NormalAt{key, offset, mean, std}, stream);
}
void normal(bf16* out, int64_t n, uint64_t key, uint64_t offset, float mean, float std,
            cudaStream_t stream) {
  generate(out, n, NormalAt{key, offset, mean, std}, stream);
}
void normal(f16* out, int64_t n, uint64_t key, uint64_t offset, float mean, float std,
            cudaStream_t stream) {
  generate(out, n, NormalAt{key, offset, mean, std}, stream);
}

}  // namespace gpumix::kernels::cuda
