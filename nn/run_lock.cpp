#include "nn/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace gpumix {

namespace fs = std::filesystem;

namespace {

// "pid 1234 on node7, started 2025-01-31 12:00:00 UTC": what the lock file holds.
std::string holder_line() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "an unknown host");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return str("pid ", getpid(), " on ", host, ", started ", when);
}

// The holder writes its name just after it takes the lock: give it a moment to.
std::string read_holder(const std::string& path) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    if (!line.empty()) return line;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return "a process that has not written its name";
}

}  // namespace

RunLock::RunLock(const std::string& run_dir) : path_((fs::path(run_dir) / "lock").string()) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  GPUMIX_CHECK_INPUT(!ec, "cannot create run folder ", run_dir, ": ", ec.message());
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  GPUMIX_CHECK_INPUT(fd >= 0, "cannot open the run folder's lock file ", path_, ": ", std::strerror(errno),
                     "; check that the folder is writable");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    GPUMIX_CHECK_INPUT(err != EWOULDBLOCK, "run folder ", run_dir, " is in use by another run (",
                       read_holder(path_), "; lock file ", path_,
                       "); wait for that run to end, or choose another run folder (--out, out_dir)");
    GPUMIX_CHECK_INPUT(false, "cannot lock ", path_, ": ", std::strerror(err),
                       "; put the run folder on a file system with flock(2) locks");
  }
  fd_ = fd;
  const std::string line = holder_line() + "\n";
  // The name is for messages only: a failure to write it leaves the lock held.
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, line.data(), line.size(), 0) == (ssize_t)line.size())
    ::fsync(fd_);
}

RunLock::~RunLock() { release(); }

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void RunLock::release() {
  if (fd_ < 0) return;
  // The holder's name goes first, so that nobody is named who no longer holds the lock
  // (if that fails, the name of a holder that is gone stays in an unlocked file).
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);
  ::close(fd_);  // drops the flock
  fd_ = -1;
}

}  // namespace gpumix
