// The emulated CUDA device: the CUDA C++ device language GPUMix's kernels use, as host C++.
// Included by this folder's cuda_runtime.h (the emulated build puts kernels/cuda_emulator
// first on the include path); never by GPUMix's sources directly.
//
// Provided, and nothing else (anything else is a compile error, on purpose):
//   qualifiers   __global__, __device__, __host__ (empty), __forceinline__ (inline),
//                __launch_bounds__(max, ...) (g++: a launch of more than max threads per block
//                fails with cudaErrorLaunchOutOfResources, as on a GPU; clang: ignored, see
//                below), __restrict__ (the compilers' own)
//   shared       GPUMIX_SHARED(type, name, dims) and GPUMIX_SHARED_DYNAMIC(type, name)
//                (kernels/cuda/launch.cuh: plain __shared__ under nvcc); a bare
//                `__shared__` is a compile error here, because a static or thread_local
//                object cannot be one per block and poisoned at block start
//   built-ins    threadIdx, blockIdx (uint3), blockDim, gridDim (dim3), warpSize (32)
//   barriers     __syncthreads()
//   warp         __shfl_xor_sync(mask, v, laneMask, width = 32), __shfl_sync(mask, v,
//                srcLane, width = 32), __shfl_down_sync(mask, v, delta, width = 32) for any
//                trivially copyable type of 1..8 bytes; __ballot_sync(mask, predicate),
//                __syncwarp(mask = all lanes)
//   PTX          mma, ldmatrix, cp.async: ptx.h, through kernels/cuda/tensor_core.cuh only
//   math         the C library's float functions (fmaxf, expf, exp2f, logf, log2f, sqrtf,
//                tanhf, ... from <cmath>), __expf (as expf: the GPU's approximation error
//                is not modelled), rsqrtf (1 / sqrtf), __fadd_rn, __fsub_rn, __fmul_rn
//                (one IEEE operation each, never contracted), min and max (int, unsigned,
//                long long, unsigned long long, float, double), INFINITY (<cmath>)
//   bits         __float_as_uint, __uint_as_float
//   atomics      atomicAdd (int, unsigned, unsigned long long, float, double),
//                atomicMin / atomicMax (int, unsigned, long long, unsigned long long),
//                atomicExch (int, unsigned, unsigned long long, float), atomicCAS (int,
//                unsigned, unsigned long long): each one atomic read-modify-write of the
//                addressed word (sequentially consistent), as the hardware does them;
//                a float atomicAdd is a compare-and-swap loop on the word's bits, rounding
//                each addition to fp32 as the GPU does
//   time         __nanosleep(ns) (the OS thread sleeps), cuda_emulator::global_timer_ns()
//                (the twin of PTX %globaltimer: steady nanoseconds)
//   vector types vector_types.h: dim3, uint3, float4, uint2, make_float4, make_uint2,
//                make_uint3
//   bf16         cuda_bf16.h (a separate header, as in CUDA)
//   launches     launch.h (cuda_emulator::launch, GPUMIX_LAUNCH), cudaFuncSetAttribute
//                with cudaFuncAttributeMaxDynamicSharedMemorySize (others refused)
//
// How a block runs (device.cpp): its threads are fibers on one OS thread, switched only at
// __syncthreads() and warp shuffles, in a seeded shuffled order; see launch.h for why.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "vector_types.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// __launch_bounds__(max, ...) sits between the return type and the kernel's name, where only
// an attribute can go, so the bound travels with the function itself: g++ places `max` bytes
// of padding (patchable_function_entry) right before the kernel's entry, which the launcher
// reads back (device.cpp: launch_bound). clang accepts only literal arguments there (not
// Shape<D>::THREADS), so under clang (the sanitized build) the bound is not enforced.
#if defined(__clang__)
#define __launch_bounds__(...)
#else
#define GPUMIX_EMU_LAUNCH_BOUNDS(max_threads, ...) \
  __attribute__((patchable_function_entry((max_threads), (max_threads))))
#define __launch_bounds__(...) GPUMIX_EMU_LAUNCH_BOUNDS(__VA_ARGS__, 0)
#endif
#define __shared__ \
  static_assert(false, "cuda_emulator: declare shared memory with GPUMIX_SHARED (kernels/cuda/launch.cuh)");

constexpr int warpSize = 32;

