// Logging (core/log.h): levels, several lines in one call, the rank gate (rank 0's lines
// unless all ranks are asked for, errors from every rank), LogScope's install and restore,
// the process logger behind threads without a scope, a log file beside the callback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"

namespace gpumix {
namespace {

struct Collected {
  std::vector<std::pair<LogLevel, std::string>> lines;
  std::shared_ptr<Logger> logger(LogLevel level, bool all_ranks = false, const std::string& file = "") {
    LogSink sink;
    sink.level = level;
    sink.all_ranks = all_ranks;
    sink.file = file;
    sink.callback = [this](LogLevel l, const std::string& line) { lines.emplace_back(l, line); };
    return std::make_shared<Logger>(sink);
  }
  std::vector<std::string> text() const {
    std::vector<std::string> t;
    for (const auto& l : lines) t.push_back(l.second);
    return t;
  }
};

using Lines = std::vector<std::string>;

TEST(Log, LevelsAndLines) {
  Collected c;
  {
    const LogScope scope(c.logger(LogLevel::warn));
    log_error("e ", 1);
    log_warn("w");
    log_info("not at warn");
    log_debug("nor this");
    log(LogLevel::warn, "two\nlines\n");
    EXPECT_TRUE(log_enabled(LogLevel::warn));
    EXPECT_FALSE(log_enabled(LogLevel::info));
  }
  EXPECT_EQ(c.text(), (Lines{"e 1", "w", "two", "lines"}));
  EXPECT_EQ(c.lines[0].first, LogLevel::error);
  // Outside the scope: the process's logger, none here: quiet.
  log_error("to nobody");
  EXPECT_EQ(c.lines.size(), 4u);
  EXPECT_FALSE(log_enabled(LogLevel::error));
}

TEST(Log, RankZeroOnlyUnlessAllRanksErrorsFromEvery) {
  Collected one, all;
  const std::shared_ptr<Logger> l1 = one.logger(LogLevel::debug), la = all.logger(LogLevel::debug, true);
  for (int r = 0; r < 3; ++r) {
    std::thread([&, r] {
      {
        const LogScope scope(l1, r);
        log_info("info of ", r);
        log_error("error of ", r);
      }
      const LogScope scope(la, r);
      log_debug("debug of ", r);
    }).join();
  }
  EXPECT_EQ(one.text(), (Lines{"info of 0", "error of 0", "error of 1", "error of 2"}));
  EXPECT_EQ(all.text(), (Lines{"[rank 0] debug of 0", "[rank 1] debug of 1", "[rank 2] debug of 2"}));
}

TEST(Log, ScopesNestAndRestore) {
  Collected outer, inner;
  const std::shared_ptr<Logger> a = outer.logger(LogLevel::info), b = inner.logger(LogLevel::info);
  {
    const LogScope s1(a, 0);
    log_info("a");
    {
      const LogScope s2(b);
      log_info("b");
      EXPECT_EQ(log_rank(), 0);  // kept
      const LogScope s3(nullptr, 2);  // the same logger, rank 2
      log_info("dropped: rank 2");
    }
    log_info("a again");
    EXPECT_EQ(log_rank(), 0);
  }
  EXPECT_EQ(log_rank(), -1);
  EXPECT_EQ(outer.text(), (Lines{"a", "a again"}));
  EXPECT_EQ(inner.text(), (Lines{"b"}));
}

TEST(Log, TheProcessLoggerServesThreadsWithoutAScope) {
  Collected c;
  set_process_logger(c.logger(LogLevel::info));
  std::thread([] { log_info("from a thread"); }).join();
  set_process_logger(nullptr);
  std::thread([] { log_info("after: nobody"); }).join();
  EXPECT_EQ(c.text(), (Lines{"from a thread"}));
}

TEST(Log, AFileGetsTheLinesToo) {
  const std::string file = testing::TempDir() + "gpumix_test_log_" + std::to_string(::getpid()) + ".log";
  std::remove(file.c_str());
  Collected c;
  {
    const LogScope scope(c.logger(LogLevel::info, false, file));
    log_info("first");
    log_progress("progress: 100%", true);  // not a terminal: a plain info line
  }
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
            "first\nprogress: 100%\n");
  EXPECT_EQ(c.text(), (Lines{"first", "progress: 100%"}));
  std::remove(file.c_str());
  LogSink bad;
  bad.level = LogLevel::info;
  bad.file = "/nonexistent-folder/x.log";
  EXPECT_THROW(Logger{bad}, InputError);
}

}  // namespace
}  // namespace gpumix
