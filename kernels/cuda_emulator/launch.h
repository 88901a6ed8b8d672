// The emulated CUDA device's kernel launcher: what `kernel<<<grid, block, smem, stream>>>(args)`
// is in the emulated build (kernels/cuda/launch.cuh: GPUMIX_LAUNCH calls it).
//
//   cuda_emulator::launch(name, file, line, kernel, grid, block, smem, stream, args...)
//
// At the launch, on the host thread, as a GPU's runtime does (the emulated device's limits
// from cudaDeviceGetAttribute):
// - block: x, y <= 1,024, z <= 64, x*y*z <= 1,024 threads, every dim >= 1; grid: x < 2^31,
//   y, z <= 65,535, every dim >= 1; else cudaErrorInvalidConfiguration;
// - dynamic shared memory: <= the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize
//   (default 48 KiB minus its static shared memory; cudaFuncSetAttribute raises it up to the
//   device's opt-in limit, 227 KiB on an H200, minus the static part); else
//   cudaErrorInvalidValue. (A block over the kernel's __launch_bounds__: device_language.h.)
//   The static part is known once the kernel has run one block (a
//   compiler knows it before): the first launch checks it while running, and a block over
//   the limit is a device fault;
// - a failed launch runs nothing and sets the host thread's last error (cudaGetLastError);
// - every pointer argument (after conversion to the kernel's parameter types) must be null or
//   device memory: host memory (pageable, or pinned: the latter is device-accessible on a
//   real GPU under UVA, but GPUMix never means to hand it to a kernel) is refused, naming the
//   kernel, the argument's index and the kind of memory.
//   NOT caught: a host pointer inside a struct or functor argument (colreduce's functors,
//   the map ops), a pointer the kernel computes (an index past its buffer: that is ASan's
//   job in the sanitized build, or a read of poison), and device memory freed while the
//   kernel runs.
// Then the grid is enqueued on the stream (cuda_emulator::enqueue) and runs on the stream's
// worker, asynchronously to the host; the arguments are copied at the launch, as CUDA does.
//
// How a grid runs (device.cpp):
// - blocks in a seeded shuffled order (GPUMIX_EMULATED_SEED, and a launch counter), several
//   at once on a pool of OS worker threads (GPUMIX_EMULATED_WORKERS, default the cores,
//   at least 2) with the stream's worker helping, so races between blocks can show;
// - a block's threads are fibers on one OS thread (a register switch on x86-64, ucontext
//   elsewhere), each with its own stack (64 KiB, 256 KiB under ASan; a guard page below:
//   an overflow is a crash), switched only
//   at __syncthreads() and warp operations, in a seeded shuffled order; a thread with no
//   barrier runs to its end at once. Why fibers and not one OS thread per GPU thread:
//   barriers and shuffles cost a user-space switch instead of a futex round trip per
//   thread (the suite must run on one core in minutes), the schedule is reproducible per
//   seed, and a deadlock (divergent barriers) is seen at once as "no fiber can run"
//   instead of a hang. ASan is told of every switch (__sanitizer_start_switch_fiber /
//   __sanitizer_finish_switch_fiber). TSan cannot see races between the threads of a block
//   (they are one OS thread): the emulator's own race detector does (below).
// - schedules (GPUMIX_EMULATED_SCHEDULE, or set_schedule): fixed (the default: runnable
//   fibers first come, first served), warp-ahead (per barrier interval one seeded warp runs
//   as far as it can, to its next barrier or its end, before any other), warp-shuffle (per
//   interval every warp in turn, in a seeded order, as far as it can);
// - racecheck (on unless GPUMIX_EMULATED_RACECHECK=0, or set_racecheck), as
//   compute-sanitizer's: the sources with device code are compiled with a call into the
//   emulator at every load and store (kernels/cuda_emulator/meson.build), and per block and
//   barrier interval each shared-memory byte keeps its last writer and up to two readers
//   (thread, source line). A write after another thread's read or write, or a read after
//   another thread's write, in the same interval, with no __syncthreads() or __syncwarp()
//   naming both lanes between them (shuffles, votes, mma and ldmatrix order no memory), is a
//   device fault naming the kernel, both threads, both source lines (addr2line on the line
//   tables) and the address (the shared array and byte). A cp.async destination counts as
//   written by its thread from the issue to that thread's cp.async.wait_group covering it:
//   any access by anyone before is a fault ("cp.async in flight"); ldmatrix reads each row as
//   the lane that gave its address. Detection does not depend on the interleaving: both
//   accesses of a racing pair happen in the interval whatever the order. Atomics take no part.
//   NOT caught: races through global memory (between blocks, or threads of one block), and
//   accesses in code not compiled with the instrumentation (none of GPUMix's kernels);
// - __syncthreads(): every live thread of the block must reach the same call site before
//   any passes; threads at different call sites, a thread reaching a barrier after another
//   returned, or a thread returning while others wait, is a device fault;
// - warp operations (__shfl_xor_sync, __shfl_sync, __shfl_down_sync, __ballot_sync,
//   __syncwarp; mma and ldmatrix, ptx.h): the lanes of a warp (linear thread index / 32)
//   named by the mask wait until all of them arrive at the same operation with the same mask
//   (mma, ldmatrix: all 32 lanes at the same call site), then complete together; groups of
//   other masks may wait at once (independent thread scheduling). A lane arriving at an
//   operation that needs a lane waiting in another operation that needs it (neither can
//   complete: a divergent warp), a mask naming an exited or nonexistent lane or not naming
//   the caller, an mma or ldmatrix in a warp of fewer than 32 threads, is a fault; reading a
//   lane outside the mask gives all-ones bits (a NaN);
// - shared memory: one buffer per block, every byte 0xff (NaN) at block start; static
//   arrays (GPUMIX_SHARED) are placed after the dynamic part, each poisoned when first
//   declared in the block; under ASan the bytes between and after them are poisoned for
//   ASan too, so an index past a shared array is a report with the kernel's line.
// A device fault prints "cuda_emulator: device fault in kernel NAME (launched at
// FILE:LINE), block (x,y,z) thread (x,y,z): WHAT" and aborts the process: a wrong kernel
// never passes, and nothing hangs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emulator.h"

