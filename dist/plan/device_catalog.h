// Datasheet numbers of common devices, for synthesising profiles when none is measured
// (the simulator). Sources: the vendors' datasheets (dense 16-bit peaks, memory and bandwidth).
//
// Efficiency assumptions, documented once here:
// - `efficiency` is the fraction of the dense 16-bit tensor-core peak that a transformer
//   block's training reaches at large micro-batches. It is calibrated on Cephalo's
//   published per-layer profiles (GPT-2.7B: V100 6.76, A6000 7.06, T4 17.2, L4 18.4,
//   P100 39.7, P40 43.7 ms per sample; LLaMA-7B: H100 NVL, A100-40, A10G relative to the
//   A6000), and taken from the nearest sibling for the devices without one.
// - At micro-batch m the efficiency is efficiency · tokens / (tokens + 256): small
//   micro-batches underuse the device; plus a fixed launch cost per block pass.
// - P40 has no fast 16-bit math: its peak is the fp32 one (it computes in fp32).
// - Usable memory is 94 % of the nominal (driver, ECC, context); a further fixed
//   working set (workspaces, NCCL buffers) goes into the profile's work_bytes.
// - The optimizer streams ~30 bytes per parameter at 70 % of the memory bandwidth.
#pragma once

#include <string>
#include <vector>

namespace gpumix::dist {

struct DeviceSpec {
  std::string name;
  std::string kind;           // "gpu" or "cpu"
  double memory_gib;          // nominal
  double peak_tflops;         // dense, in the compute dtype (fp16/bf16 tensor cores; P40: fp32)
  double efficiency;          // see above
  double memory_bandwidth_GBps;
  double host_bandwidth_GBps; // PCIe, one direction, achievable (0: no offload)
  int dtype_bytes;            // of the dtype peak_tflops is for: 2 on GPUs (16-bit), 4 on the cpu
};

// Throws std::invalid_argument listing the known names. Case-insensitive.
const DeviceSpec& device_spec(const std::string& name);
const std::vector<DeviceSpec>& device_catalog();
// The GPU entry whose name is a word of a device's own name ("NVIDIA H200" -> H200; the
// longest such, so "L40S" is not "L4"); null when none is (its datasheet peak is unknown).
const DeviceSpec* find_gpu_spec(const std::string& device_name);

constexpr double kUsableMemoryFraction = 0.94;
constexpr double kEfficiencyHalfTokens = 256;  // tokens per micro-batch at half efficiency

}  // namespace gpumix::dist
