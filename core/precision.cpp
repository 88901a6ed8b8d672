#include "core/precision.h"

#include "core/error.h"
#include "core/runtime.h"
#include "kernels/cpu/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace gpumix {

void check_compute_dtype(DType t, const char* what) {
  GPUMIX_CHECK(t == DType::f32 || t == DType::bf16, what, ": the compute dtype must be f32 or bf16, got ",
               dtype_name(t));
}

DType compute_dtype_from_name(const std::string& name, const char* what) {
  if (name == "bf16") return DType::bf16;
  if (name == "fp32" || name == "f32") return DType::f32;
  GPUMIX_CHECK_INPUT(false, what, ": unknown value '", name, "'; valid: bf16, fp32 (or f32)");
}

namespace {
// AMX-BF16 (cpuid leaf 7 EDX bit 22) with the OS saving the tile config and data (XCR0
// bits 17, 18). Every such CPU also has AVX512-BF16 so far; checked for CPUs to come.
bool cpu_has_amx_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22))) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & 0x60000u) == 0x60000u;
#else
  return false;
#endif
}
}  // namespace

bool cpu_has_native_bf16() {
  return kernels::cpu::isa_supported(kernels::cpu::Isa::avx512_bf16) || cpu_has_amx_bf16();
}

bool backend_supports(Device device, DType dtype) {
  const DeviceRuntime* runtime = built_runtime(device);
  return is_compute_dtype(dtype) && runtime && runtime->computes(dtype);
}

void check_backend_supports(Device device, DType dtype, const char* what) {
  if (backend_supports(device, dtype)) return;
  const char* kind = device.is_cpu() ? "CPU" : "CUDA";
  GPUMIX_CHECK_INPUT(built_runtime(device), what, " ", dtype_name(dtype), ": device ",
                     device.str(), " needs the CUDA backend, which this build of GPUMix lacks; "
                     "rebuild with nvcc available (meson setup -Dcuda=enabled)");
  std::string valid;
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    if (backend_supports(device, t)) valid += (valid.empty() ? "" : ", ") + std::string(dtype_name(t));
  const DType fix = backend_supports(device, DType::bf16) ? DType::bf16 : DType::f32;
  GPUMIX_CHECK_INPUT(false, what, " ", dtype_name(dtype), " on ", device.str(), ": the ", kind,
                     " backend computes in ", valid, ": use ", what, " ", dtype_name(fix));
}

}  // namespace gpumix