namespace cuda_emulator {

namespace detail {

struct LaunchSite {
  const char* name;
  const char* file;
  int line;
  const void* kernel;
};

// Checks the configuration against the current device's limits; cudaSuccess or the error
// (the caller sets the last error).
cudaError_t check_launch(const LaunchSite& site, dim3 grid, dim3 block, size_t smem);

// Refuses (naming the kernel and argument) unless p is null or device memory.
void check_pointer_arg(const LaunchSite& site, int index, const void* p);

// Enqueues the grid on the stream; `thread_body` runs one GPU thread (the built-ins are set).
void enqueue_grid(const LaunchSite& site, dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, std::function<void()> thread_body);

template <typename T>
void check_arg(const LaunchSite& site, int index, const T& v) {
  if constexpr (std::is_pointer<T>::value) check_pointer_arg(site, index, (const void*)v);
}

template <typename Tuple, size_t... I>
void check_args(const LaunchSite& site, const Tuple& t, std::index_sequence<I...>) {
  (check_arg(site, (int)I, std::get<I>(t)), ...);
}

}  // namespace detail

template <typename... P, typename... A>
void launch(const char* name, const char* file, int line, void (*kernel)(P...), dim3 grid,
            dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A),
                "cuda_emulator::launch: the number of arguments differs from the kernel's");
  const detail::LaunchSite site{name, file, line, reinterpret_cast<const void*>(kernel)};
  const cudaError_t e = detail::check_launch(site, grid, block, smem);
  if (e != cudaSuccess) {
    set_last_error((int)e);
    return;
  }
  // The arguments converted to the parameter types once, at the launch (as CUDA copies them);
  // each thread gets its own copy of each parameter (by-value call).
  auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
  detail::check_args(site, *params, std::index_sequence_for<P...>{});
  detail::enqueue_grid(site, grid, block, smem, stream,
                       [kernel, params] { std::apply(kernel, *params); });
}

}  // namespace cuda_emulator
