// The uneven sharded engine on the MPI backend, under `mpirun -np 3`: the ranks train the
// tiny GPT for 5 steps under uneven plans (in fp32, and one in bf16), then rank 0 trains it
// alone on the whole batch (one rank, the local backend, in each dtype) and compares the losses of the logs and the final
// checkpoints' master weights and AdamW moments (tolerances: engine_test_util.h). Bad plans
// and ranks that disagree about the layout must throw on every rank (no hang, no abort).
//
// Its own main: MPI_Init, the checks, MPI_Finalize. Only rank 0 prints the comparison;
// every rank exits with the worst rank's status (0 pass, 1 fail, 77 skip without 3 ranks).
#include <omp.h>

#include <cstdio>
#include <functional>

#include "core/error.h"
#include "dist/comm/comm.h"
#include "dist/engine/trainer.h"
#include "engine_test_util.h"

namespace {

using namespace gpumix;
using namespace gpumix::dist;
using namespace gpumix::dist::test;


// Expects fn to throw an error containing every part (on this rank).
void expect_error(const std::string& name, const std::function<void()>& fn, const std::vector<std::string>& parts,
                  int rank) {
  std::string message;
  try {
    fn();
  } catch (const std::exception& e) {
    message = e.what();
  }
  check(!message.empty(), str("rank ", rank, ", ", name, ": no error"));
  for (const std::string& part : parts)
    check(message.find(part) != std::string::npos,
          str("rank ", rank, ", ", name, ": the error lacks '", part, "': ", message));
}

// Compares a run at `out` (checkpoint `ckpt`) with the reference; counts what differs.
void compare_runs(const std::string& name, const std::string& out, const std::string& ckpt,
                  const std::string& ref_out, const std::string& ref_ckpt, int steps, double lr, DType dtype) {
  const std::vector<LogStep> log = read_log(out), ref = read_log(ref_out);
  check(log.size() == (size_t)steps && ref.size() == (size_t)steps,
        str(name, ": expected ", steps, " log lines, got ", log.size(), " and ", ref.size(), " (reference)"));
  const Mismatch losses = compare(losses_of(log), losses_of(ref), kLossRtol, 0);
  check(losses.excess <= 1, name + ": " + describe(losses, "losses"));
  const std::vector<float> p = read_array(ckpt);
  const Mismatch params =
      compare(to_double(p), to_double(read_array(ref_ckpt)), kParamRtol, 0, param_allowances(ref_ckpt, steps, lr, dtype));
  check(params_agree(params, p.size(), steps, lr, dtype), name + ": " + describe(params, "master weights"));
  if (process_failures() == 0)
    std::printf("[       OK ] %s: %zu losses within %.0e relative (worst %.2fx the allowance), master weights "
                "worst %.2fx the allowance\n",
                name.c_str(), log.size(), kLossRtol, losses.excess, params.excess);
}

int run(Comm& comm) {
  const int rank = comm.rank();
  if (comm.size() != 3) {
    if (rank == 0) std::fprintf(stderr, "test_engine_mpi: run under mpirun -np 3 (got %d ranks); skipped\n", comm.size());
    return 77;
  }
  // Rank 0 makes the data in a folder named after its pid; the others learn the pid.
  Tensor pid = Tensor::from_vector(std::vector<int32_t>{(int32_t)::getpid()}, {1});
  comm.broadcast(pid, 0);
  const std::string dir = (fs::temp_directory_path() / str("gpumix_test_engine_mpi_", pid.data<int32_t>()[0])).string();
  std::string error;
  if (rank == 0) {
    try {
      fs::remove_all(dir);
      fs::create_directories(dir);
      make_tiny_data(dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  comm.agree("test data", {}, error);

  struct Plan {
    const char* name;
    Work work;
    DType dtype;
  };
  const Plan plans[] = {
      {"mpi b1.2.5 m1.1.2 r0.0.3.0.7", make_work({1, 2, 5}, {1, 1, 2}, {0, 0.3, 0.7}), DType::f32},
      {"mpi b0.3.5 m0.2.3 r0.5.0.25.0.25", make_work({0, 3, 5}, {0, 2, 3}, {0.5, 0.25, 0.25}), DType::f32},
      {"mpi bf16 b0.3.5 m0.2.3 r0.5.0.25.0.25", make_work({0, 3, 5}, {0, 2, 3}, {0.5, 0.25, 0.25}), DType::bf16},
  };
  std::vector<std::pair<std::string, std::string>> runs;  // out, checkpoint
  for (size_t i = 0; i < sizeof plans / sizeof plans[0]; ++i) {
    TrainOptions o = tiny_options(dir, dir + "/plan" + std::to_string(i));
    o.dtype = plans[i].dtype;
    try {
      const TrainResult r = train(o, plans[i].work, comm);
      runs.push_back({o.out, r.checkpoint});
    } catch (const std::exception& e) {
      // A failure inside training may leave the others in a collective: end the job.
      comm.abort(str("rank ", rank, ": ", plans[i].name, ": ", e.what()));
    }
  }

  // Bad plans (every rank sees the same) and a rank with other shares: every rank throws.
  {
    const TrainOptions o = tiny_options(dir, dir + "/bad");
    expect_error("shares not summing to 1", [&] { train(o, make_work({1, 2, 5}, {1, 1, 2}, {0.2, 0.3, 0.4}), comm); },
                 {"shares sum to 0.9"}, rank);
    expect_error("batches not summing to the global batch",
                 [&] { train(o, make_work({1, 2, 4}, {1, 1, 2}, {0, 0.3, 0.7}), comm); },
                 {"batches sum to 7 but the global batch is 8"}, rank);
    expect_error("wrong rank count", [&] { train(o, make_work({4, 4}, {1, 1}, {0.5, 0.5}), comm); },
                 {"the plan has 2 ranks but 3 are running"}, rank);
    Work mine = make_work({1, 2, 5}, {1, 1, 2}, {0.2, 0.3, 0.5});
    if (rank == 1) mine = make_work({1, 2, 5}, {1, 1, 2}, {0.5, 0.3, 0.2});
    expect_error("ranks disagree about the layout", [&] { train(o, mine, comm); }, {"shard layout"}, rank);
  }

  if (rank == 0) {
    // The reference: one rank, the whole batch, in each dtype.
    for (DType dtype : {DType::f32, DType::bf16}) {
      TrainOptions o = tiny_options(dir, dir + "/ref_" + dtype_name(dtype));
      o.dtype = dtype;
      TrainResult ref;
      run_local(1, [&](Comm& one) {
        omp_set_num_threads(1);
        ref = train(o, make_work({o.batch}, {o.batch}, {1.0}), one);
      });
      for (size_t i = 0; i < runs.size(); ++i)
        if (plans[i].dtype == dtype)
          compare_runs(plans[i].name, runs[i].first, runs[i].second, o.out, ref.checkpoint, o.steps, o.lr, dtype);
    }
  }
  comm.barrier();
  if (rank == 0) fs::remove_all(dir);
  return process_failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  std::unique_ptr<Comm> comm = make_mpi_comm();
  const int worst = run_checks(*comm, "engine_mpi", run);
  comm.reset();
  return worst;
}
