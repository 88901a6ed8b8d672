// The C API's MPI form (tools/capi/gpumix_mpi.h) under `mpirun -np 3`: MPI_COMM_WORLD is
// split into a 2-rank and a 1-rank communicator (MPI_Comm_split), each training its own
// model at the same time. Checks: training uses rank 0's tokens (the other rank's NULL or
// garbage give the same bits); the 2-rank model equals the 1-rank one within fp32 rounding;
// configs that differ between ranks, or a config or call that only one rank gets wrong,
// fail on every rank of the communicator with the same message (no hang); plain sessions of
// the ranks (no communicator) on one folder are refused, all but one, naming the holder;
// a folder held by an MPI session is refused to a rank outside it; load is collective and
// forward / generate are local (called on one rank only), giving every rank the same ids.
//
// Its own main: the host's MPI_Init / MPI_Finalize, as an HPC code has. Only failures are
// printed; every rank exits with the worst rank's status (0 pass, 1 fail, 77 skip).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capi_test_util.h"
#include "tools/capi/gpumix_mpi.h"

namespace {

namespace fs = std::filesystem;

int failures = 0;
int world_rank = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAILED on world rank %d: %s\n", world_rank, what.c_str());
  ++failures;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using gpumix::capi::test::corpus_bytes;
using Config = gpumix::capi::test::TinyConfig;

// The losses of a run's log, step by step.
std::vector<double> log_losses(const std::string& run) {
  std::vector<double> losses;
  std::ifstream in(run + "/log.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (has(line, "\"final\"")) continue;
    const size_t at = line.find("\"loss\":");
    if (at != std::string::npos) losses.push_back(std::stod(line.substr(at + 7)));
  }
  return losses;
}

// Trains a fresh model on `comm` (2 steps); `tokens` is this rank's argument.
std::string train_model(MPI_Comm comm, const std::string& out, const std::vector<int32_t>* tokens) {
  Config cfg(out);
  gpumix_session* s = gpumix_session_create_mpi(&cfg.c, comm);
  check(s != nullptr, "gpumix_session_create_mpi " + out + ": " + gpumix_last_error());
  if (!s) return "";
  const int rc = gpumix_train(s, tokens ? tokens->data() : nullptr, tokens ? (int64_t)tokens->size() : 0, 2);
  check(rc == 0, "gpumix_train " + out + ": " + gpumix_last_error());
  const std::string ckpt = gpumix_checkpoint(s) ? gpumix_checkpoint(s) : "";
  gpumix_session_destroy(s);
  return ckpt;
}

