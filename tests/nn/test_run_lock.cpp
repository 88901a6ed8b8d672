// The run folder's lock (nn/run_lock.h): exclusive while held, in this process and in
// another; the refusal names the folder and the holder's pid and host; released by
// destruction, by a move's end, and by the kernel when the holder is killed (kill -9).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nn/run_lock.h"

namespace {

namespace fs = std::filesystem;
using gpumix::RunLock;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string refusal(const std::string& dir) {
  try {
    RunLock second(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("gpumix_test_run_lock_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(RunLockTest, ExcludesASecondLockAndNamesTheHolder) {
  RunLock lock(dir_ + "/run");
  EXPECT_TRUE(lock.held());
  EXPECT_EQ(lock.path(), dir_ + "/run/lock");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host;
  EXPECT_NE(read_file(lock.path()).find(holder), std::string::npos) << read_file(lock.path());
  const std::string message = refusal(dir_ + "/run");
  for (const std::string& part : {dir_ + "/run", std::string("in use by another run"), holder, std::string("--out")})
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
}

TEST_F(RunLockTest, ReleasedByDestructionAndByMove) {
  {
    RunLock lock(dir_);
    RunLock moved = std::move(lock);
    EXPECT_FALSE(lock.held());
    EXPECT_TRUE(moved.held());
    EXPECT_NE(refusal(dir_), "");
  }
  EXPECT_EQ(read_file(dir_ + "/lock"), "") << "a released lock still names a holder";
  EXPECT_EQ(refusal(dir_), "");
  RunLock a(dir_);
  a = RunLock();  // assigning an empty lock releases the held one
  EXPECT_EQ(refusal(dir_), "");
}

TEST_F(RunLockTest, AnotherProcessIsRefusedAndAKilledHolderLeavesNoStaleLock) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RunLock lock(dir_);
    const char ok = 1;
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    pause();  // held until killed
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  const std::string message = refusal(dir_);
  EXPECT_NE(message.find("pid " + std::to_string(child) + " on "), std::string::npos) << message;
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  // The file still names the dead holder, but its lock went with it.
  EXPECT_NE(read_file(dir_ + "/lock").find("pid " + std::to_string(child)), std::string::npos);
  RunLock next(dir_);
  EXPECT_TRUE(next.held());
  EXPECT_NE(read_file(dir_ + "/lock").find("pid " + std::to_string(::getpid())), std::string::npos);
  close(ready[0]);
  close(ready[1]);
}

TEST_F(RunLockTest, AFolderThatCannotBeMadeIsAnError) {
  fs::create_directories(dir_);
  std::ofstream(dir_ + "/file") << "x";
  const std::string message = refusal(dir_ + "/file/run");
  EXPECT_NE(message.find("cannot create run folder " + dir_ + "/file/run"), std::string::npos) << message;
}

}  // namespace
