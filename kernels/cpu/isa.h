// Which instruction-set path the CPU kernels take, decided in this one place at run time,
// so that one binary runs on any x86-64: the portable path (baseline x86-64, SSE2) always
// works; the AVX-512 paths are taken where the CPU has them.
//
//   portable      plain loops compiled for baseline x86-64
//   avx512        the same loops compiled for AVX-512 F/BW/VL/DQ (16 floats a vector)
//   avx512_bf16   avx512 + the bf16 dot products (vdpbf16ps) in the attention tiles
//
// The default is the best the CPU supports; GPUMIX_CPU_ISA=portable|avx512|avx512_bf16
// caps it (tests run both paths in one process through set_cpu_isa). oneDNN, which runs
// the GEMMs, dispatches on its own (DNNL_MAX_CPU_ISA caps it).
#pragma once

namespace gpumix::kernels::cpu {

enum class Isa : int { portable = 0, avx512 = 1, avx512_bf16 = 2 };

const char* isa_name(Isa isa);
// Whether this CPU (and its OS) runs the path.
bool isa_supported(Isa isa);
// The path the kernels take now. The first call reads GPUMIX_CPU_ISA and throws
// std::invalid_argument for an unknown or unsupported value.
Isa cpu_isa();
// Sets the path (all threads); throws std::invalid_argument if the CPU lacks it.
void set_cpu_isa(Isa isa);

}  // namespace gpumix::kernels::cpu

// Function attributes of the AVX-512 variants. Kernel bodies are written once as
// always-inline functions and wrapped by one function per path (see elementwise.cpp).
#define GPUMIX_INLINE inline __attribute__((always_inline))
#define GPUMIX_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define GPUMIX_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,avx512bf16")))

// Defines `name` (static), which runs body(args) compiled for AVX-512 or for baseline
// x86-64, as cpu_isa() says. params / args: the parenthesised parameter list and the
// matching argument list.
#define GPUMIX_ISA_VARIANTS(name, body, params, args)                                      \
  static void name##_portable params { body args; }                                       \
  GPUMIX_TARGET_AVX512 static void name##_avx512 params { body args; }                    \
  [[maybe_unused]] static void name params {                                               \
    if (::gpumix::kernels::cpu::cpu_isa() >= ::gpumix::kernels::cpu::Isa::avx512)          \
      name##_avx512 args;                                                                  \
    else                                                                                   \
      name##_portable args;                                                                \
  }
