// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. Element i of a stream is a pure function of (key, i), so
// the same numbers come out on any device and under any split of the work.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/half_types.h"  // GPUMIX_HD

namespace gpumix {

struct Philox4 {
  uint32_t v[4];
};

GPUMIX_HD inline Philox4 philox4x32_10(uint64_t key, uint64_t counter) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;  // Weyl key schedule between rounds
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from the top 24 bits: exactly representable in fp32.
GPUMIX_HD inline float philox_uniform(uint32_t bits) {
  return (float)(bits >> 8) * (1.0f / 16777216.0f);
}

// Element `index` of the uniform stream `key`: counter index/4, lane index%4.
GPUMIX_HD inline float philox_uniform_at(uint64_t key, uint64_t index) {
  return philox_uniform(philox4x32_10(key, index >> 2).v[index & 3]);
}

// Element `index` of the standard normal stream `key`: Box-Muller on the two lanes of a
// pair, so elements 2j and 2j+1 share one counter.
GPUMIX_HD inline float philox_normal_at(uint64_t key, uint64_t index) {
  const Philox4 r = philox4x32_10(key, index >> 1);
  const int lane = (int)(index & 1) * 2;
  const float u1 = ((float)(r.v[lane] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = philox_uniform(r.v[lane + 1]);
  const float radius = sqrtf(-2.0f * logf(u1));
  return radius * cosf(6.2831853071795864f * u2);
}

}  // namespace gpumix
