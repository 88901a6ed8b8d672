#include "dist/engine/offload.h"

#include <cstring>
#include <vector>

#include "core/error.h"

#ifdef GPUMIX_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.h"
#endif

namespace gpumix::dist {

// Host memory of one slot: pinned (cudaMallocHost) for a GPU, so that its copies run
// asynchronously on the offload stream; plain for a CPU. Grows, never shrinks.
struct InputOffload::HostBuffer {
  explicit HostBuffer(bool pinned_) : pinned(pinned_) {}
  ~HostBuffer() { release(); }
  void* reserve(int64_t n) {
    if (n <= bytes) return data;
    release();
#ifdef GPUMIX_HAVE_CUDA
    if (pinned) {
      CUDA_CHECK(cudaMallocHost(&data, (size_t)n));
      bytes = n;
      return data;
    }
#endif
    plain.resize((size_t)n);
    data = plain.data();
    bytes = n;
    return data;
  }
  void release() {
#ifdef GPUMIX_HAVE_CUDA
    if (pinned && data) cudaFreeHost(data);
#endif
    plain.clear();
    plain.shrink_to_fit();
    data = nullptr;
    bytes = 0;
  }
  const bool pinned;
  void* data = nullptr;
  int64_t bytes = 0;
  std::vector<char> plain;
};

namespace {

// n bytes between host and device memory of `device`: on a GPU asynchronously on its
// offload stream, after the compute stream's work so far (an event), recording `done`;
// on a CPU a memcpy.
void copy_on_offload_stream(Device device, void* dst, const void* src, int64_t n, bool to_host, Event& done) {
  if (n == 0) return;
  if (device.is_cpu()) {
    std::memcpy(dst, src, (size_t)n);
    return;
  }
#ifdef GPUMIX_HAVE_CUDA
  CUDA_CHECK(cudaSetDevice(device_props(device).ordinal));  // before enqueueing on its streams
  Event ready;
  ready.record(device, Stream::compute);
  ready.wait(device, Stream::offload);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                             static_cast<cudaStream_t>(stream_handle(device, Stream::offload))));
  done.record(device, Stream::offload);
#else
  (void)to_host;
  (void)done;
  GPUMIX_CHECK(false, "offload on ", device.str(), " in a build without CUDA");
#endif
}

}  // namespace

InputOffload::InputOffload(Device device) : device_(device) {}

InputOffload::~InputOffload() {
  // Copies still running read or write the host buffers: they end first.
  for (auto& [key, slot] : slots_) slot.done.synchronize();
}

void InputOffload::put(int l, int j, const Tensor& x) {
  Slot& slot = slots_[{l, j}];
  GPUMIX_CHECK(!slot.offloaded && !slot.on_device.defined(), "internal: block ", l, " input ", j,
               " offloaded twice in one step");
  if (!slot.host) slot.host = std::make_unique<HostBuffer>(device_.is_cuda());
  if (x.nbytes() > slot.host->bytes) slot.done.synchronize();  // a larger buffer: the old one's copies end first
  void* host = slot.host->reserve(x.nbytes());
  slot.shape = x.shape();
  slot.dtype = x.dtype();
  copy_on_offload_stream(device_, host, x.raw_data(), x.nbytes(), true, slot.done);
  slot.offloaded = true;
  if (device_.is_cpu()) return;  // copied already: the device tensor goes now
  slot.on_device = x;
  staged_.push_back({l, j});
  while ((int)staged_.size() > kStaging) {
    Slot& oldest = slots_[staged_.front()];
    staged_.pop_front();
    retire(oldest);
  }
}

void InputOffload::retire(Slot& slot) {
  slot.done.wait(device_, Stream::compute);
  slot.on_device = Tensor();
}

bool InputOffload::holds(int l, int j) const {
  const auto it = slots_.find({l, j});
  return it != slots_.end() && it->second.offloaded;
}

void InputOffload::prefetch(int l, int j) {
  const auto it = slots_.find({l, j});
  if (it == slots_.end() || !it->second.offloaded || it->second.on_device.defined()) return;
  Slot& slot = it->second;
  slot.on_device = Tensor::empty(slot.shape, slot.dtype, device_);
  copy_on_offload_stream(device_, slot.on_device.raw_data(), slot.host->data, slot.on_device.nbytes(), false,
                         slot.done);
  slot.coming_back = true;
}

Tensor InputOffload::take(int l, int j) {
  GPUMIX_CHECK(holds(l, j), "internal: block ", l, " input ", j, " was not offloaded");
  Slot& slot = slots_[{l, j}];
  for (auto it = staged_.begin(); it != staged_.end(); ++it)
    if (*it == Key{l, j}) {
      staged_.erase(it);
      break;
    }
  // Staged (its copy out may run) or prefetched: the compute stream waits for that copy.
  // Neither: bring it back now.
  if (!slot.on_device.defined()) prefetch(l, j);
  slot.done.wait(device_, Stream::compute);
  Tensor x = slot.on_device;
  slot.on_device = Tensor();
  slot.offloaded = slot.coming_back = false;
  return x;
}

int64_t InputOffload::host_bytes() const {
  int64_t n = 0;
  for (const auto& [key, slot] : slots_) n += slot.host ? slot.host->bytes : 0;
  return n;
}

}  // namespace gpumix::dist
