// Plain reference twins of the CPU kernels: straightforward loops, single-threaded,
// written to be obviously right rather than fast. They are the oracles of the tests
// and the baselines of the benchmarks.
#pragma once

#include <cstdint>

#include "kernels/half_types.h"  // bf16, f16: the 16-bit storage types of the signatures

namespace gpumix::kernels::cpu::ref {
#include "kernels/cpu/kernels.inc"
}  // namespace gpumix::kernels::cpu::ref
