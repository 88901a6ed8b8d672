#include "core/dtype.h"

#include <cstring>

#include "core/error.h"

namespace gpumix {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

DType dtype_from_name(const char* name) {
  for (DType t : {DType::f32, DType::bf16, DType::i32})
    if (!std::strcmp(name, dtype_name(t))) return t;
  if (!std::strcmp(name, "fp32")) return DType::f32;
  GPUMIX_CHECK_INPUT(false, "unknown dtype '", name, "'; valid: f32 (or fp32), bf16, i32");
}

}  // namespace gpumix
