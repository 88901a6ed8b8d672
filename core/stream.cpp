#include "core/stream.h"

#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/runtime.h"

namespace gpumix {

namespace {
double host_now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* stream_name(Stream stream) {
  switch (stream) {
    case Stream::compute: return "compute";
    case Stream::comm: return "comm";
    case Stream::offload: return "offload";
  }
  return "?";
}

Event::~Event() { release(); }

Event::Event(Event&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)),
      host_ms_(other.host_ms_), recorded_(std::exchange(other.recorded_, false)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    host_ms_ = other.host_ms_;
    recorded_ = std::exchange(other.recorded_, false);
  }
  return *this;
}

void Event::release() {
  if (handle_) device_runtime(device_).event_destroy(handle_);
  handle_ = nullptr;
  recorded_ = false;
}

void Event::record(Device device, Stream stream) {
  const DeviceRuntime& runtime = device_runtime(device);
  if (device != device_) release();  // a runtime's event belongs to the device it was made on
  device_ = device;
  if (!handle_) handle_ = runtime.event_create(device);
  host_ms_ = host_now_ms();
  if (handle_) runtime.event_record(handle_, device, stream);
  recorded_ = true;
}

void Event::wait(Device device, Stream stream) const {
  if (!recorded_ || !handle_) return;  // completed already
  if (device.is_cpu()) return synchronize();  // a CPU has no queue: the host waits
  device_runtime(device).event_wait(handle_, device, stream);
}

void Event::synchronize() const {
  if (recorded_ && handle_) device_runtime(device_).event_synchronize(handle_);
}

bool Event::query() const {
  return !recorded_ || !handle_ || device_runtime(device_).event_query(handle_);
}

double Event::elapsed_ms(const Event& later) const {
  GPUMIX_CHECK(recorded_ && later.recorded_, "Event::elapsed_ms: both events must be recorded "
               "(this one ", recorded_ ? "is" : "is not", ", the later one ",
               later.recorded_ ? "is" : "is not", ")");
  GPUMIX_CHECK((handle_ == nullptr) == (later.handle_ == nullptr), "Event::elapsed_ms: events "
               "recorded on ", device_.str(), " and ", later.device_.str(), " have no common clock");
  if (!handle_) return later.host_ms_ - host_ms_;
  return device_runtime(device_).event_elapsed_ms(handle_, later.handle_);
}

void synchronize(Device device) { device_runtime(device).synchronize(device); }

void* stream_handle(Device device, Stream stream) {
  return device_runtime(device).stream_handle(device, stream);
}

}  // namespace gpumix
