// The emulated CUDA device's <cuda_runtime.h>: the runtime API (cuda_runtime_api.h, the
// emulated runtime) plus the device language (device_language.h: qualifiers, built-ins,
// barriers, warp shuffles, shared memory, math, atomics; its top comment lists all of it)
// and the kernel attributes the launcher honours:
//   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
//   (any other attribute is refused at run time with its name).
#pragma once

#include <cuda_runtime_api.h>

#include "device_language.h"
#include "vector_types.h"

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

namespace cuda_emulator::detail {
cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
}

// As CUDA's: the kernel is named by its (host) function pointer.
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cuda_emulator::detail::func_set_attribute(reinterpret_cast<const void*>(kernel), attr,
                                                     value);
}
