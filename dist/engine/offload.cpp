#include "dist/engine/offload.h"

#include "core/error.h"
#include "core/runtime.h"

namespace gpumix::dist {

// Host memory of one slot from the device's runtime (core/runtime.h): pinned for a GPU, so
// that its copies run asynchronously on the offload stream; plain for a CPU. Grows, never
// shrinks.
struct InputOffload::HostBuffer {
  explicit HostBuffer(Device device) : runtime(device_runtime(device)) {}
  ~HostBuffer() { release(); }
  void* reserve(int64_t n) {
    if (n <= bytes) return data;
    release();
    data = runtime.host_alloc(n);
    bytes = n;
    return data;
  }
  void release() {
    if (data) runtime.host_free(data);
    data = nullptr;
    bytes = 0;
  }
  const DeviceRuntime& runtime;
  void* data = nullptr;
  int64_t bytes = 0;
};

namespace {

// n bytes between host and device memory of `device` on its offload stream, after the
// compute stream's work so far (an event), recording `done` (on a CPU, without queues: a
// copy done on return).
void copy_on_offload_stream(Device device, void* dst, const void* src, int64_t n, Event& done) {
  if (n == 0) return;
  Event ready;
  ready.record(device, Stream::compute);
  ready.wait(device, Stream::offload);
  device_runtime(device).copy_async(device, Stream::offload, dst, src, n);
  done.record(device, Stream::offload);
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
  if (!slot.host) slot.host = std::make_unique<HostBuffer>(device_);
  if (x.nbytes() > slot.host->bytes) slot.done.synchronize();  // a larger buffer: the old one's copies end first
  void* host = slot.host->reserve(x.nbytes());
  slot.shape = x.shape();
  slot.dtype = x.dtype();
  copy_on_offload_stream(device_, host, x.raw_data(), x.nbytes(), slot.done);
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
  copy_on_offload_stream(device_, slot.on_device.raw_data(), slot.host->data, slot.on_device.nbytes(),
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
