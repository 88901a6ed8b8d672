// One run per run folder: a run holds an exclusive flock(2) on <run folder>/lock for its
// whole life. The kernel drops the lock when the process ends, however it ends (kill -9
// included), so a crash never leaves a stale lock behind; the file itself stays. While
// held, the file names the holder (pid, host, start time), so that a refused run can say
// who has the folder. flock works across processes (and, on Linux, over NFS through
// byte-range locks); two locks in one process on one folder also exclude each other.
// Ranks of one job share the lock through rank 0 (dist::claim_run_folder).
#pragma once

#include <string>

namespace gpumix {

class RunLock {
 public:
  RunLock() = default;  // holds nothing
  // Creates the folder if needed and takes its lock at once, or throws Error naming the
  // folder, the holder and what to do.
  explicit RunLock(const std::string& run_dir);
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }  // <run folder>/lock

 private:
  void release();
  int fd_ = -1;
  std::string path_;
};

}  // namespace gpumix
