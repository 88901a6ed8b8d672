#include "core/error.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace gpumix {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  int unit = 0;
  while (unit < 4 && (value >= 1024.0 || value <= -1024.0)) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%" PRId64 " B", bytes);
  else
    std::snprintf(buf, sizeof buf, value < 10 && value > -10 ? "%.2f %s" : "%.1f %s", value, units[unit]);
  return buf;
}

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

std::string format_si(double x, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int p = 0;
  while (std::fabs(x) >= 1000 && p < 5) {
    x /= 1000;
    ++p;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g %s%s", x, prefixes[p], unit);
  return buf;
}

namespace detail {

[[noreturn]] void throw_error(const char* file, int line, const std::string& message) {
  // Keep the location short: the path below the source root.
  const char* base = file;
  for (const char* root : {"core/", "autograd/", "nn/", "dist/", "kernels/", "tools/"}) {
    if (const char* p = std::strstr(file, root)) {
      base = p;
      break;
    }
  }
  throw Error(str(message, " [", base, ":", line, "]"));
}

}  // namespace detail
}  // namespace gpumix
