// The quiet library under `mpirun -np 4`: a host program whose ranks each capture their own
// stdout and stderr (file descriptors 1 and 2) while they use GPUMix, and check that it
// printed nothing there; the log lines reach only the callbacks that asked for them: rank
// 0's at info by default (ranks 1-3 get none), every rank's own line with log_all_ranks at
// debug, none at all in a quiet session (the default).
//
// Its own main, as an HPC code has; every rank exits with the worst rank's status.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "capi_test_util.h"
#include "tools/capi/gpumix_mpi.h"

namespace {

namespace fs = std::filesystem;
using gpumix::capi::test::CapturedOutput;
using gpumix::capi::test::LogLines;

int rank = 0;
std::vector<std::string> failures;  // said after the output is restored

void check(bool ok, const std::string& what) {
  if (!ok) failures.push_back(what);
}

// One 2-step session of `cfg` on MPI_COMM_WORLD; false (with the error) when a call failed.
bool train(gpumix::capi::test::TinyConfig& cfg, const std::vector<int32_t>& tokens) {
  gpumix_session* s = gpumix_session_create_mpi(&cfg.c, MPI_COMM_WORLD);
  if (!s) {
    check(false, std::string("create: ") + gpumix_last_error());
    return false;
  }
  const int rc = gpumix_train(s, rank == 0 ? tokens.data() : nullptr, rank == 0 ? (int64_t)tokens.size() : 0, 2);
  check(rc == 0, std::string("train: ") + gpumix_last_error());
  double mean = 0;
  check(gpumix_evaluate(s, tokens.data(), (int64_t)tokens.size(), &mean) == 0,
        std::string("evaluate: ") + gpumix_last_error());
  gpumix_session_destroy(s);
  return rc == 0;
}

void run(const std::string& dir) {
  const std::vector<int32_t> tokens = gpumix::capi::test::corpus_bytes();
  CapturedOutput captured(dir + "/rank" + std::to_string(rank) + ".out");

  // The default: quiet.
  {
    gpumix::capi::test::TinyConfig cfg(dir + "/quiet");
    train(cfg, tokens);
  }
  // Info with a callback: rank 0's lines only.
  LogLines info;
  {
    gpumix::capi::test::TinyConfig cfg(dir + "/info");
    cfg.c.log_level = GPUMIX_LOG_INFO;
    cfg.c.log_callback = &LogLines::receive;
    cfg.c.log_user = &info;
    train(cfg, tokens);
  }
  // Debug on every rank: each rank's own line, prefixed with its rank.
  LogLines all;
  {
    gpumix::capi::test::TinyConfig cfg(dir + "/all");
    cfg.c.log_level = GPUMIX_LOG_DEBUG;
    cfg.c.log_callback = &LogLines::receive;
    cfg.c.log_user = &all;
    cfg.c.log_all_ranks = 1;
    train(cfg, tokens);
  }
  const std::string printed = captured.take();
  check(printed.empty(), "the library printed on stdout/stderr: " + printed.substr(0, 400));
  if (rank == 0) {
    check(info.any("| model ") && info.any("step 2/4 | loss ") && info.any("validation loss "),
          "rank 0 lacks the table, the step lines or the validation line at info:\n" + info.text());
  } else {
    check(info.lines.empty(), "a rank other than 0 got lines at info by default:\n" + info.text());
  }
  const std::string mine = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + " of 4: ";
  check(all.any(mine), "log_all_ranks: rank " + std::to_string(rank) + " lacks its own line '" + mine + "':\n" +
                           all.text());
  for (const auto& [level, line] : all.lines)
    check(line.rfind("[rank " + std::to_string(rank) + "] ", 0) == 0, "a line without this rank's prefix: " + line);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 4) {
    if (rank == 0) std::fprintf(stderr, "test_capi_log_mpi: run under mpirun -np 4 (got %d ranks); skipped\n", size);
    MPI_Finalize();
    return 77;
  }
  int pid = (int)::getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string dir = (fs::temp_directory_path() / ("gpumix_test_capi_log_mpi_" + std::to_string(pid))).string();
  if (rank == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  run(dir);
  for (const std::string& f : failures) std::fprintf(stderr, "FAILED on rank %d: %s\n", rank, f.c_str());
  int mine = failures.empty() ? 0 : 1, worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    if (worst == 0) std::printf("[  PASSED  ] capi_log_mpi_4ranks\n");
    fs::remove_all(dir);
  }
  MPI_Finalize();
  return worst;
}
