// Helpers of the nn tests: a tiny model shape and reproducible token batches.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/gpt_config.h"

namespace gpumix::test {

inline GPTConfig tiny_config() {
  GPTConfig c;
  c.name = "tiny";
  c.L = 2;
  c.NH = 2;
  c.C = 8;
  c.V = 11;
  c.T = 6;
  return c;
}

// Tokens (B, T) in [0, V) from a seed (a fixed hash, no generator).
inline Tensor random_tokens(int64_t B, int64_t T, int V, uint64_t seed) {
  std::vector<int32_t> v(B * T);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (int32_t)((seed * 2654435761u + i * 40503u) % V);
  return Tensor::from_vector(v, {B, T});
}

}  // namespace gpumix::test
