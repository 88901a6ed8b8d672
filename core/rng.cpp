#include "core/rng.h"

namespace gpumix {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t rng_key(uint64_t seed, std::string_view name, uint64_t step) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return mix64(mix64(seed) ^ h) ^ mix64(step + 0x632BE59BD9B4E019ull);
}

}  // namespace gpumix
