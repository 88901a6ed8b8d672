// Devices: a real CPU or CUDA GPU, or an emulated device (a CPU rank given a memory
// capacity and a slowdown factor; see docs/design.md "Devices and emulation"). A Device is a
// small value (kind, index); its properties and its allocator live in a per-process
// registry, so tensors can carry the Device by value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpumix {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::cpu, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu:0", "cuda:1"
};

struct DeviceProps {
  std::string name;      // "cpu", "NVIDIA H200", "NVIDIA H200 (emulated mem=6GiB slow=3)"
  int64_t capacity = 0;  // bytes the allocator lets tensors hold
  double slowdown = 1;   // emulation: each kernel takes slowdown x its own time (core/slowdown.h)
  bool emulated = false;
  // The physical GPU of a cuda device (its CUDA device number; 0 on a CPU). A logical
  // Device::cuda(i) is one rank's view of that GPU, as Device::cpu(r) is rank r's view of
  // the CPU: its own capacity, allocator, slowdown and streams. Several logical devices may
  // share one ordinal (--devices cuda:0,cuda:0:mem=6GiB:slow=3). Set it before the device's
  // first use (allocation, streams), which binds them to the ordinal.
  int ordinal = 0;
};

// Properties of a device: defaults for real devices (a CPU's capacity is the machine's
// physical memory) until configure_device() overrides them.
DeviceProps device_props(Device device);

// Sets a device's capacity and slowdown (emulation). Lowering the capacity below the bytes
// already in use throws Error with both numbers. A device configured before its first use
// never gets (nor queries) its defaults.
void configure_device(Device device, const DeviceProps& props);

// The properties a cuda device on GPU `ordinal` gets by default: the GPU's name and its
// free memory now (creating its CUDA context). Throws InputError where there is no such
// GPU (or no CUDA backend in this build).
DeviceProps gpu_props(int ordinal);

// Physical memory of this machine, in bytes.
int64_t host_memory_bytes();

// The devices this process can see: the CPU, and each CUDA GPU (none when the build has no
// CUDA or there is no driver; `why_no_cuda` then says why).
std::vector<Device> available_devices(std::string* why_no_cuda = nullptr);

}  // namespace gpumix
