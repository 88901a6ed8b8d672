#include "dist/plan/compute_dtype.h"

#include "core/error.h"
#include "core/precision.h"
#include "dist/plan/device_catalog.h"
#include "kernels/cpu/isa.h"

namespace gpumix::dist {

ComputeDtype choose_compute_dtype(const ComputeDtypeSources& s) {
  // The first rank whose device lacks native bf16, and how to say where.
  int lacking = -1;
  for (size_t r = 0; r < s.native.size() && lacking < 0; ++r)
    if (s.native[r].empty()) lacking = (int)r;
  bool all_alike = true;
  for (const std::string& f : s.native) all_alike = all_alike && f == s.native[0];
  const std::string here = all_alike ? "this CPU" : str("rank ", lacking, "'s CPU");
  const char* no_bf16 = "neither avx512_bf16 nor AMX-BF16";
  ComputeDtype c;
  std::string source;
  if (s.flag) {
    GPUMIX_CHECK_INPUT(s.plan_file.empty() || *s.flag == s.plan_dtype, "plan ", s.plan_file, " was made for ",
                       dtype_name(s.plan_dtype), " but --dtype is ", dtype_name(*s.flag),
                       "; its memory and times hold only in its dtype: make the plan again with `gpumix plan "
                       "--dtype ", dtype_name(*s.flag), "`, or drop --dtype to train in ", dtype_name(s.plan_dtype));
    c.dtype = *s.flag;
    source = "--dtype";
  } else if (!s.plan_file.empty()) {
    c.dtype = s.plan_dtype;
    source = "the plan file's";
  } else if (s.checkpoint) {
    c.dtype = *s.checkpoint;
    source = "the checkpoint's";
  } else {
    c.dtype = lacking < 0 ? DType::bf16 : DType::f32;
    const std::string what = lacking >= 0 ? here + " has " + no_bf16
                             : !all_alike ? "every rank's device computes it natively"
                             : s.native[0] == native_bf16_name(NativeBf16::cuda_gpu)
                                 ? std::string("the devices are CUDA GPUs")
                                 : here + " has " + s.native[0];
    c.why = str(dtype_name(c.dtype), " (default: ", what, ")");
    return c;
  }
  check_compute_dtype(c.dtype, "the compute dtype");
  if (c.dtype == DType::bf16 && lacking >= 0) {
    c.why = str("bf16 (", source, "; ", here, " has ", no_bf16, ": the portable bf16 kernels)");
    c.note = str("bf16 on a CPU with ", no_bf16, " (", all_alike ? std::string("this one") : str("rank ", lacking),
                 "): the portable bf16 kernels run, correct but slower than f32");
  } else {
    c.why = str(dtype_name(c.dtype), " (", source, ")");
  }
  return c;
}

NativeBf16 native_bf16(Device device) {
  if (device.is_cuda()) return NativeBf16::cuda_gpu;
  static const bool native = cpu_has_native_bf16();
  if (!native) return NativeBf16::none;
  return kernels::cpu::isa_supported(kernels::cpu::Isa::avx512_bf16) ? NativeBf16::avx512_bf16 : NativeBf16::amx_bf16;
}

const char* native_bf16_name(NativeBf16 native) {
  switch (native) {
    case NativeBf16::none: return "";
    case NativeBf16::avx512_bf16: return "avx512_bf16";
    case NativeBf16::amx_bf16: return "AMX-BF16";
    case NativeBf16::cuda_gpu: return "a CUDA GPU";
  }
  return "";
}

std::string catalog_native_bf16(const std::string& device_type) {
  return device_spec(device_type).dtype_bytes == 2 ? "16-bit rates" : "";
}

DType compute_dtype_on(Device device, std::optional<DType> flag) {
  ComputeDtypeSources sources;
  sources.flag = flag;
  sources.native = {native_bf16_name(native_bf16(device))};
  return choose_compute_dtype(sources).dtype;
}

std::string compute_dtype_help() {
  return "compute dtype: bf16 or fp32 (f32); default: a plan file's, else a resumed checkpoint's, else bf16 "
         "where every device computes it natively (a CUDA GPU; a CPU with avx512_bf16 or AMX-BF16; in a "
         "described cluster, a device type with 16-bit rates), fp32 elsewhere";
}

}  // namespace gpumix::dist
