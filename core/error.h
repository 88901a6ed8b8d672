// Errors: one exception type for everything GPUMix reports, carrying what was wrong and
// the numbers involved. Two kinds, told apart here and nowhere else:
//   InputError (GPUMIX_CHECK_INPUT): a user's mistake - a flag, a file, a folder. The
//     message says what is wrong and how to fix it, and names no source location.
//   Error (GPUMIX_CHECK): an invariant that only a bug breaks. The message ends with
//     [file:line], so that a report leads to the code.
// OutOfMemory is separate so that a planner or a test can catch exactly that.
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

class InputError : public Error {
 public:
  using Error::Error;
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
// A count for tables: 1234 -> "1.2k", 2.5e6 -> "2.50M", 1.3e9 -> "1.30B".
std::string human_count(double x);
// A value with an SI prefix, 3 significant digits: (1.23e9, "FLOP/s") -> "1.23 GFLOP/s" (k to P).
std::string format_si(double x, const char* unit);

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace gpumix

// GPUMIX_CHECK(cond, pieces...) throws gpumix::Error("pieces... [file:line]") when cond is
// false: for invariants, whose failure is a bug. The message must say what was wrong and the
// numbers.
#define GPUMIX_CHECK(cond, ...)                                                 \
  do {                                                                          \
    if (!(cond)) ::gpumix::detail::throw_error(__FILE__, __LINE__, ::gpumix::str(__VA_ARGS__)); \
  } while (0)

// GPUMIX_CHECK_INPUT(cond, pieces...) throws gpumix::InputError("pieces...") when cond is
// false: for what a user gave (flags, files, folders); the message names the input, what is
// wrong with it, the numbers and the fix.
#define GPUMIX_CHECK_INPUT(cond, ...)                                           \
  do {                                                                          \
    if (!(cond)) throw ::gpumix::InputError(::gpumix::str(__VA_ARGS__));        \
  } while (0)
