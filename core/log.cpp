#include "core/log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpumix {

namespace {

std::mutex process_mu;
std::shared_ptr<Logger> process_logger;

struct ThreadLog {
  std::shared_ptr<Logger> logger;
  bool scoped = false;  // a LogScope set `logger` (else the process's applies)
  int rank = -1;
};
thread_local ThreadLog thread_log;

}  // namespace

Logger::Logger(LogSink sink) : sink_(std::move(sink)) {
  if (!sink_.file.empty()) {
    file_ = std::fopen(sink_.file.c_str(), "a");
    GPUMIX_CHECK_INPUT(file_, "cannot open the log file ", sink_.file, " for appending: ", std::strerror(errno),
                       "; pass a log file in a folder that exists and may be written");
  }
  redraws_ = sink_.console && ::isatty(STDERR_FILENO);
}

Logger::~Logger() {
  if (file_) std::fclose(file_);
}

bool Logger::enabled(LogLevel level, int rank) const {
  if (level == LogLevel::quiet || (int)level > (int)sink_.level) return false;
  return rank <= 0 || sink_.all_ranks || level == LogLevel::error;
}

void Logger::emit(LogLevel level, const std::string& line) {
  if (sink_.callback) sink_.callback(level, line);
  if (file_) {
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }
  if (sink_.console) {
    if (mid_progress_) {  // end the redrawn line before anything else is written
      std::fputc('\n', stderr);
      mid_progress_ = false;
    }
    std::FILE* out = level == LogLevel::error ? stderr : stdout;
    std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
  }
}

void Logger::write(LogLevel level, const std::string& text, int rank) {
  if (!enabled(level, rank)) return;
  const std::string prefix = sink_.all_ranks && rank >= 0 ? str("[rank ", rank, "] ") : "";
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    emit(level, prefix + text.substr(pos, end - pos));
    pos = end + 1;
  }
  if (text.empty()) emit(level, prefix);
}

void Logger::progress(const std::string& line, bool final, int rank) {
  if (!enabled(LogLevel::info, rank)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!redraws_) {
    // Written where lines go, progress being on stderr in the console.
    if (sink_.callback) sink_.callback(LogLevel::info, line);
    if (file_) {
      std::fprintf(file_, "%s\n", line.c_str());
      std::fflush(file_);
    }
    if (sink_.console) {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
    return;
  }
  // A terminal: redraw in place; the callback and the file get the last line only.
  std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  std::fflush(stderr);
  mid_progress_ = !final;
  if (final) {
    if (sink_.callback) sink_.callback(LogLevel::info, line);
    if (file_) {
      std::fprintf(file_, "%s\n", line.c_str());
      std::fflush(file_);
    }
  }
}

std::shared_ptr<Logger> current_logger() {
  if (thread_log.scoped) return thread_log.logger;
  std::lock_guard<std::mutex> lock(process_mu);
  return process_logger;
}

int log_rank() { return thread_log.rank; }

void set_process_logger(std::shared_ptr<Logger> logger) {
  std::lock_guard<std::mutex> lock(process_mu);
  process_logger = std::move(logger);
}

LogScope::LogScope(std::shared_ptr<Logger> logger, int rank)
    : saved_logger_(thread_log.scoped ? thread_log.logger : nullptr), saved_rank_(thread_log.rank) {
  saved_scoped_ = thread_log.scoped;
  if (logger) {
    thread_log.logger = std::move(logger);
    thread_log.scoped = true;
  }
  if (rank >= 0) thread_log.rank = rank;
}

LogScope::~LogScope() {
  thread_log.logger = saved_logger_;
  thread_log.scoped = saved_scoped_;
  thread_log.rank = saved_rank_;
}

bool log_enabled(LogLevel level) {
  const std::shared_ptr<Logger> l = current_logger();
  return l && l->enabled(level, log_rank());
}

void log(LogLevel level, const std::string& text) {
  if (const std::shared_ptr<Logger> l = current_logger()) l->write(level, text, log_rank());
}

void log_progress(const std::string& line, bool final) {
  if (const std::shared_ptr<Logger> l = current_logger()) l->progress(line, final, log_rank());
}

bool log_progress_redraws() {
  const std::shared_ptr<Logger> l = current_logger();
  return l && l->redraws_progress();
}

void print_settings(const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t w = 0;
  for (const auto& r : rows) w = std::max(w, r.first.size());
  if (!log_enabled(LogLevel::info)) return;
  const std::string rule = "+" + std::string(w + 40, '-') + "+";
  std::string table = rule + "\n";
  for (const auto& [k, v] : rows) {
    char line[512];
    std::snprintf(line, sizeof line, "| %-*s | %-35s |\n", (int)w, k.c_str(), v.c_str());
    table += line;
  }
  log_info(table + rule);
}

}  // namespace gpumix
