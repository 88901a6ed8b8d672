// The gpumix program run as a child process by the tests of tests/tools: its exit code and
// its output, captured through files in a scratch folder.
#pragma once

#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gpumix::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs `gpumix <args>` (GPUMIX_EXE) with `threads` OpenMP threads, capturing stdout and
// stderr under `scratch`; with `launcher` (e.g. "mpirun -np 3") under it. A process ended by
// a signal reports 128 + its number, as a shell does.
inline Result gpumix(const std::vector<std::string>& args, const std::string& scratch,
                     const std::string& launcher = "", int threads = 1) {
  static std::atomic<int> counter{0};
  const std::string base = scratch + "/cmd" + std::to_string(counter++);
  std::string cmd = "OMP_NUM_THREADS=" + std::to_string(threads) + " " + (launcher.empty() ? "" : launcher + " ") +
                    quote(GPUMIX_EXE);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(base + ".out") + " 2>" + quote(base + ".err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  return r;
}

}  // namespace gpumix::test
