#include "tools/size_flag.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "core/precision.h"
#include "dist/plan/planner.h"

namespace gpumix::tools {

int64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = (char)std::tolower((unsigned char)c);
  double scale = -1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kib" || unit == "k") scale = 1024.0;
  else if (unit == "mib" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "gib" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  if (used == 0 || scale < 0 || !(value > 0) || !std::isfinite(value))
    throw std::invalid_argument("cannot read '" + text + "' as a memory size; write e.g. 512MiB, "
                                "2GiB, 1.5GB or a byte count");
  return (int64_t)(value * scale);
}

void check_global_batch_flag(int64_t global_batch) {
  using dist::kMaxGlobalBatch;
  if (global_batch > kMaxGlobalBatch)
    throw std::invalid_argument("--global-batch " + std::to_string(global_batch) + " is more than the planners handle (" +
                                std::to_string(kMaxGlobalBatch) + " sequences per step)");
}

std::optional<DType> parse_dtype_flag(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return compute_dtype_from_name(text, "--dtype");
}

void check_profile_flags(int repeats, int max_micro_batch, const std::string& repeats_flag,
                         const std::string& max_micro_batch_flag) {
  if (max_micro_batch < 1)
    throw std::invalid_argument(max_micro_batch_flag + " must be at least 1, got " + std::to_string(max_micro_batch));
  if (repeats < 1) throw std::invalid_argument(repeats_flag + " must be at least 1, got " + std::to_string(repeats));
}

void check_seq_flag(bool given, int64_t seq, const std::string& default_is) {
  if (given && seq < 1)
    throw std::invalid_argument("--seq must be at least 1, got " + std::to_string(seq) + "; leave --seq out for " +
                                default_is);
}

int parse_sharding_flag(const std::string& text) {
  if (text == "auto") return -1;
  if (text == "full") return 0;
  char* end = nullptr;
  const long g = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || !end || *end || g < 1 || g > 1 << 20)
    throw std::invalid_argument("--sharding " + text + " is not auto, full or a group size >= 1 (hybrid in groups "
                                "of that many ranks)");
  return (int)g;
}

}  // namespace gpumix::tools
