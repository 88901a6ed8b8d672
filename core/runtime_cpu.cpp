// The CPU runtime (no queues: every call has completed when it returns), and the lookup of
// a device's runtime.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/precision.h"
#include "core/runtime.h"

namespace gpumix {

namespace {

class CpuRuntime final : public DeviceRuntime {
 public:
  DeviceProps default_props(Device) const override {
    DeviceProps p;
    p.name = "cpu";
    p.capacity = host_memory_bytes();
    return p;
  }
  bool computes(DType dtype) const override { return dtype == DType::f32 || dtype == DType::bf16; }
  void* alloc(Device, int64_t bytes) const override {
    return std::aligned_alloc(64, (size_t)bytes);
  }
  void free(Device, void* ptr) const override { std::free(ptr); }
  void* host_alloc(int64_t bytes) const override {
    void* p = std::aligned_alloc(64, (size_t)bytes);
    GPUMIX_CHECK(p || bytes == 0, "host memory: ", bytes, " bytes could not be allocated");
    return p;
  }
  void host_free(void* ptr) const override { std::free(ptr); }

  void* stream_handle(Device, Stream) const override { return nullptr; }
  void synchronize(Device) const override {}
  void* event_create(Device) const override { return nullptr; }
  void event_destroy(void*) const override {}
  void event_record(void*, Device, Stream) const override {}
  void event_wait(void*, Device, Stream) const override {}
  void event_synchronize(void*) const override {}
  bool event_query(void*) const override { return true; }
  double event_elapsed_ms(void*, void*) const override { return 0; }

  void copy_async(Device, Stream, void* dst, const void* src, int64_t bytes) const override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, (size_t)bytes);
  }
  void enable_peer_access(Device, Device) const override {}

  void spin(Device, double ms) const override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  }
};

}  // namespace

const DeviceRuntime& cpu_runtime() {
  static const CpuRuntime runtime;
  return runtime;
}

const DeviceRuntime* built_runtime(Device device) {
  if (device.is_cpu()) return &cpu_runtime();
#ifdef GPUMIX_CORE_CUDA
  return &cuda_runtime();
#else
  return nullptr;
#endif
}

const DeviceRuntime& device_runtime(Device device) {
  const DeviceRuntime* runtime = built_runtime(device);
  GPUMIX_CHECK(runtime, "device ", device.str(), " needs CUDA, but this build of GPUMix has no "
               "CUDA backend; rebuild with nvcc available (meson setup -Dcuda=enabled)");
  return *runtime;
}

#ifndef GPUMIX_CORE_CUDA
int cuda_device_count(std::string* why_not) {
  if (why_not) *why_not = "this build has no CUDA backend in core/";
  return 0;
}
#endif

}  // namespace gpumix
