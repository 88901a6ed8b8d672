// The emulated CUDA device: the vector types GPUMix's CUDA code uses, as in CUDA's
// vector_types.h (same names, members, sizes and alignments):
//   dim3 (x, y, z; unset members 1), uint3, float4 (16-byte aligned), uint2 (8-byte
//   aligned), make_float4, make_uint2, make_uint3.
// Anything else (int4, float2, double2, ...) is a compile error on purpose.
#pragma once

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

struct alignas(16) float4 {
  float x, y, z, w;
};

struct alignas(8) uint2 {
  unsigned int x, y;
};

inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }

static_assert(sizeof(float4) == 16 && alignof(float4) == 16, "float4 as CUDA's");
static_assert(sizeof(uint2) == 8 && alignof(uint2) == 8, "uint2 as CUDA's");
