// Emulated slowdown: see core/slowdown.h.
#include "core/slowdown.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "core/runtime.h"
#include "core/stream.h"

namespace gpumix {

namespace {

constexpr double kMinSleep_s = 50e-6, kMaxCredit_s = 2e-3;
thread_local double t_owed_s = 0;  // this thread's CPU-device wait still to serve (< 0: credit)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double thread_cpu_s() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Emulated slowdown on a GPU, without stalling the host: events around each op measure
// its own time on the GPU, and once they have completed (queried, never waited for) a spin
// kernel on the compute stream serves (f - 1) x that time, so that later work on the
// stream starts that much later. Per thread and logical device (a rank's thread drives its
// device). What is owed below kMinSpin_ms waits for more. A host far ahead of its GPU
// (kMaxPending ops) extends the newest span over the next ops instead of opening more:
// no spin lies inside a span, as spins are enqueued only after spans completed (which
// leaves the queue short of full, so the next op opens a span of its own).
}  // namespace

class GpuSlowdown {
 public:
  explicit GpuSlowdown(Device device) : device_(device) {}
  void before() {
    if (pending_.size() >= kMaxPending) return;  // after() extends the newest span
    if (spare_.empty()) spare_.emplace_back();
    pending_.push_back(std::move(spare_.back()));
    spare_.pop_back();
    pending_.back().start.record(device_);
  }
  void after(double factor) {
    pending_.back().stop.record(device_);  // when extending: moves the newest span's end
    while (!pending_.empty() && pending_.front().stop.query()) {
      owed_ms_ += (factor - 1) * pending_.front().start.elapsed_ms(pending_.front().stop);
      spare_.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    if (owed_ms_ < kMinSpin_ms) return;
    serve();
  }
  // All spans complete (the caller synchronised the device): what they owe, on the stream
  // now; returns its milliseconds.
  double settle(double factor) {
    for (Span& s : pending_) {
      owed_ms_ += (factor - 1) * s.start.elapsed_ms(s.stop);
      spare_.push_back(std::move(s));
    }
    pending_.clear();
    const double served = owed_ms_;
    if (served > 0) serve();
    return served;
  }
  double served_ms() const { return served_ms_; }

 private:
  static constexpr size_t kMaxPending = 1024;
  static constexpr double kMinSpin_ms = 0.02;
  struct Span {
    Event start, stop;
  };
  void serve() {
    device_runtime(device_).spin(device_, owed_ms_);
    served_ms_ += owed_ms_;
    owed_ms_ = 0;
  }
  Device device_;
  std::deque<Span> pending_;
  std::vector<Span> spare_;
  double owed_ms_ = 0, served_ms_ = 0;
};

namespace {

GpuSlowdown& gpu_slowdown(Device device) {
  thread_local std::map<int, GpuSlowdown> per_device;
  return per_device.try_emplace(device.index, device).first->second;
}

}  // namespace

SlowdownScope::SlowdownScope(Device device, Stream stream)
    : factor_(stream == Stream::compute ? device_props(device).slowdown : 1) {
  if (factor_ <= 1) return;
  if (device.is_cuda()) {
    (gpu_ = &gpu_slowdown(device))->before();
    return;
  }
  wall_s_ = now_s();
  alone_ = omp_get_max_threads() == 1;
  if (alone_) cpu_s_ = thread_cpu_s();
}

SlowdownScope::~SlowdownScope() {
  if (factor_ <= 1) return;
  if (gpu_) {
    gpu_->after(factor_);
    return;
  }
  const double wall = now_s() - wall_s_, own = alone_ ? thread_cpu_s() - cpu_s_ : wall;
  t_owed_s = std::max(t_owed_s + factor_ * own - wall, -kMaxCredit_s);
  if (t_owed_s < kMinSleep_s) return;
  const double t0 = now_s();
  std::this_thread::sleep_for(std::chrono::duration<double>(t_owed_s));
  t_owed_s -= now_s() - t0;
}

double settle_slowdown(Device device) {
  synchronize(device);
  const double factor = device_props(device).slowdown;
  if (!device.is_cuda() || factor <= 1) return 0;  // a CPU's slowdown waits inside each op
  const double served = gpu_slowdown(device).settle(factor);
  synchronize(device);
  return served;
}

double slowdown_served_ms(Device device) {
  return device.is_cuda() && device_props(device).slowdown > 1 ? gpu_slowdown(device).served_ms() : 0;
}

}  // namespace gpumix
