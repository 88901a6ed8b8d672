#include "dist/plan/device_catalog.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace gpumix::dist {

const std::vector<DeviceSpec>& device_catalog() {
  // name, kind, memory GiB, peak TFLOP/s, efficiency, memory GB/s, host GB/s, dtype bytes
  static const std::vector<DeviceSpec> catalog = {
      {"H200", "gpu", 141, 989, 0.17, 4800, 50, 2},      // H100 SXM compute, more bandwidth
      {"H100", "gpu", 80, 989, 0.15, 3350, 50, 2},       // SXM5; Cephalo H100 NVL ≈ 3.5× A6000
      {"A100-80GB", "gpu", 80, 312, 0.23, 2039, 25, 2},  // A100-40 sibling, more bandwidth
      {"A100-40GB", "gpu", 40, 312, 0.22, 1555, 25, 2},  // Cephalo: ≈ 1.93× A6000
      {"L40S", "gpu", 48, 362, 0.15, 864, 25, 2},        // Ada: like the L4, low fraction
      {"A6000", "gpu", 48, 155, 0.23, 768, 25, 2},       // Cephalo GPT-2.7B 7.06 ms/sample
      {"A10G", "gpu", 24, 125, 0.16, 600, 25, 2},        // Cephalo: ≈ 0.57× A6000
      {"L4", "gpu", 24, 121, 0.11, 300, 25, 2},          // Cephalo 18.4 ms; memory-bound
      {"T4", "gpu", 16, 65, 0.22, 300, 12, 2},           // Cephalo 17.2 ms
      {"V100-16GB", "gpu", 16, 125, 0.30, 900, 12, 2},   // Cephalo 6.76 ms
      {"V100-32GB", "gpu", 32, 125, 0.30, 900, 12, 2},
      {"P100", "gpu", 16, 18.7, 0.33, 732, 12, 2},       // no tensor cores; Cephalo 39.7 ms
      {"P40", "gpu", 24, 11.76, 0.48, 346, 12, 2},       // fp32 only; Cephalo 43.7 ms
      {"RTX3090", "gpu", 24, 71, 0.45, 936, 25, 2},      // GA102, fp32-accumulate rate
      {"RTX4090", "gpu", 24, 165, 0.30, 1008, 25, 2},    // AD102, fp32-accumulate rate
      // An emulated CPU rank (fp32): a 16-core AVX-512 server reaches ~1 TFLOP/s.
      {"cpu", "cpu", 16, 1.0, 0.5, 100, 0, 4},
  };
  return catalog;
}

static std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

const DeviceSpec& device_spec(const std::string& name) {
  const std::string want = lower(name);
  for (const DeviceSpec& d : device_catalog())
    if (lower(d.name) == want) return d;
  // Common aliases.
  if (want == "v100") return device_spec("V100-32GB");
  if (want == "a100") return device_spec("A100-80GB");
  std::string known;
  for (const DeviceSpec& d : device_catalog()) known += (known.empty() ? "" : ", ") + d.name;
  throw std::invalid_argument("unknown device type '" + name + "'; known: " + known);
}

const DeviceSpec* find_gpu_spec(const std::string& device_name) {
  const std::string name = lower(device_name);
  const DeviceSpec* best = nullptr;
  for (const DeviceSpec& s : device_catalog()) {
    if (s.kind != "gpu") continue;
    const std::string n = lower(s.name);
    const size_t at = name.find(n);
    // A whole word: "L4" in "NVIDIA L4", not in "L40S".
    const bool word = at != std::string::npos &&
                      (at + n.size() == name.size() || !std::isalnum((unsigned char)name[at + n.size()]));
    if (word && (!best || s.name.size() > best->name.size())) best = &s;
  }
  return best;
}

}  // namespace gpumix::dist
