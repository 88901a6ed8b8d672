// Plain reference twins of the CPU kernels: straightforward loops, single-threaded,
// written to be obviously right rather than fast. They are the oracles of the tests
// and the baselines of the benchmarks.
#pragma once

#include <cstdint>

namespace gpumix::kernels::cpu::ref {
#include "kernels/cpu/kernels.inc"
}  // namespace gpumix::kernels::cpu::ref
