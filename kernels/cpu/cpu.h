// CPU kernels: compute on raw fp32 pointers and sizes. Nothing here knows tensors or
// gradients. Every kernel has a plain reference twin with the same signature in
// namespace gpumix::kernels::cpu::ref (kernels/cpu/ref.h), the oracle of its tests.
//
// Glossary: B batch, T sequence, C channels, NH heads, HS = C / NH head size,
// V vocabulary, N rows (often B*T), OC output channels.
//
// Conventions:
// - Row-major, contiguous.
// - Backward kernels ACCUMULATE (+=) into every gradient they write; any gradient
//   pointer may be null, meaning "not needed".
// - Sizes of element counts are int64_t; dimensions are int.
#pragma once

#include <cstdint>

#include "kernels/half_types.h"  // bf16, f16: the 16-bit storage types of the signatures

namespace gpumix::kernels::cpu {
#include "kernels/cpu/kernels.inc"
}  // namespace gpumix::kernels::cpu
