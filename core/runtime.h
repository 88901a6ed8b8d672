// The device runtime: what a device kind offers below the ops — its properties, its memory,
// pinned host memory, its streams and events, copies of raw bytes on a stream, and the
// emulated slowdown's wait. One DeviceRuntime per device kind (core/runtime_cpu.cpp,
// core/cuda/runtime_cuda.cpp); the allocator, streams and events, device properties, the
// precision rule and the slowdown emulation reach a device through it alone, and so do the
// layers above core where they move bytes themselves (dist/comm's local collectives,
// dist/engine's offload). The ops are the other half of a device kind, its op table
// (core/op_table.h), which only core/ops.cpp calls.
//
// A runtime without queues (the CPU) has completed everything when a call returns: its
// event_create gives nullptr, and Event (core/stream.h) then keeps only the host clock,
// never calling the event_* below.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/stream.h"

namespace gpumix {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Properties.
  virtual DeviceProps default_props(Device device) const = 0;
  // Whether the device kind's op table computes in `dtype` (a compute dtype: f32, bf16, f16).
  virtual bool computes(DType dtype) const = 0;

  // Memory of `device` (its allocator calls these; nullptr when the system has no memory).
  virtual void* alloc(Device device, int64_t bytes) const = 0;
  virtual void free(Device device, void* ptr) const = 0;
  // Host memory that this device kind's copies reach asynchronously (pinned on a GPU,
  // plain on a CPU), outside every allocator; host_free never throws.
  virtual void* host_alloc(int64_t bytes) const = 0;
  virtual void host_free(void* ptr) const = 0;

  // Streams and events (core/stream.h).
  virtual void* stream_handle(Device device, Stream stream) const = 0;
  virtual void synchronize(Device device) const = 0;
  virtual void* event_create(Device device) const = 0;
  virtual void event_destroy(void* event) const = 0;  // never throws (~Event, exit)
  virtual void event_record(void* event, Device device, Stream stream) const = 0;
  virtual void event_wait(void* event, Device device, Stream stream) const = 0;  // no host wait
  virtual void event_synchronize(void* event) const = 0;                         // host waits
  virtual bool event_query(void* event) const = 0;                               // never waits
  virtual double event_elapsed_ms(void* start, void* end) const = 0;

  // Copies: `bytes` from src to dst enqueued on `device`'s `stream`, in order with the
  // stream's other work; each side is memory of `device`, of another device of this kind
  // (a peer GPU) or host_alloc memory. No host wait (without queues: done on return).
  virtual void copy_async(Device device, Stream stream, void* dst, const void* src,
                          int64_t bytes) const = 0;
  // Lets `device`'s copies and kernels read `peer`'s memory directly where the hardware
  // can (once per pair of GPUs); elsewhere copies between them are staged and nothing
  // changes.
  virtual void enable_peer_access(Device device, Device peer) const = 0;

  // The emulated slowdown's wait of `ms` milliseconds on the compute stream (a queue: the
  // host goes on; without queues, the host sleeps).
  virtual void spin(Device device, double ms) const = 0;
};

const DeviceRuntime& cpu_runtime();
#ifdef GPUMIX_CORE_CUDA
const DeviceRuntime& cuda_runtime();
#endif

// The runtime of a device: throws Error when the device kind is not built in.
const DeviceRuntime& device_runtime(Device device);
// The same, or nullptr when the device kind is not built in.
const DeviceRuntime* built_runtime(Device device);

// CUDA GPUs visible to this process (0 without CUDA in the build or without a driver;
// `why_not` then says why).
int cuda_device_count(std::string* why_not = nullptr);

}  // namespace gpumix
