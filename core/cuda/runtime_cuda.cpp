// The CUDA runtime: the streams, memory, events and raw copies of logical devices
// (core/cuda/logical.h), each call with the device's GPU current.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "core/cuda/logical.h"
#include "core/runtime.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"

namespace gpumix {

namespace cuda_state {

namespace cu = kernels::cuda;

bool event_done(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error
    return false;
  }
  CUDA_CHECK(q);
  return true;
}

void wait_unless_done(cudaEvent_t e) {
  if (!event_done(e)) CUDA_CHECK(cudaEventSynchronize(e));
}

Logical& logical(Device device) {
  static auto* devices = new std::map<int, std::unique_ptr<Logical>>();  // never destroyed
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = devices->find(device.index);
  if (it != devices->end()) return *it->second;
  const DeviceProps props = device_props(device);
  std::string why;
  const int count = cu::cuda_device_count(&why);
  GPUMIX_CHECK_INPUT(props.ordinal >= 0 && props.ordinal < count, device.str(), " is GPU ",
                     props.ordinal, " but this machine has ", count, " CUDA device(s)",
                     count ? "" : " (" + why + ")", "; name a GPU from 0 to ", count - 1,
                     " or run without cuda devices");
  auto d = std::make_unique<Logical>();
  d->device = device;
  d->ordinal = props.ordinal;
  CUDA_CHECK(cudaSetDevice(d->ordinal));
  for (cudaStream_t& s : d->streams) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMalloc((void**)&d->bad_token, sizeof(unsigned long long)));  // outside the
  CUDA_CHECK(cudaMemsetAsync(d->bad_token, 0xff, sizeof(unsigned long long), d->compute()));  // allocator
  CUDA_CHECK(cudaHostAlloc((void**)&d->bad_token_host, sizeof(unsigned long long), cudaHostAllocPortable));
  *d->bad_token_host = kNoBadToken;
  return *devices->emplace(device.index, std::move(d)).first->second;
}

}  // namespace cuda_state

namespace {

namespace cu = kernels::cuda;
using cuda_state::event_done;
using cuda_state::Logical;
using cuda_state::logical;
using cuda_state::wait_unless_done;

class CudaRuntime final : public DeviceRuntime {
 public:
  DeviceProps default_props(Device device) const override {
    DeviceProps p;
    p.ordinal = device.index;
    std::string why;
    const int count = cu::cuda_device_count(&why);
    if (device.index >= count) {  // usable once configure_device names a GPU that exists
      p.name = str("no GPU ", device.index, " (", count, " found", count ? "" : ": " + why, ")");
      return p;
    }
    p.name = cu::cuda_device_info(device.index).name;
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaSetDevice(device.index));
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    p.capacity = (int64_t)free_bytes;
    return p;
  }
  bool computes(DType dtype) const override { return is_16bit_float(dtype); }  // bf16, f16
  void* alloc(Device device, int64_t bytes) const override {
    logical(device).use();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, (size_t)bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;  // the allocator throws OutOfMemory with the numbers
    }
    CUDA_CHECK(e);
    return p;
  }
  void free(Device device, void* ptr) const override {
    logical(device).use();
    CUDA_CHECK(cudaFree(ptr));
  }
  void* host_alloc(int64_t bytes) const override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, (size_t)bytes));
    return p;
  }
  void host_free(void* ptr) const override {
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();  // never throws (destructors)
  }

  void* stream_handle(Device device, Stream stream) const override {
    return logical(device).stream(stream);
  }
  void synchronize(Device device) const override {
    const Logical& d = logical(device);
    d.use();
    for (cudaStream_t s : d.streams) CUDA_CHECK(cudaStreamSynchronize(s));
  }
  void* event_create(Device device) const override {
    logical(device).use();
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));  // with timing: elapsed_ms
    return e;
  }
  // Called from ~Event, also at exit after the runtime may have unloaded: never throws.
  void event_destroy(void* event) const override {
    if (cudaEventDestroy((cudaEvent_t)event) != cudaSuccess) (void)cudaGetLastError();
  }
  void event_record(void* event, Device device, Stream stream) const override {
    const Logical& d = logical(device);
    d.use();
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, d.stream(stream)));
  }
  void event_wait(void* event, Device device, Stream stream) const override {
    const Logical& d = logical(device);
    d.use();
    CUDA_CHECK(cudaStreamWaitEvent(d.stream(stream), (cudaEvent_t)event, 0));
  }
  void event_synchronize(void* event) const override {
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
  }
  bool event_query(void* event) const override { return event_done((cudaEvent_t)event); }
  double event_elapsed_ms(void* start, void* end) const override {
    // The emulated slowdown asks only once `end` has completed: no host wait then.
    wait_unless_done((cudaEvent_t)start);
    wait_unless_done((cudaEvent_t)end);
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return ms;
  }
  void copy_async(Device device, Stream stream, void* dst, const void* src,
                  int64_t bytes) const override {
    if (bytes == 0) return;
    const cudaStream_t s = logical(device).use(stream);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, s));
  }
  void enable_peer_access(Device device, Device peer) const override {
    const int from = device_props(device).ordinal, to = device_props(peer).ordinal;
    static std::mutex mu;
    static std::set<std::pair<int, int>> tried;
    std::lock_guard<std::mutex> lock(mu);
    if (from == to || !tried.insert({from, to}).second) return;
    int can = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
    if (!can) return;
    CUDA_CHECK(cudaSetDevice(from));
    const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      CUDA_CHECK(e);
  }

  void spin(Device device, double ms) const override {
    cu::spin_ns((int64_t)(ms * 1e6), logical(device).use());
  }
};

}  // namespace

const DeviceRuntime& cuda_runtime() {
  static const CudaRuntime runtime;
  return runtime;
}

int cuda_device_count(std::string* why_not) { return kernels::cuda::cuda_device_count(why_not); }

}  // namespace gpumix
