// Counter-based random numbers (Philox4x32-10, kernels/philox.h). A stream is named by a
// 64-bit key derived from (seed, stream name, step); element i of the stream is a pure
// function of (key, i). So the same numbers come out on any device and whatever the split
// of the work: a rank filling rows [r0, r1) of a tensor passes offset r0 * row_size.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpumix {

// splitmix64 finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t x);

// The key of stream `name` at `step` under `seed`.
uint64_t rng_key(uint64_t seed, std::string_view name, uint64_t step = 0);

}  // namespace gpumix
