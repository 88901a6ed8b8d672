// What the C API tests share: the tokens (the tiny corpus's bytes, vocabulary 256) and a
// small config (gpt-nano at T = 16, batch 4).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tools/capi/gpumix.h"

namespace gpumix::capi::test {

inline std::vector<int32_t> corpus_bytes() {
  std::ifstream in(std::string(GPUMIX_TESTS_DATA_DIR) + "/tiny_corpus.txt", std::ios::binary);
  std::vector<int32_t> ids;
  for (char c; in.get(c);) ids.push_back((unsigned char)c);
  return ids;
}

// A config for out_dir `out`, which it keeps alive (gpumix_config points at it).
struct TinyConfig {
  std::string out;
  gpumix_config c;
  explicit TinyConfig(const std::string& out_dir) : out(out_dir) {
    gpumix_config_default(&c);
    c.vocab = 256;
    c.seq = 16;
    c.global_batch = 4;
    c.total_steps = 4;
    c.lr = 3e-3f;
    c.threads = 1;
    c.out_dir = out.c_str();
    c.dtype = "fp32";  // the comparisons' allowances are fp32's (tests/dist_engine)
  }
  TinyConfig(const TinyConfig&) = delete;
  TinyConfig& operator=(const TinyConfig&) = delete;
};

// What reaches this process's stdout and stderr (file descriptors 1 and 2, so printf, C++
// streams and anything below them alike) while it lives, read by take().
class CapturedOutput {
 public:
  explicit CapturedOutput(const std::string& path) : path_(path) {
    std::fflush(stdout);
    std::fflush(stderr);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    saved_out_ = ::dup(1);
    saved_err_ = ::dup(2);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CapturedOutput() { restore(); }
  // Stops capturing; returns what was written.
  std::string take() {
    restore();
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  void restore() {
    if (saved_out_ < 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    ::dup2(saved_out_, 1);
    ::dup2(saved_err_, 2);
    ::close(saved_out_);
    ::close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  std::string path_;
  int saved_out_ = -1, saved_err_ = -1;
};

// A log callback's lines, from any thread.
struct LogLines {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> lines;  // (level, line)
  static void receive(int level, const char* line, void* user) {
    LogLines* self = static_cast<LogLines*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(level, line);
  }
  bool any(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& l : lines)
      if (l.second.find(part) != std::string::npos) return true;
    return false;
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu);
    std::string t;
    for (const auto& l : lines) t += l.second + "\n";
    return t;
  }
};

}  // namespace gpumix::capi::test
