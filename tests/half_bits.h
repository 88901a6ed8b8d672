// For the tests only: bf16 and f16 values compared and printed by their bits, so that
// EXPECT_EQ on them (and on vectors of them) checks bit-for-bit equality, NaN payloads and
// the sign of zero included. The library types define no operator== (float semantics or
// bits would be a choice each caller should make).
#pragma once

#include <ostream>

#include "kernels/half_types.h"

namespace gpumix {

inline bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
inline bool operator!=(bf16 a, bf16 b) { return a.bits != b.bits; }
inline bool operator==(f16 a, f16 b) { return a.bits == b.bits; }
inline bool operator!=(f16 a, f16 b) { return a.bits != b.bits; }
inline std::ostream& operator<<(std::ostream& o, bf16 h) {
  return o << "bf16(" << (float)h << ", 0x" << std::hex << h.bits << std::dec << ")";
}
inline std::ostream& operator<<(std::ostream& o, f16 h) {
  return o << "f16(" << (float)h << ", 0x" << std::hex << h.bits << std::dec << ")";
}

}  // namespace gpumix
