// Shared by the libFuzzer targets: a scratch folder per process and the rule for what
// counts as a finding.
//
// A parser of outside input may reject its input only with its documented error: an
// exception derived from std::runtime_error (FormatError, CheckpointError, ...) or
// std::logic_error (std::invalid_argument from the data layer). Anything else escaping it
// (nlohmann::json::exception, which names no field; std::bad_alloc from a size taken on
// trust; a crash; a sanitizer report) is a finding: libFuzzer stops and saves the input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace gpumix::fuzz {

// A private folder under $TMPDIR (or /tmp), created once per process, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/gpumix-fuzz-XXXXXX";
    if (!::mkdtemp(templ.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string keep = templ;
    std::atexit([] { std::system(("rm -rf '" + keep + "'").c_str()); });
    return templ;
  }();
  return dir;
}

// Writes bytes to `path` (replacing it).
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    std::abort();
  }
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// Runs fn; the documented rejections are fine, everything else propagates (a finding).
template <class F>
void expect_clean_rejection(F&& fn) {
  try {
    fn();
  } catch (const std::length_error&) {
    throw;  // a size taken on trust
  } catch (const std::runtime_error&) {
  } catch (const std::logic_error&) {
  }
}

}  // namespace gpumix::fuzz
