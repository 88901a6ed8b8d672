// The sharded engine on NCCL, under `mpirun -np 2` on a machine with 2 GPUs: each rank
// trains the tiny GPT in bf16 on its own GPU (cuda:<rank>; the trainer picks NCCL for
// CUDA devices under mpirun) with an uneven plan, then rank 0 trains it alone on cuda:0
// (the local backend) and compares the losses and the final master weights (the plans'
// bf16 allowances, engine_test_util.h: the same kernels, fp32 additions in another
// order). Two ranks on one GPU must be refused on both, naming them.
//
// Its own main; every rank exits with the worst rank's status (0 pass, 1 fail, 77 skip:
// not 2 ranks, no NCCL in the build, or fewer than 2 GPUs, saying which).
#include <omp.h>

#include <cstdio>

#include "core/device.h"
#include "core/error.h"
#include "core/runtime.h"
#include "dist/comm/comm.h"
#include "dist/engine/trainer.h"
#include "engine_test_util.h"

namespace {

using namespace gpumix;
using namespace gpumix::dist;
using namespace gpumix::dist::test;


// Why this machine cannot run the test ("" when it can).
std::string why_skip(Comm& comm) {
  if (comm.size() != 2) return str("needs mpirun -np 2, got ", comm.size(), " ranks");
  if (!nccl_built()) return "this build has no NCCL";
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (gpus < 2) return str("needs 2 GPUs, found ", gpus, why.empty() ? "" : " (" + why + ")");
  return "";
}

TrainOptions options(const std::string& data, const std::string& out) {
  TrainOptions o = tiny_options(data, out);
  o.dtype = DType::bf16;
  o.heads = 2;  // head size 16: the flash attention kernels' smallest
  return o;
}

EngineOptions on_gpu(int ordinal) {
  EngineOptions e;
  e.device = Device::cuda(ordinal);
  DeviceProps p = gpu_props(ordinal);
  p.ordinal = ordinal;
  configure_device(e.device, p);
  e.device_set = true;
  e.device_label = "cuda";
  return e;
}

int run(Comm& comm, const std::string& data, const std::string& dir) {
  const int rank = comm.rank();
  const TrainOptions o = options(data, dir + "/nccl");
  const Work work = make_work({3, 5}, {2, 3}, {0.3, 0.7});
  const TrainResult mine = train(o, work, comm, on_gpu(rank));
  if (rank == 0) {
    const TrainOptions ref_o = options(data, dir + "/one");
    TrainResult ref;
    run_local(1, [&](Comm& local) { ref = train(ref_o, make_work({8}, {8}, {1.0}), local, on_gpu(0)); });
    const Mismatch losses = compare(losses_of(read_log(o.out)), losses_of(read_log(ref_o.out)), kLossRtol, 0);
    check(losses.excess <= 1, describe(losses, "losses"));
    const std::vector<float> p = read_array(mine.checkpoint), p_ref = read_array(ref.checkpoint);
    const Mismatch params = compare(to_double(p), to_double(p_ref), kParamRtol, 0,
                                    param_allowances(ref.checkpoint, o.steps, o.lr, DType::bf16));
    check(params_agree(params, p.size(), o.steps, o.lr, DType::bf16), describe(params, "master weights"));
  }
  // Both ranks on GPU 0: refused at NCCL's bootstrap on both, naming the ranks.
  std::string error;
  try {
    NcclOptions shared;
    shared.device = 0;
    make_nccl_comm(shared);
  } catch (const std::exception& e) {
    error = e.what();
  }
  check(error.find("ranks 0 and 1 both use GPU 0") != std::string::npos,
        str("rank ", rank, ": two ranks on one GPU were not refused as expected: '", error, "'"));
  return process_failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  std::unique_ptr<Comm> comm = make_mpi_comm();
  const std::string skip = why_skip(*comm);
  if (!skip.empty()) {
    if (comm->rank() == 0) std::printf("engine_nccl: SKIPPED (%s)\n", skip.c_str());
    return 77;
  }
  const int worst = run_checks(*comm, "engine_nccl", [](Comm& c) {
    // One folder for both ranks, named after rank 0's process: rank 0 makes it and the
    // data, and removes it at the end.
    const long pid0 = (long)c.all_reduce_sum(c.rank() == 0 ? (double)::getpid() : 0.0);
    const fs::path dir = fs::temp_directory_path() / ("gpumix_test_engine_nccl_" + std::to_string(pid0));
    const std::string data = (dir / "data").string();
    if (c.rank() == 0) {
      fs::remove_all(dir);
      fs::create_directories(data);
      make_tiny_data(data);
    }
    c.barrier();
    const int status = run(c, data, dir.string());
    c.barrier();
    if (c.rank() == 0) fs::remove_all(dir);
    return status;
  });
  comm.reset();
  return worst;
}
