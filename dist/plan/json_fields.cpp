#include "dist/plan/json_fields.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/precision.h"

namespace gpumix::dist {

using nlohmann::json;

void format_error(const std::string& where, const std::string& what) {
  throw FormatError(where + ": " + what);
}

static std::string path_of(const std::string& where, const std::string& key) {
  return where + "." + key;
}

bool has_field(const json& j, const std::string& key) {
  return j.is_object() && j.contains(key) && !j.at(key).is_null();
}

const json& field(const json& j, const std::string& key, const std::string& where) {
  if (!j.is_object()) format_error(where, "must be an object");
  if (!has_field(j, key)) format_error(path_of(where, key), "missing");
  return j.at(key);
}

double number_field(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number()) format_error(path_of(where, key), "must be a number, got " + v.dump());
  double d = v.get<double>();
  if (!std::isfinite(d)) format_error(path_of(where, key), "must be finite");
  return d;
}

double number_field_or(const json& j, const std::string& key, const std::string& where,
                       double fallback) {
  return has_field(j, key) ? number_field(j, key, where) : fallback;
}

int64_t int_field(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer())
    format_error(path_of(where, key), "must be an integer, got " + v.dump());
  return v.get<int64_t>();
}

int64_t int_field_or(const json& j, const std::string& key, const std::string& where,
                     int64_t fallback) {
  return has_field(j, key) ? int_field(j, key, where) : fallback;
}

std::string string_field(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) format_error(path_of(where, key), "must be a string, got " + v.dump());
  return v.get<std::string>();
}

std::string string_field_or(const json& j, const std::string& key, const std::string& where,
                            const std::string& fallback) {
  return has_field(j, key) ? string_field(j, key, where) : fallback;
}

bool bool_field_or(const json& j, const std::string& key, const std::string& where,
                   bool fallback) {
  if (!has_field(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) format_error(path_of(where, key), "must be true or false, got " + v.dump());
  return v.get<bool>();
}

const json& array_field(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_array()) format_error(path_of(where, key), "must be an array");
  return v;
}

DType compute_dtype_field(const json& j, const std::string& key, const std::string& where) {
  const std::string name = string_field(j, key, where);
  try {
    return compute_dtype_from_name(name, path_of(where, key).c_str());
  } catch (const Error& e) {
    throw FormatError(e.what());
  }
}

void check_range(double value, double lo, double hi, const std::string& where) {
  if (value < lo || value > hi) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "must lie in [%g, %g], got %g", lo, hi, value);
    format_error(where, buf);
  }
}

double parse_bytes(const std::string& text, const std::string& where) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    format_error(where, "'" + text + "' is not a size (e.g. 24GiB, 512MiB, 22.5GB)");
  }
  std::string unit;
  for (size_t i = pos; i < text.size(); i++)
    if (!std::isspace((unsigned char)text[i])) unit += (char)std::tolower((unsigned char)text[i]);
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else format_error(where, "unknown unit in '" + text + "' (use B, KiB, MiB, GiB, KB, MB, GB)");
  if (!(value >= 0) || !std::isfinite(value)) format_error(where, "'" + text + "' must be >= 0");
  return value * scale;
}

double bytes_field(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, where);
  if (v.is_string()) return parse_bytes(v.get<std::string>(), path_of(where, key));
  double d = number_field(j, key, where);
  if (d < 0) format_error(path_of(where, key), "must be >= 0");
  return d;
}

std::string format_bytes(double bytes) {
  char buf[64];
  double a = std::fabs(bytes);
  if (a >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1024.0 * 1024));
  else if (a >= 1024.0) std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

json parse_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open '" + path + "' for reading");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

void write_json_file(const json& j, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot open '" + path + "' for writing");
  out << j.dump(2) << "\n";
  if (!out) throw std::runtime_error("error writing '" + path + "'");
}

}  // namespace gpumix::dist
