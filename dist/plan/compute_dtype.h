// The compute dtype of a run, decided here and nowhere else: `gpumix train` (through the
// trainer), `gpumix profile`, `gpumix bench`, `gpumix selfcheck`, the C API and the
// simulator (for a described cluster) all ask choose_compute_dtype, and every tool's
// --dtype flag says the same policy with compute_dtype_help(). What a compute dtype means
// for each op argument is core/precision.h's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace gpumix::dist {

// The run's compute dtype and why, for the settings table ("bf16 (default: this CPU has
// avx512_bf16)").
struct ComputeDtype {
  DType dtype = DType::f32;
  std::string why;
  std::string note;  // "" or a line to print: bf16 forced where it is not native
};

// What decides it, in this order: --dtype; else the plan file's dtype (a --dtype that
// differs from it is an error naming both: the plan's memory holds only in its dtype);
// else, when resuming, the checkpoint's (which is otherwise informational: a run may
// resume in either dtype); else bf16 when every rank's device computes it natively, f32
// otherwise. bf16 on a device without it is allowed: the portable bf16 kernels, slower.
struct ComputeDtypeSources {
  std::optional<DType> flag;
  std::string plan_file;  // "" : no plan file
  DType plan_dtype = DType::f32;
  std::optional<DType> checkpoint;
  // Per rank: what makes its device compute bf16 natively (native_bf16_name: "avx512_bf16",
  // "AMX-BF16", "a CUDA GPU", or a described device's "16-bit rates"), or "" when it does not.
  std::vector<std::string> native;
};
ComputeDtype choose_compute_dtype(const ComputeDtypeSources& sources);

// What makes a device of this machine compute bf16 natively, as a small number that ranks
// can exchange: a CUDA GPU (every GPU the kernels are built for), a CPU whose kernels'
// AVX512-BF16 path runs (kernels/cpu/isa.h) or one with AMX-BF16 (core/precision.h's
// cpu_has_native_bf16). An emulated CPU device is the machine's CPU.
enum class NativeBf16 : int { none = 0, avx512_bf16, amx_bf16, cuda_gpu };
NativeBf16 native_bf16(Device device);
// "" (none), "avx512_bf16", "AMX-BF16", "a CUDA GPU": a ComputeDtypeSources::native entry.
const char* native_bf16_name(NativeBf16 native);
// A described device type (dist/plan/device_catalog.h) computes bf16 natively when its
// catalog rate is a 16-bit one (the GPUs): "16-bit rates", else "".
std::string catalog_native_bf16(const std::string& device_type);

// The compute dtype of work on one kind of device of this machine where only a --dtype
// flag can say otherwise (`gpumix profile`, `gpumix bench`, `gpumix selfcheck`).
DType compute_dtype_on(Device device, std::optional<DType> flag = {});

// The help of every tool's --dtype flag: its values and the policy above.
std::string compute_dtype_help();

}  // namespace gpumix::dist
