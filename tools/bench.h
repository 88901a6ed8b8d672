// gpumix bench: every kernel of one training step at a model's shapes, timed on each listed
// device through the op API training uses (core/ops.h: the same dispatch, the same backend
// kernels), beside that device's measured roofs (a streaming copy for bandwidth, the
// library GEMM's best for compute, in the run's dtype). cmd_bench.cpp prints, compares and
// draws what this measures; the JSON written here is what `gpumix bench compare` reads.
//
// Glossary: B batch, T sequence, C channels, L layers, NH heads, V vocabulary, N = B*T rows.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/gpt_config.h"

namespace gpumix::tools {

// One kernel of the step, as measured.
struct KernelResult {
  std::string role;     // "qkv.fwd", "attn.bwd", "adamw", ...
  std::string group;    // "block" (once per layer), "embed", "head", "step" (once per step)
  std::string what;     // the op call and its shape: "matmul_forward (8192,768)x(2304,768)"
  int per_block = 0;    // calls in one block
  int per_step = 0;     // calls in one step: per_block * L + those outside the blocks
  double flops = 0;     // per call (counted as the model's arithmetic)
  double bytes = 0;     // per call, each element at its stored size
  double median_s = 0;  // per call; 0 when it did not run (see `skipped`)
  double min_s = 0, max_s = 0;
  std::vector<double> times_s;  // every timed repeat
  std::string skipped;          // why it did not run ("" when it ran)
};

// A device's measured roofs, beside the datasheet's for a GPU in dist/plan/device_catalog.
struct Roofs {
  double bandwidth_Bps = 0;  // best streaming copy (read + write bytes over time)
  double peak_flops = 0;     // best library GEMM in the run's dtype
  std::string gemm_shape;    // the size that gave it ("2048^3")
  std::string datasheet;     // catalog name ("" for CPUs and GPUs not in the catalog)
  double datasheet_flops = 0, datasheet_Bps = 0;
};

struct DeviceResult {
  std::string label;         // as given in --devices ("cpu", "cpu:slow=3", "cuda:0")
  std::string name;          // the device's own name ("cpu", "NVIDIA L4")
  bool emulated_gpu = false; // the emulated CUDA device: its numbers are never a speed
  bool emulated = false;     // a memory cap or a slowdown (emulation, core/device.h)
  double slowdown = 1;
  int threads = 0;           // OpenMP threads of a CPU device
  Roofs roofs;
  std::vector<KernelResult> kernels;
};

struct BenchOptions {
  std::vector<std::string> devices;  // one entry per device ("cpu", "cuda:0:slow=2")
  GPTConfig model;
  int seq = 0, batch = 0;
  DType dtype = DType::bf16;
  std::vector<std::string> filters;  // roles (or role prefixes: "qkv", "attn"); empty: all
  int repeat = 5;
  bool progress = true;              // kernel i of n and the ETA on stderr
};

// Every role this model's step has, in step order ("embed.fwd", ..., "adamw").
std::vector<std::string> bench_roles(bool multi_device, DType dtype);
// Throws std::invalid_argument for a filter that names no role (listing the roles).
void check_filters(const std::vector<std::string>& filters, bool multi_device, DType dtype);

// Measures every device in turn (all of this machine's cores for a CPU device), then the
// collectives among them (threads of this process, one rank per device). Throws
// std::invalid_argument (bad --devices, a filter naming no role, shapes that do not fit).
nlohmann::json run_bench(const BenchOptions& o);

// The roof time of a kernel on a device: what it takes at the roof that binds it.
double roof_seconds(const KernelResult& k, const Roofs& r);

KernelResult kernel_from_json(const nlohmann::json& j);
Roofs roofs_from_json(const nlohmann::json& j);

}  // namespace gpumix::tools