namespace cuda_emulator {

// Nanoseconds of a steady clock: the emulated PTX %globaltimer.
uint64_t global_timer_ns();

namespace detail {

// The running GPU thread's built-ins, set by the block scheduler before each switch.
extern thread_local const uint3* tl_thread_idx;
extern thread_local const uint3* tl_block_idx;
extern thread_local const dim3* tl_block_dim;
extern thread_local const dim3* tl_grid_dim;

void syncthreads(const char* file, int line);
// The shuffles of the CUDA C++ Programming Guide (shfl.sync's .bfly, .idx and .down modes):
// `arg` is the lane mask, the source lane or the delta.
enum class Shfl { bfly, idx, down };
uint64_t shfl(Shfl mode, unsigned mask, uint64_t bits, int arg, int width, const char* file,
              int line);
unsigned ballot(unsigned mask, bool predicate, const char* file, int line);
void syncwarp(unsigned mask, const char* file, int line);
// Static shared memory of the running block: one array per (block, tag), poisoned (0xff
// bytes) when the first thread of the block reaches the declaration.
void* shared_static(const void* tag, size_t bytes, size_t align, const char* name,
                    const char* file, int line);
void* shared_dynamic();
void nanosleep_ns(unsigned ns);

template <Shfl mode, typename T>
T shfl_sync_at(const char* file, int line, unsigned mask, T v, int arg, int width = warpSize) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                "cuda_emulator: a warp shuffle of a type larger than 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  b = shfl(mode, mask, b, arg, width, file, line);
  std::memcpy(&v, &b, sizeof v);
  return v;
}
// __syncwarp() and __syncwarp(mask) with the call site: SyncwarpAt{file, line}(args).
struct SyncwarpAt {
  const char* file;
  int line;
  void operator()(unsigned mask = 0xffffffffu) const { syncwarp(mask, file, line); }
};

template <typename T>
T atomic_rmw_cas(T* address, T (*op)(T, T), T val) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  static_assert(sizeof(T) == sizeof(U), "4- or 8-byte atomics only");
  U* word = reinterpret_cast<U*>(address);
  U old_bits = __atomic_load_n(word, __ATOMIC_SEQ_CST);
  for (;;) {
    T old_val;
    std::memcpy(&old_val, &old_bits, sizeof old_val);
    const T new_val = op(old_val, val);
    U new_bits;
    std::memcpy(&new_bits, &new_val, sizeof new_bits);
    if (__atomic_compare_exchange_n(word, &old_bits, new_bits, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
      return old_val;
  }
}

}  // namespace detail
}  // namespace cuda_emulator

#define threadIdx (*::cuda_emulator::detail::tl_thread_idx)
#define blockIdx (*::cuda_emulator::detail::tl_block_idx)
#define blockDim (*::cuda_emulator::detail::tl_block_dim)
#define gridDim (*::cuda_emulator::detail::tl_grid_dim)

#define __syncthreads() ::cuda_emulator::detail::syncthreads(__FILE__, __LINE__)
#define __shfl_xor_sync(...) \
  ::cuda_emulator::detail::shfl_sync_at<::cuda_emulator::detail::Shfl::bfly>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_sync(...) \
  ::cuda_emulator::detail::shfl_sync_at<::cuda_emulator::detail::Shfl::idx>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) \
  ::cuda_emulator::detail::shfl_sync_at<::cuda_emulator::detail::Shfl::down>(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, predicate) \
  ::cuda_emulator::detail::ballot((mask), (predicate) != 0, __FILE__, __LINE__)
#define __syncwarp(...) ::cuda_emulator::detail::SyncwarpAt{__FILE__, __LINE__}(__VA_ARGS__)

// Shared memory declarations (kernels/cuda/launch.cuh maps GPUMIX_SHARED to __shared__ under
// nvcc). The tag is a static object per declaration (per template instantiation).
#define GPUMIX_SHARED(type, name, dims)                                                      \
  static const char gpumix_shared_tag_##name = 0;                                          \
  type(&name) dims = *static_cast<type(*) dims>(::cuda_emulator::detail::shared_static(    \
      &gpumix_shared_tag_##name, sizeof(type dims), alignof(type), #name, __FILE__, __LINE__))
#define GPUMIX_SHARED_DYNAMIC(type, name) \
  type* name = static_cast<type*>(::cuda_emulator::detail::shared_dynamic())

// ---- math -------------------------------------------------------------------------------
inline float __expf(float x) { return expf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// volatile: one rounded IEEE operation each, never fused into an FMA by the compiler.
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}

inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

inline unsigned int __float_as_uint(float x) {
  unsigned int u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned int u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline void __nanosleep(unsigned ns) { ::cuda_emulator::detail::nanosleep_ns(ns); }

// ---- atomics ----------------------------------------------------------------------------
#define GPUMIX_EMU_ATOMIC_INT(T)                                                             \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }       \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }     \
  inline T atomicCAS(T* a, T compare, T v) {                                                \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
    return compare;                                                                         \
  }                                                                                         \
  inline T atomicMin(T* a, T v) {                                                           \
    return ::cuda_emulator::detail::atomic_rmw_cas<T>(                                      \
        a, [](T x, T y) { return y < x ? y : x; }, v);                                       \
  }                                                                                         \
  inline T atomicMax(T* a, T v) {                                                           \
    return ::cuda_emulator::detail::atomic_rmw_cas<T>(                                      \
        a, [](T x, T y) { return y > x ? y : x; }, v);                                       \
  }
GPUMIX_EMU_ATOMIC_INT(int)
GPUMIX_EMU_ATOMIC_INT(unsigned int)
GPUMIX_EMU_ATOMIC_INT(unsigned long long)
#undef GPUMIX_EMU_ATOMIC_INT
inline long long atomicMin(long long* a, long long v) {
  return ::cuda_emulator::detail::atomic_rmw_cas<long long>(
      a, [](long long x, long long y) { return y < x ? y : x; }, v);
}
inline long long atomicMax(long long* a, long long v) {
  return ::cuda_emulator::detail::atomic_rmw_cas<long long>(
      a, [](long long x, long long y) { return y > x ? y : x; }, v);
}
inline float atomicAdd(float* a, float v) {
  return ::cuda_emulator::detail::atomic_rmw_cas<float>(
      a, [](float x, float y) { return x + y; }, v);
}
inline double atomicAdd(double* a, double v) {
  return ::cuda_emulator::detail::atomic_rmw_cas<double>(
      a, [](double x, double y) { return x + y; }, v);
}
inline float atomicExch(float* a, float v) {
  return ::cuda_emulator::detail::atomic_rmw_cas<float>(
      a, [](float, float y) { return y; }, v);
}
