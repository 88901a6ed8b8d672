// Element types: f32 and bf16 are the compute dtypes (core/precision.h says which tensor
// has which); i32 holds tokens and targets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"

namespace gpumix {

enum class DType : uint8_t { f32, bf16, i32 };

constexpr size_t dtype_size(DType t) { return t == DType::bf16 ? 2 : 4; }
const char* dtype_name(DType t);
// Parses "f32" (also "fp32"), "bf16", "i32"; throws Error listing the valid names otherwise.
DType dtype_from_name(const char* name);

// One bf16 value with round-to-nearest-even conversion from float.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(f32_to_bf16_bits(f)) {}
  explicit operator float() const { return bf16_bits_to_f32(bits); }
};

// The C++ type of each DType, for Tensor::data<T>() checks.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }

}  // namespace gpumix
