// Logging: the one way the library says anything. Nothing in kernels/.. dist/ writes to
// stdout or stderr itself; it logs a line at a level, and the thread's Logger sends it where
// its sink says: a callback, a file, and/or the console (the gpumix program's). A library
// that no one configured is quiet.
//
// Which Logger: the one a LogScope installed on this thread (the C API installs its
// session's for each call; run_local gives each thread rank its parent's), else the
// process's (set_process_logger: the gpumix program sets the console), else none.
//
// Ranks: a LogScope also says the thread's rank. Lines of ranks other than 0 are dropped
// unless the sink asks for all ranks (then every line is prefixed "[rank N] "); errors come
// through from every rank (each is that rank's own). What the job says once (the settings
// table, the step lines) the trainer logs on rank 0 only.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace gpumix {

enum class LogLevel : int { quiet = 0, error = 1, warn = 2, info = 3, debug = 4 };

struct LogSink {
  LogLevel level = LogLevel::quiet;  // lines at or below it are written
  std::function<void(LogLevel, const std::string&)> callback;  // each line, without "\n"
  std::string file;       // lines appended to this file ("" : none)
  bool console = false;   // errors to stderr, other lines to stdout, progress to stderr
  bool all_ranks = false;
};

class Logger {
 public:
  // Opens sink.file for appending; throws InputError naming it when it cannot.
  explicit Logger(LogSink sink);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  bool enabled(LogLevel level, int rank) const;
  // `text`: one or more lines ("\n" between; a last "\n" is not an empty line).
  void write(LogLevel level, const std::string& text, int rank);
  // A progress line (data::Progress): on a console whose stderr is a terminal, redrawn in
  // place (final: then ended); elsewhere written as an info line.
  void progress(const std::string& line, bool final, int rank);
  bool redraws_progress() const { return redraws_; }

 private:
  void emit(LogLevel level, const std::string& line);

  LogSink sink_;
  std::FILE* file_ = nullptr;
  bool redraws_ = false;
  bool mid_progress_ = false;  // a redrawn progress line is on the terminal
  std::mutex mu_;
};

// The logger of this thread (null: none, quiet) and its rank (-1: not a rank, counted as 0).
std::shared_ptr<Logger> current_logger();
int log_rank();
// The logger of threads without a LogScope (null: none).
void set_process_logger(std::shared_ptr<Logger> logger);

// Installs `logger` (null: keep this thread's) and `rank` (-1: keep) on this thread until
// destroyed.
class LogScope {
 public:
  explicit LogScope(std::shared_ptr<Logger> logger, int rank = -1);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  std::shared_ptr<Logger> saved_logger_;
  bool saved_scoped_ = false;
  int saved_rank_;
};

bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& text);
void log_progress(const std::string& line, bool final);
bool log_progress_redraws();

// Logs (info) a boxed two-column table: a run's resolved settings, one per row.
void print_settings(const std::vector<std::pair<std::string, std::string>>& rows);

template <class... Parts>
void log_error(const Parts&... parts) {
  if (log_enabled(LogLevel::error)) log(LogLevel::error, str(parts...));
}
template <class... Parts>
void log_warn(const Parts&... parts) {
  if (log_enabled(LogLevel::warn)) log(LogLevel::warn, str(parts...));
}
template <class... Parts>
void log_info(const Parts&... parts) {
  if (log_enabled(LogLevel::info)) log(LogLevel::info, str(parts...));
}
template <class... Parts>
void log_debug(const Parts&... parts) {
  if (log_enabled(LogLevel::debug)) log(LogLevel::debug, str(parts...));
}

}  // namespace gpumix
