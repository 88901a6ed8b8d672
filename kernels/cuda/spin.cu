// The emulated slowdown's wait on the GPU: one thread that sleeps on its stream until the
// global timer (nanoseconds) has advanced by the requested time.
#include "kernels/cuda/common.cuh"

namespace gpumix::kernels::cuda {

namespace {
__device__ __forceinline__ uint64_t global_ns() {
#ifdef GPUMIX_CUDA_EMULATOR
  return cuda_emulator::global_timer_ns();
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

__global__ void spin_kernel(int64_t ns) {
  const uint64_t start = global_ns();
  while ((int64_t)(global_ns() - start) < ns) __nanosleep(1000);
}
}  // namespace

void spin_ns(int64_t ns, cudaStream_t stream) {
  if (ns <= 0) return;
  GPUMIX_LAUNCH(spin_kernel, 1, 1, 0, stream, ns);
  CUDA_CHECK_LAST();
}

}  // namespace gpumix::kernels::cuda
