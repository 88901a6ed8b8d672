// Helpers shared by the data-layer tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>

#include "nn/data/file_util.h"

namespace gpumix::data::test {

inline std::string tiny_corpus_path() { return std::string(GPUMIX_TESTS_DATA_DIR) + "/tiny_corpus.txt"; }

inline const std::string& tiny_corpus() {
  static const std::string text = read_file(tiny_corpus_path());
  return text;
}

// A fresh empty folder under the system temp folder, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("gpumix_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs fn, expects it to throw, and returns the message (empty, with a failure, if not).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

#define EXPECT_ERROR_HAS(stmt, ...)                                            \
  do {                                                                         \
    const std::string gpumix_msg_ = ::gpumix::data::test::error_of([&] { stmt; }); \
    for (const std::string& gpumix_part_ : std::initializer_list<std::string>{__VA_ARGS__}) {                     \
      EXPECT_NE(gpumix_msg_.find(gpumix_part_), std::string::npos)             \
          << "message: " << gpumix_msg_ << "\nlacks: " << gpumix_part_;         \
    }                                                                          \
  } while (0)

}  // namespace gpumix::data::test
