#include "core/precision.h"

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace gpumix {

void check_compute_dtype(DType t, const char* what) {
  GPUMIX_CHECK(is_compute_dtype(t), what, ": the compute dtype must be f32 or bf16, got ",
               dtype_name(t));
}

DType compute_dtype_from_name(const std::string& name, const char* what) {
  if (name == "bf16") return DType::bf16;
  if (name == "fp32" || name == "f32") return DType::f32;
  GPUMIX_CHECK(false, what, ": unknown value '", name, "'; valid: bf16, fp32 (or f32)");
}

bool cpu_has_native_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const unsigned long long xcr0 = ((unsigned long long)xcr0_hi << 32) | xcr0_lo;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512f = b & (1u << 16), amx_bf16 = d & (1u << 22);
  unsigned a1 = 0, b1, c1, d1;
  const bool avx512_bf16 = a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5));
  // The OS must save the state: SSE, AVX, opmask and both halves of the ZMM registers
  // (XCR0 bits 1, 2, 5, 6, 7) for AVX-512; the tile config and data (bits 17, 18) for AMX.
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6, os_amx = (xcr0 & 0x60000) == 0x60000;
  return (avx512f && avx512_bf16 && os_avx512) || (amx_bf16 && os_amx);
#else
  return false;
#endif
}

DType default_compute_dtype(Device device) {
  if (device.is_cuda()) return DType::bf16;
  static const bool native = cpu_has_native_bf16();
  return native ? DType::bf16 : DType::f32;
}

}  // namespace gpumix
