// Reading the JSON files of dist/ (profile, cluster, plan) with errors that name the
// field: "profile: devices[1].samples[0].block_fwd_s: must be >= 0, got -1".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace gpumix::dist {

// A file that does not follow its format. The message starts with the field's path.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void format_error(const std::string& where, const std::string& what);

// `where` is the path of j ("profile: devices[1]"); the field's path is where + "." + key.
const nlohmann::json& field(const nlohmann::json& j, const std::string& key,
                            const std::string& where);
bool has_field(const nlohmann::json& j, const std::string& key);
double number_field(const nlohmann::json& j, const std::string& key, const std::string& where);
double number_field_or(const nlohmann::json& j, const std::string& key, const std::string& where,
                       double fallback);
int64_t int_field(const nlohmann::json& j, const std::string& key, const std::string& where);
int64_t int_field_or(const nlohmann::json& j, const std::string& key, const std::string& where,
                     int64_t fallback);
std::string string_field(const nlohmann::json& j, const std::string& key,
                         const std::string& where);
std::string string_field_or(const nlohmann::json& j, const std::string& key,
                            const std::string& where, const std::string& fallback);
bool bool_field_or(const nlohmann::json& j, const std::string& key, const std::string& where,
                   bool fallback);
const nlohmann::json& array_field(const nlohmann::json& j, const std::string& key,
                                  const std::string& where);
// A compute dtype (core/precision.h's names: "bf16", "f32" or "fp32").
DType compute_dtype_field(const nlohmann::json& j, const std::string& key, const std::string& where);

// Checks for a value that must lie in [lo, hi].
void check_range(double value, double lo, double hi, const std::string& where);

// Byte sizes: a number of bytes, or a string with a unit ("2GiB", "512 MiB", "22.5GB", "100").
double parse_bytes(const std::string& text, const std::string& where);
double bytes_field(const nlohmann::json& j, const std::string& key, const std::string& where);
// "24.0 GiB", "731 MiB": for messages and tables.
std::string format_bytes(double bytes);

nlohmann::json parse_json_file(const std::string& path);  // FormatError "<path>: not valid JSON: ..."

// The JSON file at `path` converted by from_json (profile_from_json, ...): an error in its
// text or in one of its fields is a FormatError "<path>: <what>"; a file that cannot be
// opened, a runtime_error that names it.
template <class F>
auto read_json_file(const std::string& path, F&& from_json) -> decltype(from_json(nlohmann::json())) {
  const nlohmann::json j = parse_json_file(path);
  try {
    return from_json(j);
  } catch (const FormatError& e) {
    throw FormatError(path + ": " + e.what());
  }
}

void write_json_file(const nlohmann::json& j, const std::string& path);

}  // namespace gpumix::dist
