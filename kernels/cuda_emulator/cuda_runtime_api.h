// The emulated CUDA runtime (kernels/cuda_emulator/runtime.cpp): exactly the calls GPUMix
// makes, on emulated devices whose memory is host memory. Anything else is a compile error
// in the emulated build; every flag or attribute value not modelled is refused at run time
// with its name (cuda_emulator::refuse: message, abort).
//
// Errors and devices: cudaGetErrorName, cudaGetErrorString, cudaGetLastError,
//   cudaPeekAtLastError, cudaGetDeviceCount, cudaSetDevice, cudaGetDevice,
//   cudaGetDeviceProperties, cudaDeviceGetAttribute, cudaDeviceSynchronize,
//   cudaDeviceCanAccessPeer, cudaDeviceEnablePeerAccess, cudaMemGetInfo.
// Memory: cudaMalloc, cudaFree, cudaHostAlloc, cudaMallocHost, cudaFreeHost (with the
//   T** overloads of cuda_runtime.h), cudaMemcpy, cudaMemcpyAsync, cudaMemcpyPeerAsync,
//   cudaMemset, cudaMemsetAsync.
// Pools: cudaMemPoolCreate, cudaMemPoolDestroy, cudaMemPoolSetAttribute,
//   cudaMemPoolGetAttribute, cudaMemPoolTrimTo, cudaMallocFromPoolAsync, cudaFreeAsync.
// Streams and events: cudaStreamCreateWithFlags (cudaStreamNonBlocking only),
//   cudaStreamDestroy, cudaStreamSynchronize, cudaStreamWaitEvent, cudaEventCreate,
//   cudaEventCreateWithFlags, cudaEventDestroy, cudaEventRecord, cudaEventQuery,
//   cudaEventSynchronize, cudaEventElapsedTime.
//
// The model (runtime.cpp says more):
// - Each device has its own arena (one mmap'd MAP_NORESERVE range of the device's capacity,
//   so pages exist only once touched); allocations are 256-byte aligned, filled with 0xFF
//   bytes (a NaN in fp32 and in bf16) when allocated and again when freed. The capacity is
//   the named GPU's, or GPUMIX_EMULATED_GPU_MEMORY (e.g. 2GiB); past it cudaMalloc returns
//   cudaErrorMemoryAllocation and cudaMemGetInfo counts against it (pools included).
// - Each stream is an in-order queue run by its own worker thread, asynchronously to the
//   host, with a seeded random delay of up to GPUMIX_EMULATED_STREAM_DELAY_US (default 20)
//   before each task, so that a missing wait or sync gives a wrong or poisoned result.
// - Copies follow NVIDIA's "API synchronization behavior" page of the runtime API
//   documentation (pageable vs pinned host memory); see runtime.cpp.
// - Not caught: a host read or write of device memory without a copy (device memory is
//   ordinary host memory here), and host memory reached through a struct or a computed
//   pointer in a kernel. Caught: copy directions that do not match the pointers
//   (cuda_emulator::require_device), kernels' pointer arguments (the launcher), NCCL buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "driver_types.h"

extern "C" {

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device);
cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaMalloc(void** dev_ptr, size_t size);
cudaError_t cudaFree(void* dev_ptr);
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t count, cudaStream_t stream);
cudaError_t cudaMemset(void* dev_ptr, int value, size_t count);
cudaError_t cudaMemsetAsync(void* dev_ptr, int value, size_t count, cudaStream_t stream);

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const struct cudaMemPoolProps* props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep);
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream);
cudaError_t cudaFreeAsync(void* dev_ptr, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

}  // extern "C"

// The typed overloads of the real cuda_runtime.h.
template <class T>
inline cudaError_t cudaMalloc(T** dev_ptr, size_t size) {
  return cudaMalloc((void**)(void*)dev_ptr, size);
}
template <class T>
inline cudaError_t cudaHostAlloc(T** ptr, size_t size, unsigned int flags) {
  return cudaHostAlloc((void**)(void*)ptr, size, flags);
}
template <class T>
inline cudaError_t cudaMallocHost(T** ptr, size_t size) {
  return cudaMallocHost((void**)(void*)ptr, size);
}
template <class T>
inline cudaError_t cudaMallocFromPoolAsync(T** ptr, size_t size, cudaMemPool_t pool,
                                           cudaStream_t stream) {
  return cudaMallocFromPoolAsync((void**)(void*)ptr, size, pool, stream);
}
