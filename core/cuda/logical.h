// The state of one logical CUDA device (Device::cuda(i), one rank's view of the GPU
// DeviceProps::ordinal), shared by the two halves of the CUDA backend: the runtime
// (core/cuda/runtime_cuda.cpp: streams, memory, events, raw copies) and the op table
// (core/cuda/backend_cuda.cpp: the kernels, and the staged tensor copies, result read-backs
// and token check that its ops need). Internal to core/cuda, not installed.
//
// Per logical device: three non-blocking streams (compute, comm, offload), two pinned
// staging buffers for host copies, a pinned buffer for the results that come back to the
// host, and a word of device memory where the kernels report a token outside the
// vocabulary, copied back beside every result that comes to the host (no synchronisation
// of its own).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "core/stream.h"
#include "kernels/cuda/check.h"

namespace gpumix::cuda_state {

constexpr int64_t kStagingBytes = 4 << 20;  // per buffer; two per logical device
constexpr unsigned long long kNoBadToken = ULLONG_MAX;

// Whether the work before `e`'s latest record has completed (never recorded: true). A
// query, not a host synchronisation.
bool event_done(cudaEvent_t e);
// The host waits for `e` only if it has not completed yet (cudaEventSynchronize is a host
// synchronisation even then).
void wait_unless_done(cudaEvent_t e);

struct Logical {
  Device device;
  int ordinal = 0;
  cudaStream_t streams[3] = {};
  unsigned long long* bad_token = nullptr;  // device memory (cu::check_tokens)
  int bad_token_vocab = 0;                  // V of the latest check

  std::mutex host_mutex;                    // guards the pinned buffers below
  void* staging[2] = {};
  cudaEvent_t staging_free[2] = {};         // the last copy through staging[i] is done
  int next_upload = 0;                      // the staging buffer of the next upload's first chunk
  void* results = nullptr;                  // pinned, results_bytes
  int64_t results_bytes = 0;
  unsigned long long* bad_token_host = nullptr;  // pinned: bad_token as last copied back

  cudaStream_t stream(Stream s) const { return streams[(int)s]; }
  cudaStream_t compute() const { return streams[(int)Stream::compute]; }
  // Makes this device's GPU current for the calling thread; returns the stream.
  cudaStream_t use(Stream s = Stream::compute) const {
    CUDA_CHECK(cudaSetDevice(ordinal));
    return stream(s);
  }
  void ensure_staging() {
    if (staging[0]) return;
    for (int i = 0; i < 2; ++i) {
      CUDA_CHECK(cudaHostAlloc(&staging[i], kStagingBytes, cudaHostAllocPortable));
      CUDA_CHECK(cudaEventCreateWithFlags(&staging_free[i], cudaEventDisableTiming));
    }
  }
  // The pinned results buffer, at least `bytes` long (host_mutex held).
  void* results_of(int64_t bytes) {
    if (bytes > results_bytes) {
      if (results) CUDA_CHECK(cudaFreeHost(results));
      results_bytes = std::max<int64_t>(bytes, 4096);
      CUDA_CHECK(cudaHostAlloc(&results, (size_t)results_bytes, cudaHostAllocPortable));
    }
    return results;
  }
  // Enqueued on the compute stream beside a result's copy to the host (host_mutex held);
  // raise_bad_token reads it once the stream was synchronised: a token outside the
  // vocabulary, reported by the embedding kernels since the last check, is the caller's
  // error (reported once: the word is reset).
  void fetch_bad_token() {
    CUDA_CHECK(cudaMemcpyAsync(bad_token_host, bad_token, sizeof *bad_token, cudaMemcpyDeviceToHost,
                               compute()));
  }
  void raise_bad_token() {
    const unsigned long long word = *bad_token_host;
    if (word == kNoBadToken) return;
    *bad_token_host = kNoBadToken;
    CUDA_CHECK(cudaMemsetAsync(bad_token, 0xff, sizeof *bad_token, compute()));  // kNoBadToken
    GPUMIX_CHECK(false, "embedding on ", device.str(), ": token ", (int32_t)(uint32_t)word,
                 " at position ", (int64_t)(word >> 32), " is outside the vocabulary of ",
                 bad_token_vocab, "; the data does not match this model");
  }
};

// The state of `device`, created at its first use (its streams, on its GPU) and kept for
// the process. Throws InputError when its ordinal names no GPU of this machine.
Logical& logical(Device device);

}  // namespace gpumix::cuda_state
