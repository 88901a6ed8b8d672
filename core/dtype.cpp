#include "core/dtype.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace gpumix {

namespace {
constexpr bool table_in_enum_order() {
  for (int i = 0; i < kNumDTypes; ++i)
    if ((int)kDTypes[i].dtype != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kDTypes must list the dtypes in the order of the enum");
static_assert(dtype_size(DType::bf16) == sizeof(bf16) && dtype_size(DType::f16) == sizeof(f16) &&
                  dtype_size(DType::f32) == sizeof(float) && dtype_size(DType::i32) == sizeof(int32_t),
              "kDTypes' sizes are those of the C++ storage types");
}  // namespace

const char* dtype_name(DType t) { return (int)t < kNumDTypes ? dtype_info(t).name : "?"; }

const char* dtype_names() {
  static const std::string names = [] {
    std::string s;
    for (const DTypeInfo& d : kDTypes) {
      s += (s.empty() ? "" : ", ") + std::string(d.name);
      if (d.alias) s += std::string(" (or ") + d.alias + ")";
    }
    return s;
  }();
  return names.c_str();
}

DType dtype_from_name(const char* name) {
  for (const DTypeInfo& d : kDTypes)
    if (!std::strcmp(name, d.name) || (d.alias && !std::strcmp(name, d.alias))) return d.dtype;
  GPUMIX_CHECK_INPUT(false, "unknown dtype '", name, "'; valid: ", dtype_names());
}

}  // namespace gpumix
