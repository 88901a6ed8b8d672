// A progress bar with ETA for long work that is not training (tokenizing, profiling).
//
// Nothing is shown for the first second, so quick work stays quiet. Then, through the
// thread's log (core/log.h, at info): on a console whose stderr is a terminal, one line
// redrawn in place at most 10 times a second; elsewhere (stderr piped or a file, a callback,
// a log file) a plain line at most every 10 seconds. finish() says the total time if
// anything was shown. Not thread-safe: call update() from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpumix::data {

class Progress {
 public:
  // `total` is in `unit`s (e.g. "merges", "MB"); `enabled` false makes every call a no-op.
  Progress(std::string label, double total, std::string unit, bool enabled = true);
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(double done);
  void finish();

 private:
  using clock = std::chrono::steady_clock;
  void draw(double done, bool final);

  std::string label_;
  std::string unit_;
  double total_;
  bool enabled_;
  bool tty_ = false;
  bool shown_ = false;
  bool finished_ = false;
  double last_done_ = 0;
  clock::time_point start_;
  clock::time_point last_draw_;
};

}  // namespace gpumix::data
