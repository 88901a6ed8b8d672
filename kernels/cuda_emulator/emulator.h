// The emulated CUDA device's internal contract between its parts (the device language and
// launcher, the runtime, cuBLASLt, NCCL). Not included by GPUMix's own sources: they include
// <cuda_runtime.h>, <cuda_bf16.h>, <cublasLt.h> and <nccl.h>, which this folder provides in
// the emulated build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

struct CUstream_st;  // cudaStream_t is CUstream_st*, as in the real runtime

namespace cuda_emulator {

// The emulator refuses what it does not model, loudly: the message names the call, the
// attribute or flag and its value ("cuda_emulator: cublasLtMatmulDescSetAttribute:
// CUBLASLT_MATMUL_DESC_EPILOGUE = 5 (CUBLASLT_EPILOGUE_RELU) is not emulated"), is printed
// to stderr and the process aborts: an unmodelled path must never pass as a modelled one.
[[noreturn]] void refuse(const std::string& what);

// Runs `work` on the stream's worker thread, after everything enqueued on that stream
// before it (stream 0 / nullptr: the legacy default stream of the current device). `what`
// names the work in error messages ("kernel layernorm_forward_kernel", "ncclAllGather").
// Errors raised inside `work` become the stream's sticky error, reported by the next
// synchronising call, as on a GPU.
void enqueue(CUstream_st* stream, const char* what, std::function<void()> work);

// Where p lies: inside a live device allocation (returns its device ordinal), inside a
// pinned host allocation (cudaHostAlloc / cudaMallocHost), or neither (pageable host
// memory, or freed device memory).
enum class Memory { device, pinned_host, pageable_host };
Memory classify(const void* p, int* device_ordinal = nullptr);

// Refuses unless [p, p + bytes) lies within one live device allocation; `what` names the
// caller and the argument ("ncclAllGather sendbuff").
void require_device(const void* p, size_t bytes, const char* what);

// The number of host-synchronising operations so far in this process (cudaStreamSynchronize,
// cudaEventSynchronize, cudaDeviceSynchronize, blocking cudaMemcpy, cudaMemcpyAsync to
// pageable host memory): a test reads it before and after a training step.
int64_t host_sync_count();

// Added by agreement (NOTES-emu.md):
// Sets the calling host thread's last error (a cudaError_t), what cudaGetLastError returns
// and resets next: the launcher's launch-configuration failures.
void set_last_error(int cuda_error);

// Thrown from inside enqueued work, gives the stream's device this sticky error (a
// cudaError_t); any other exception escaping work gives cudaErrorLaunchFailure. Either way
// the message is printed to stderr at once.
class WorkError : public std::runtime_error {
 public:
  WorkError(int cuda_error, const std::string& what) : std::runtime_error(what), error(cuda_error) {}
  int error;
};

// The shared-memory race detector (launch.h): on unless GPUMIX_EMULATED_RACECHECK=0. A test
// turns it off (0) or on (1) for the kernels launched after, or back to the environment's
// choice (-1).
void set_racecheck(int on);
bool racecheck_enabled();
// Whether this source file's loads and stores reach the race detector (built with
// -Demulated_racecheck, the default): without, it sees only cp.async and ldmatrix, and a test
// of a race in ordinary loads and stores skips. Per file (internal linkage): it is a property
// of the file's compile flags.
#ifdef GPUMIX_EMULATED_RACECHECK_HOOKS
constexpr bool racecheck_hooks_here = true;
#else
constexpr bool racecheck_hooks_here = false;
#endif
// The block scheduler's policy for the kernels launched after (launch.h): "fixed",
// "warp-ahead" or "warp-shuffle"; null: GPUMIX_EMULATED_SCHEDULE's (default fixed).
void set_schedule(const char* name);

// cuBLASLt refusals on request (cublaslt.cpp): rules such as "DGELU=none,TRANSA=NOT_SUPPORTED"
// make cublasLtMatmulAlgoGetHeuristic answer 0 algorithms, NOT_SUPPORTED or INVALID_VALUE for
// the problems they name; null: GPUMIX_EMULATED_CUBLASLT_REFUSE's (read at the first call).
void set_cublaslt_refusals(const char* rules);

// The device ordinal of a stream (nullptr: the current device's legacy default stream).
int stream_device(CUstream_st* stream);

}  // namespace cuda_emulator
