// CUDA device discovery that answers gracefully where there is no GPU or no driver:
// binaries link only cudart (never libcuda), so these calls work on any machine.
#pragma once

#include <cstdint>
#include <string>

namespace gpumix::kernels::cuda {

struct DeviceInfo {
  int index = -1;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int sm_count = 0;
  int64_t total_memory = 0;         // bytes
  int64_t l2_cache = 0;             // bytes
  int64_t smem_per_block_optin = 0; // bytes, the most a block may ask for
  int memory_bus_width = 0;         // bits
  int memory_clock_khz = 0;
  int clock_khz = 0;
};

// Number of usable CUDA devices; 0 when there is none or no (recent enough) driver, with
// the runtime's reason, e.g. "cudaErrorInsufficientDriver (CUDA driver version is
// insufficient for CUDA runtime version)", written to *reason when reason is not null.
int cuda_device_count(std::string* reason = nullptr);

// Properties of device `index`; throws Error (check.h) for a bad index.
DeviceInfo cuda_device_info(int index);

// One line: "NVIDIA H200 (cc 9.0, 132 SMs, 139.8 GiB, L2 60 MiB)".
std::string cuda_device_summary(int index);

}  // namespace gpumix::kernels::cuda
