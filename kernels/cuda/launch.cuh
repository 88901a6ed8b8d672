// The one way kernels/cuda launches a kernel:
//
//   GPUMIX_LAUNCH(kernel, grid, block, shared_bytes, stream, args...);
//
// Under nvcc it is `kernel<<<grid, block, shared_bytes, stream>>>(args...)`. Compiled as host
// C++ against the emulated CUDA device (kernels/cuda_emulator, GPUMIX_CUDA_EMULATOR), it
// hands the kernel, its name and this call site to the emulator's launcher, which a C++
// compiler can parse and `<<<>>>` is not. A template kernel whose arguments hold a comma
// is named through a pointer first: `auto* k = &my_kernel<A, B>; GPUMIX_LAUNCH(k, ...)`.
#pragma once

#if defined(GPUMIX_CUDA_EMULATOR)
#include "kernels/cuda_emulator/launch.h"
#define GPUMIX_LAUNCH(kernel, grid, block, shared_bytes, stream, ...)                   \
  ::cuda_emulator::launch(#kernel, __FILE__, __LINE__, kernel, grid, block, shared_bytes, \
                          stream, ##__VA_ARGS__)
#else
#define GPUMIX_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
#endif
