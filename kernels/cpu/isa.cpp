#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gpumix::kernels::cpu {

namespace {

Isa best_supported() {
  if (isa_supported(Isa::avx512_bf16)) return Isa::avx512_bf16;
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  return Isa::portable;
}

Isa from_env() {
  const char* env = std::getenv("GPUMIX_CPU_ISA");
  if (!env || !*env) return best_supported();
  for (Isa isa : {Isa::portable, Isa::avx512, Isa::avx512_bf16}) {
    if (std::strcmp(env, isa_name(isa)) != 0) continue;
    if (!isa_supported(isa))
      throw std::invalid_argument(std::string("GPUMIX_CPU_ISA=") + env +
                                  ": this CPU does not support it (best: " +
                                  isa_name(best_supported()) + "); unset it or pick a lower one");
    return isa;
  }
  throw std::invalid_argument(std::string("GPUMIX_CPU_ISA=") + env +
                              " is unknown; use portable, avx512 or avx512_bf16 (or unset it)");
}

// -1: not decided yet.
std::atomic<int> g_isa{-1};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  // __builtin_cpu_supports also checks that the OS saves the AVX-512 state (XCR0).
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx512: return avx512;
    case Isa::avx512_bf16: return avx512 && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

Isa cpu_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    v = (int)from_env();
    int expected = -1;
    if (!g_isa.compare_exchange_strong(expected, v)) v = expected;  // another thread won
  }
  return (Isa)v;
}

void set_cpu_isa(Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("set_cpu_isa: this CPU does not support ") +
                                isa_name(isa) + " (best: " + isa_name(best_supported()) + ")");
  g_isa.store((int)isa, std::memory_order_relaxed);
}

}  // namespace gpumix::kernels::cpu
