// gpumix profile: measures a set of (emulated) devices on a model, as the planner needs
// them (dist/engine/profiler.h), and writes the profile file that `gpumix plan --profile` reads.
// The ranks run as threads of this process, one per --devices entry, or, under mpirun (or
// srun), as the job's processes: then the profile knows each rank's node and measures the
// collectives across the nodes, as `gpumix train` under mpirun does.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <omp.h>

#include "core/precision.h"
#include "dist/engine/launch.h"
#include "dist/engine/profiler.h"
#include "dist/plan/compute_dtype.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

using namespace gpumix;

int cmd_profile(int argc, char** argv) {
  CLI::App app{"Measure devices on a model for the planner", "gpumix profile"};
  std::string devices_text = "cpu", model_name = "gpt-nano", out_path = "profile.json";
  int seq = 0, vocab = 0, max_m = 32, repeats = 3;
  std::string cache_dir, dtype_text;
  app.add_option("--devices", devices_text,
                 "one device per rank, e.g. cpu:mem=2GiB,cpu:mem=512MiB:slow=3 or cuda:0,cuda:0:mem=6GiB:slow=3");
  app.add_option("--model", model_name, "model preset");
  app.add_option("--seq", seq, "sequence length (default: the model's context)");
  app.add_option("--vocab", vocab, "vocabulary size (default: the preset's)");
  app.add_option("--max-micro-batch", max_m, "largest micro-batch size tried");
  app.add_option("--repeats", repeats, "timed repeats per measurement (median)");
  app.add_option("--cache", cache_dir, "cache folder ('-': none; default $GPUMIX_CACHE or ~/.cache/gpumix)");
  app.add_option("--out", out_path, "profile file to write");
  app.add_option("--dtype", dtype_text, dist::compute_dtype_help());
  CLI11_PARSE(app, argc, argv);
  // 0 means the default for --vocab; a negative value, no repeat or micro-batch to measure,
  // or a --seq below 1 is a mistake (--repeats 0 took the median of nothing).
  tools::check_seq_flag(app.count("--seq") > 0, seq, "the model's context");
  if (vocab < 0) throw std::invalid_argument("--vocab must be positive, got " + std::to_string(vocab));
  tools::check_profile_flags(repeats, max_m, "--repeats", "--max-micro-batch");

  const std::vector<dist::ClusterDevice> devices = dist::parse_devices(devices_text);
  // One kind of device per run (parse_devices): its default compute dtype, and one it computes.
  const Device kind = devices[0].is_cuda() ? Device::cuda() : Device::cpu();
  const DType dtype = dist::compute_dtype_on(kind, tools::parse_dtype_flag(dtype_text));
  check_backend_supports(kind, dtype, "--dtype");
  GPTConfig model = gpt_preset(model_name);
  if (vocab > 0) model.V = vocab;
  if (seq > 0) model.T = std::max(model.T, seq);
  const int T = seq > 0 ? seq : model.T;
  dist::ProfilerOptions options;
  options.max_micro_batch = max_m;
  options.repeats = repeats;
  options.cache_dir = cache_dir;
  const int ranks = (int)devices.size();
  auto measure = [&](dist::Comm& comm, const dist::EngineOptions& rank) {
    const dist::Profile profile =
        dist::profile_cluster(model, T, dtype, rank.device_label, rank.device, comm, options);
    if (comm.rank() == 0) {
      dist::write_profile(profile, out_path);
      std::printf("wrote %s: %d device type(s), %d rank(s) on %d node(s), %s at T = %d in %s\n", out_path.c_str(),
                  (int)profile.devices.size(), profile.num_ranks(), profile.num_nodes(), model.name.c_str(), T,
                  dtype_name(dtype));
    }
  };
  if (dist::launched_by_mpi()) {
    dist::MpiSession mpi(nullptr, nullptr, true, false);  // a second thread where the library allows (TopologyComm)
    auto comm = dist::make_mpi_comm();
    if (ranks != comm->size())
      throw std::invalid_argument("--devices lists " + std::to_string(ranks) + " devices but mpirun started " +
                                  std::to_string(comm->size()) + " ranks; give one device per rank");
    dist::EngineOptions rank;
    dist::configure_rank_device(rank, Device::cpu(), devices[comm->rank()]);
    // Processes on one node share its cores (the launcher's rule, as in `gpumix train`).
    omp_set_num_threads(dist::threads_per_rank(0, 1, (int)comm->ranks_of_node(comm->node()).size()));
    measure(*comm, rank);
    return 0;
  }
  dist::run_local(ranks, [&](dist::Comm& comm) {
    dist::EngineOptions rank;
    dist::start_local_rank(comm, devices, 0, rank);  // the machine's cores, shared
    measure(comm, rank);
  });
  return 0;
}

}  // namespace

GPUMIX_COMMAND("profile", "measure devices on a model for the planner", cmd_profile);
