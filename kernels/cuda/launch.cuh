// The one way kernels/cuda launches a kernel:
//
//   GPUMIX_LAUNCH(kernel, grid, block, shared_bytes, stream, args...);
//
// Under nvcc it is `kernel<<<grid, block, shared_bytes, stream>>>(args...)`. Compiled as host
// C++ against the emulated CUDA device (kernels/cuda_emulator, GPUMIX_CUDA_EMULATOR), it
// hands the kernel, its name and this call site to the emulator's launcher, which a C++
// compiler can parse and `<<<>>>` is not. A template kernel whose arguments hold a comma
// is named through a pointer first: `auto* k = &my_kernel<A, B>; GPUMIX_LAUNCH(k, ...)`;
// so is a template kernel whose arguments `<<<>>>` deduced (the launcher needs the kernel's
// parameter types).
//
// Shared memory is declared the same way on both sides:
//
//   GPUMIX_SHARED(float, sh, [NV][8][33]);   // __shared__ float sh[NV][8][33];
//   GPUMIX_SHARED_DYNAMIC(float, dyn);       // extern __shared__ float dyn[];
//
// (the emulator gives each block its own arrays, poisoned at block start, which no static
// or thread_local object can be).
#pragma once

#if defined(GPUMIX_CUDA_EMULATOR)
#include "kernels/cuda_emulator/launch.h"
#define GPUMIX_LAUNCH(kernel, grid, block, shared_bytes, stream, ...)                   \
  ::cuda_emulator::launch(#kernel, __FILE__, __LINE__, kernel, grid, block, shared_bytes, \
                          stream, ##__VA_ARGS__)
// GPUMIX_SHARED, GPUMIX_SHARED_DYNAMIC: kernels/cuda_emulator/device_language.h
#else
#define GPUMIX_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
#define GPUMIX_SHARED(type, name, dims) __shared__ type name dims
#define GPUMIX_SHARED_DYNAMIC(type, name) extern __shared__ type name[]
#endif
