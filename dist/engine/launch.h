// Starting a training run the way the gpumix program and the C API do: the devices of
// `--devices` (one per rank; emulated CPU devices get their capacity and slowdown), and
// the ranks as threads of this process (the local backend).
#pragma once

#include <string>
#include <vector>

#include "dist/plan/cluster.h"
#include "dist/engine/trainer.h"
#include "nn/run_lock.h"

namespace gpumix::dist {

// "cpu:mem=2GiB:slow=3,cpu:mem=512MiB" or "cuda:0,cuda:0:mem=6GiB:slow=3" -> one
// ClusterDevice per rank (":count=N" repeats). Throws InputError naming the bad entry:
// catalog types (plans and simulation only), cpu and cuda devices mixed, cuda devices
// where no GPU can be used (the runtime's reason: no driver, no GPU, a build without CUDA).
std::vector<ClusterDevice> parse_devices(const std::string& text);

// Configures rank `device.index`'s device as `spec` says (capacity, slowdown) and makes it
// this rank's device: Device::cpu(i), or for a cuda spec Device::cuda(i) on the GPU it
// names (cuda:N), else on the GPU of the node-local rank (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID; without a launcher, GPU i). A GPU's capacity is its free memory unless
// mem= caps it; several ranks may share one GPU.
void configure_rank_device(EngineOptions& engine, Device device, const ClusterDevice& spec);

// Where the thread ranks of one machine run, as indices into its usable CPUs: each rank
// gets `threads_per_rank` CPUs of its own while there are enough; otherwise (one thread per
// rank) the ranks share CPUs, packed by demand (a slow=F device computes 1/F of the time:
// largest first, onto the least loaded CPU). Emulated devices of a real cluster do not
// share cores; this keeps them from slowing each other down as far as the machine allows,
// and the same way whatever the plan. Empty lists (no pinning) when ranks with several
// threads each outnumber the CPUs.
std::vector<std::vector<int>> place_ranks(const std::vector<double>& slowdowns, int threads_per_rank, int cpus);

// The start of a thread rank of `gpumix train` and `gpumix profile`: its share of the
// cores (OpenMP threads, pinned as place_ranks says) and, if devices are given, its device
// (configure_rank_device).
void start_local_rank(Comm& comm, const std::vector<ClusterDevice>& devices, int threads, EngineOptions& engine);

// The plan of a run as `gpumix train --plan` and gpumix_config.plan name it.
struct PlanRequest {
  // "" : "given" when a list is set, else "auto" with devices, else "even"; a planner
  // (auto, gpumix, even, proportional, cephalo); "given"; or a plan file (`gpumix plan --out`).
  std::string plan;
  // "given": per-rank lists, e.g. "1,2,5", "1,1,2", "0,0.3,0.7" ("" : even).
  std::string batches, micro_batches, shares;
};

// What `ranks` ranks run for `request`: sets engine.planner when a planner is to profile
// and plan (then the work returned is even, and ignored), else returns the given lists'
// or the plan file's work, validated. Throws std::invalid_argument naming the flag, the
// numbers and the fix.
Work plan_work(const PlanRequest& request, bool have_devices, int64_t global_batch, int ranks, EngineOptions& engine);

// The run folder's lock for the ranks of one job: rank 0 takes it (nn/run_lock.h), the
// others learn the outcome, so that every rank throws the same error (naming the folder and
// the holder) when another run has the folder. Collective; only rank 0's lock holds.
RunLock lock_run_folder(const std::string& dir, Comm& comm);

// Runs `ranks` thread ranks (devices: empty, or one per rank) sharing `threads` cores, each
// calling train(). Returns rank 0's result; a rank's failure stops all and is rethrown.
TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const Work& work, const EngineOptions& engine, int threads);

}  // namespace gpumix::dist