void run(const std::string& dir) {
  int rank = 0, ranks = 1;
  const int color = world_rank < 2 ? 0 : 1;  // {0, 1} and {2}
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &comm);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const bool last = rank == ranks - 1;  // the rank that gets a call wrong below
  const std::vector<int32_t> tokens = corpus_bytes();
  std::vector<int32_t> garbage(77, 3);

  // Rank 0's tokens: rank 1 passes NULL, then garbage; the same bits both times. The
  // 1-rank communicator trains the same model meanwhile.
  const std::string base = dir + "/model-" + std::to_string(color);
  const std::string ckpt = train_model(comm, base + "-null", rank == 0 ? &tokens : nullptr);
  train_model(comm, base + "-garbage", rank == 0 ? &tokens : &garbage);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) {
    const std::vector<double> a = log_losses(dir + "/model-0-null"), b = log_losses(dir + "/model-0-garbage"),
                              one = log_losses(dir + "/model-1-null");
    check(a.size() == 2 && a == b, "rank 1's tokens changed the run: losses differ");
    // Two ranks vs one compute the same gradient in another order: fp32, relative 1e-5
    // (tests/dist_engine's allowance for losses).
    check(one.size() == 2 && a.size() == 2 && std::fabs(a[1] - one[1]) <= 1e-5 * std::fabs(one[1]),
          "the 2-rank model's losses are not the 1-rank model's");
  }

  // Configs that differ between the ranks: NULL on every rank, with the same message.
  if (ranks == 2) {
    Config cfg(base + "-differ");
    if (rank == 1) cfg.c.lr = 1e-3f;
    check(gpumix_session_create_mpi(&cfg.c, comm) == nullptr, "differing configs were accepted");
    check(has(gpumix_last_error(), "every rank's config"),
          std::string("differing configs: ") + gpumix_last_error());
  }
  // A config only one rank gets wrong: every rank fails, naming the rank and the problem.
  {
    Config cfg(base + "-bad-model");
    if (last) cfg.c.model = "gpt-none";
    check(gpumix_session_create_mpi(&cfg.c, comm) == nullptr, "a bad model on the last rank was accepted");
    // (On a communicator of one rank the error is that rank's own, without naming it.)
    check((ranks == 1 || has(gpumix_last_error(), "rank " + std::to_string(ranks - 1))) &&
              has(gpumix_last_error(), "gpt-none"),
          std::string("a bad model on the last rank: ") + gpumix_last_error());
    check(!fs::exists(base + "-bad-model"), "a refused session made its folder");
  }
  // More devices than ranks.
  {
    Config cfg(base + "-devices");
    cfg.c.devices = "cpu,cpu,cpu";
    check(gpumix_session_create_mpi(&cfg.c, comm) == nullptr, "3 devices on a smaller communicator were accepted");
    check(has(gpumix_last_error(), "3 devices") && has(gpumix_last_error(), "ranks"), gpumix_last_error());
  }
  check(gpumix_session_create_mpi(nullptr, MPI_COMM_NULL) == nullptr &&
            has(gpumix_last_error(), "MPI_COMM_NULL"),
        std::string("MPI_COMM_NULL: ") + gpumix_last_error());

  // A call that one rank gets wrong fails on every rank, and the session goes on.
  {
    Config cfg(base + "-calls");
    gpumix_session* s = gpumix_session_create_mpi(&cfg.c, comm);
    check(s != nullptr, std::string("create: ") + gpumix_last_error());
    if (s) {
      check(gpumix_train(s, rank == 0 ? tokens.data() : nullptr, rank == 0 ? (int64_t)tokens.size() : 0,
                         last ? 0 : 1) == -1,
            "a bad step count on the last rank trained");
      check(has(gpumix_last_error(), "steps must be >= 1, got 0"),
            std::string("bad steps on the last rank: ") + gpumix_last_error());
      check(gpumix_train(s, nullptr, 0, 1) == -1 && has(gpumix_last_error(), "rank 0 must pass the tokens"),
            std::string("no tokens on rank 0: ") + gpumix_last_error());
      check(gpumix_train(s, rank == 0 ? tokens.data() : nullptr, rank == 0 ? (int64_t)tokens.size() : 0, 1) == 0,
            std::string("train after the bad calls: ") + gpumix_last_error());
      // Collective load: one rank's missing folder fails them all.
      const std::string where = last ? dir + "/no-such-checkpoint" : ckpt;
      check(gpumix_load(s, where.c_str()) == -1, "a load that failed on the last rank succeeded");
      check(has(gpumix_last_error(), "no-such-checkpoint"),
            std::string("load: ") + gpumix_last_error());
      check(gpumix_load(s, ckpt.c_str()) == 0, std::string("load: ") + gpumix_last_error());
      // Local calls: rank 0 alone runs a forward pass, then every rank samples.
      if (rank == 0) {
        std::vector<float> logits(16 * 256);
        check(gpumix_forward(s, tokens.data(), nullptr, 1, 16, logits.data()) == 0,
              std::string("forward on rank 0 alone: ") + gpumix_last_error());
      }
      const int32_t prompt[3] = {84, 104, 101};
      int32_t ids[8] = {};
      check(gpumix_generate(s, prompt, 3, 8, 0.8f, 20, 5, ids) == 0, std::string("generate: ") + gpumix_last_error());
      int32_t first[8];
      std::copy(ids, ids + 8, first);
      MPI_Bcast(first, 8, MPI_INT32_T, 0, comm);
      check(std::equal(ids, ids + 8, first), "the ranks sampled different ids for one seed");
    }
    // While this session holds the folder, a rank outside its communicator is refused.
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 2) {
      Config other(dir + "/model-0-calls");
      check(gpumix_session_create(&other.c) == nullptr && has(gpumix_last_error(), "is in use by another run"),
            std::string("a folder held by an MPI session: ") + gpumix_last_error());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    gpumix_session_destroy(s);
  }

  // Without a communicator every rank is a run of its own: on one folder, exactly one wins
  // and the others are refused, naming its pid.
  {
    Config cfg(dir + "/shared-without-comm");
    gpumix_session* s = gpumix_session_create(&cfg.c);
    int created = s != nullptr, total = 0;
    MPI_Allreduce(&created, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int holder = created ? (int)::getpid() : 0, holder_pid = 0;
    MPI_Allreduce(&holder, &holder_pid, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    check(total == 1, "plain sessions on one folder: " + std::to_string(total) + " were created, not 1");
    if (!s)
      check(has(gpumix_last_error(), cfg.out + " is in use by another run (pid " + std::to_string(holder_pid)),
            std::string("the refusal does not name the holder: ") + gpumix_last_error());
    MPI_Barrier(MPI_COMM_WORLD);
    gpumix_session_destroy(s);
  }
  MPI_Comm_free(&comm);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 3) {
    if (world_rank == 0) std::fprintf(stderr, "test_capi_mpi: run under mpirun -np 3 (got %d ranks); skipped\n", size);
    MPI_Finalize();
    return 77;
  }
  int pid = (int)::getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string dir = (fs::temp_directory_path() / ("gpumix_test_capi_mpi_" + std::to_string(pid))).string();
  if (world_rank == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  run(dir);
  int worst = 0;
  MPI_Allreduce(&failures, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank == 0) {
    if (worst == 0) std::printf("[  PASSED  ] capi_mpi_3ranks\n");
    fs::remove_all(dir);
  }
  MPI_Finalize();
  return worst == 0 ? 0 : 1;
}
