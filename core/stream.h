// Ordering work on a device's streams, device-agnostic (no CUDA header).
//
// Every device has three streams: `compute` (every kernel that a core op launches on a
// cuda device runs there), `comm` (collectives) and `offload` (copies of saved inputs to
// and from host memory). Work on one stream runs in order; an Event orders work across
// streams and devices without blocking the host: record it where the producer enqueued
// its work, make the consumer's stream wait for it.
//
// On a CPU device every call has completed when it returns: recording, waiting and
// synchronising are no-ops there (an Event still keeps the host time of its record, so
// elapsed_ms works alike on both). A logical cuda device (Device::cuda(i)) is one rank's
// view of the GPU DeviceProps::ordinal: its own streams, allocator, capacity and slowdown.
#pragma once

#include <cstdint>

#include "core/device.h"

namespace gpumix {

enum class Stream : uint8_t { compute, comm, offload };

const char* stream_name(Stream stream);  // "compute", "comm", "offload"

class Event {
 public:
  Event() = default;
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the point reached by the work enqueued so far on `device`'s `stream` (on a CPU
  // device: now). Recording again moves the mark.
  void record(Device device, Stream stream = Stream::compute);
  // Makes `device`'s `stream` wait for the recorded point without blocking the host (a CPU
  // device: the host waits, as a CPU has no queue). A never-recorded event, or one recorded
  // on a CPU device, has completed: no-op.
  void wait(Device device, Stream stream = Stream::compute) const;
  // The host waits until the recorded point is reached.
  void synchronize() const;
  // Whether the recorded point has been reached, never waiting (true when never recorded).
  bool query() const;
  // Milliseconds from this event's point to `later`'s, both recorded on the same kind of
  // device (cuda: the GPU's clock, waiting for `later` to complete; cpu: the host's clock).
  double elapsed_ms(const Event& later) const;

  bool recorded() const { return recorded_; }
  Device device() const { return device_; }

 private:
  void release();

  Device device_;
  void* handle_ = nullptr;  // the runtime's event (a cudaEvent_t); null on a CPU device
  double host_ms_ = 0;      // host clock at record()
  bool recorded_ = false;
};

// The host waits for all of `device`'s streams (no-op on a CPU device).
void synchronize(Device device);

// The runtime's stream as a void* (a cudaStream_t on a cuda device; nullptr on a CPU
// device), for code that calls CUDA libraries itself (NCCL). Set the device's ordinal
// current (cudaSetDevice(device_props(d).ordinal)) before enqueueing on it.
void* stream_handle(Device device, Stream stream);

}  // namespace gpumix
