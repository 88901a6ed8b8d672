#include "core/device.h"

#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/allocator.h"
#include "core/runtime.h"

namespace gpumix {

namespace {

struct DeviceState {
  DeviceProps props;
  std::unique_ptr<Allocator> alloc;
};

std::mutex registry_mutex;

// Keyed by (kind, index). Entries are never erased, so references stay valid.
std::map<std::pair<int, int>, DeviceState>& registry() {
  static auto* r = new std::map<std::pair<int, int>, DeviceState>();  // never destroyed:
  return *r;  // tensors in static storage may release memory during exit
}

// The device's entry, created with `initial` props, or the runtime's defaults when null.
DeviceState& state(Device device, const DeviceProps* initial = nullptr) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto key = std::make_pair((int)device.kind, device.index);
  auto it = registry().find(key);
  if (it == registry().end()) {
    DeviceState s;
    s.props = initial ? *initial : device_runtime(device).default_props(device);
    s.alloc = std::make_unique<Allocator>(device, s.props.capacity);
    it = registry().emplace(key, std::move(s)).first;
  }
  return it->second;
}

}  // namespace

std::string Device::str() const { return (is_cpu() ? "cpu:" : "cuda:") + std::to_string(index); }

int64_t host_memory_bytes() {
  return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGE_SIZE);
}

DeviceProps device_props(Device device) {
  DeviceState& s = state(device);
  std::lock_guard<std::mutex> lock(registry_mutex);
  return s.props;
}

void configure_device(Device device, const DeviceProps& props) {
  GPUMIX_CHECK(props.capacity > 0, "device ", device.str(), ": capacity must be positive, got ",
               props.capacity);
  GPUMIX_CHECK(props.slowdown >= 1, "device ", device.str(), ": slowdown must be >= 1, got ",
               props.slowdown);
  DeviceState& s = state(device, &props);
  s.alloc->set_capacity(props.capacity);
  std::lock_guard<std::mutex> lock(registry_mutex);
  s.props = props;
}

Allocator& allocator(Device device) { return *state(device).alloc; }

DeviceProps gpu_props(int ordinal) {
  std::string why;
  const int count = cuda_device_count(&why);
  GPUMIX_CHECK_INPUT(ordinal >= 0 && ordinal < count, "GPU ", ordinal, " does not exist: ", count,
                     " CUDA device(s) here", count ? "" : " (" + why + ")");
  const Device gpu = Device::cuda(ordinal);
  return device_runtime(gpu).default_props(gpu);
}

std::vector<Device> available_devices(std::string* why_no_cuda) {
  std::vector<Device> devices{Device::cpu()};
  const int n = cuda_device_count(why_no_cuda);
  for (int i = 0; i < n; ++i) devices.push_back(Device::cuda(i));
  return devices;
}

}  // namespace gpumix
