// Element types as data: one table (kDTypes) holds every per-dtype fact (name, size, the
// NCCL type, range, whether it is a 16-bit float format), and everything else derives from
// it; nothing tests `t == DType::bf16 ? 2 : 4`. f32, bf16 and f16 are float dtypes (which
// device computes in which: core/precision.h); i32 holds tokens and targets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/half_types.h"

namespace gpumix {

enum class DType : uint8_t { f32, bf16, i32, f16 };

struct DTypeInfo {
  DType dtype;
  const char* name;   // as printed and parsed: "f32", "bf16", "f16", "i32"
  const char* alias;  // also parsed ("fp32", "fp16"), or nullptr
  uint8_t size;       // bytes per element
  bool is_float;      // holds floating-point values (converts to and from fp32)
  bool is_16bit_float;  // a 16-bit float storage format (kernels/half_types.h)
  double max_finite;  // the largest finite value (i32: INT32_MAX)
  double min_normal;  // the smallest positive normal value (i32: 1)
  int mantissa_bits;  // explicit mantissa bits (i32: 31 value bits)
  // NCCL's ncclDataType_t value (its ABI; dist/comm/comm_nccl.cpp static_asserts each).
  int nccl_type;
};

// In the order of the enum: kDTypes[(int)t].dtype == t (static_assert in dtype.cpp).
inline constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", "fp32", 4, true, false, 3.4028234663852886e38, 1.1754943508222875e-38, 23, 7},
    {DType::bf16, "bf16", nullptr, 2, true, true, 3.3895313892515355e38, 1.1754943508222875e-38, 7, 9},
    {DType::i32, "i32", nullptr, 4, false, false, 2147483647.0, 1.0, 31, 2},
    {DType::f16, "f16", "fp16", 2, true, true, 65504.0, 6.103515625e-05, 10, 6},
};
inline constexpr int kNumDTypes = (int)(sizeof kDTypes / sizeof kDTypes[0]);

constexpr const DTypeInfo& dtype_info(DType t) { return kDTypes[(int)t]; }
constexpr size_t dtype_size(DType t) { return dtype_info(t).size; }
constexpr bool is_float_dtype(DType t) { return dtype_info(t).is_float; }
constexpr bool is_16bit_float(DType t) { return dtype_info(t).is_16bit_float; }
// The unit roundoff 2^-(mantissa bits + 1) of a float dtype: the relative error of one
// rounding to nearest (tests' tolerances are formulas of it).
constexpr double dtype_unit_roundoff(DType t) {
  double u = 0.5;
  for (int i = 0; i < dtype_info(t).mantissa_bits; ++i) u *= 0.5;
  return u;
}
const char* dtype_name(DType t);
// Parses a name or alias of kDTypes ("f32" or "fp32", "bf16", "f16" or "fp16", "i32");
// throws Error listing the valid names otherwise.
DType dtype_from_name(const char* name);
// The valid names, "f32 (or fp32), bf16, i32, f16 (or fp16)", for messages.
const char* dtype_names();

// The C++ type of each DType, for Tensor::data<T>() checks.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }

}  // namespace gpumix
