// Errors: one exception type for everything GPUMix reports, carrying what was wrong, the
// numbers involved, and (for internal checks) where. OutOfMemory is separate so that a
// planner or a test can catch exactly that.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpumix {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds a message from any streamable pieces: str("got ", n, " rows").
template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// "1.5 GiB", "731 MiB", "12 KiB", "100 B".
std::string format_bytes(int64_t bytes);

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace gpumix

// GPUMIX_CHECK(cond, pieces...) throws gpumix::Error("pieces... [file:line]") when cond is
// false. Use it for user-facing validation as well as invariants: the message must say what
// was wrong and the numbers.
#define GPUMIX_CHECK(cond, ...)                                                 \
  do {                                                                          \
    if (!(cond)) ::gpumix::detail::throw_error(__FILE__, __LINE__, ::gpumix::str(__VA_ARGS__)); \
  } while (0)
