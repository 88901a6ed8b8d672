#include "nn/data/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/log.h"

namespace gpumix::data {

namespace {

constexpr double quiet_s = 1.0;         // show nothing for work shorter than this
constexpr double tty_interval_s = 0.1;  // redraw rate on a terminal
constexpr double pipe_interval_s = 10;  // line rate into a pipe or a log file

std::string format_seconds(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else {
    const long t = std::lround(s);
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  }
  return buf;
}

}  // namespace

Progress::Progress(std::string label, double total, std::string unit, bool enabled)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled && log_enabled(LogLevel::info)) {
  tty_ = enabled_ && log_progress_redraws();
  start_ = last_draw_ = clock::now();
}

void Progress::update(double done) {
  if (!enabled_ || finished_) return;
  last_done_ = done;
  const auto now = clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < quiet_s) return;
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (shown_ && since < (tty_ ? tty_interval_s : pipe_interval_s)) return;
  draw(done, false);
  last_draw_ = now;
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (shown_) draw(total_, true);
}

void Progress::draw(double done, bool final) {
  const double elapsed = std::chrono::duration<double>(clock::now() - start_).count();
  const double frac = total_ > 0 ? std::clamp(done / total_, 0.0, 1.0) : 1.0;
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : -1;
  std::string tail;
  if (final) {
    tail = "done in " + format_seconds(elapsed);
  } else {
    tail = format_seconds(elapsed) + " elapsed, ETA " + format_seconds(eta);
  }
  char counts[96];
  std::snprintf(counts, sizeof counts, "%.0f/%.0f %s, %.1f %s/s", done, total_, unit_.c_str(),
                done / std::max(elapsed, 1e-9), unit_.c_str());
  if (tty_) {
    constexpr int width = 30;
    const int filled = static_cast<int>(frac * width);
    const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    char line[512];
    std::snprintf(line, sizeof line, "%s [%s] %3.0f%% %s | %s", label_.c_str(), bar.c_str(), frac * 100, counts,
                  tail.c_str());
    log_progress(line, final);
  } else {
    char line[512];
    std::snprintf(line, sizeof line, "%s: %3.0f%% %s | %s", label_.c_str(), frac * 100, counts, tail.c_str());
    log_progress(line, final);
  }
  shown_ = true;
}

}  // namespace gpumix::data
