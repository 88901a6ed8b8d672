// The one launcher of `gpumix train`, `gpumix profile` and the C API: the devices of
// `--devices` (one per rank; emulated CPU devices get their capacity and slowdown), the
// ranks as threads of this process (the local backend) or as the processes of an MPI job,
// each rank's share of the cores (threads_per_rank), the plan (one default, plan_work), the
// run folder (claim_run_folder), and a whole launch checked before any folder is touched
// (prepare_launch, run_launch). The front ends only turn their flags or config into a
// LaunchRequest.
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

// The OpenMP threads of each rank, one rule for every launch: `threads` (as given; 0: not
// given) are the process's, shared by its `process_ranks` thread ranks; else this machine's
// cores are shared by the `node_ranks` ranks on this node. At least 1.
int threads_per_rank(int threads, int process_ranks, int node_ranks);

// The start of a thread rank of `gpumix train` and `gpumix profile`: its share of the
// `threads` (0: the machine's cores; threads_per_rank), pinned as place_ranks says, and,
// if devices are given, its device (configure_rank_device).
void start_local_rank(Comm& comm, const std::vector<ClusterDevice>& devices, int threads, EngineOptions& engine);

// The plan of a run as `gpumix train --plan` and gpumix_config.plan name it.
struct PlanRequest {
  // "" : "given" when a list is set, else "auto" with devices, else "even"; a planner
  // (auto, gpumix, even, proportional, cephalo); "given"; or a plan file (`gpumix plan --out`).
  std::string plan;
  // "given": per-rank lists, e.g. "1,2,5", "1,1,2", "0,0.3,0.7" ("" : even).
  std::string batches, micro_batches, shares;
};

// The plan `request` runs, its default resolved: "given" when a list is set, else "auto"
// with devices, else "even".
std::string resolved_plan(const PlanRequest& request, bool have_devices);

// What `ranks` ranks run for `request`: sets engine.planner when a planner is to profile
// and plan (then the work returned is even, and ignored), else returns the given lists'
// or the plan file's work, validated. Throws std::invalid_argument naming the flag, the
// numbers and the fix.
Work plan_work(const PlanRequest& request, bool have_devices, int64_t global_batch, int ranks, EngineOptions& engine);

// The run folder of a run, claimed for it: its lock (nn/run_lock.h: a folder another run
// is using is refused, naming the holder) and, unless `resuming`, no earlier run in it (a
// log.jsonl with lines; an empty one is a run that failed before its first step). `fix`
// says what to do instead ("continue it with --resume DIR, or pass another --out"). With a
// communicator rank 0 claims it for the job and every rank throws the same error;
// collective, and only rank 0's lock holds.
RunLock claim_run_folder(const std::string& dir, bool resuming, const std::string& fix, Comm* comm = nullptr);

// What a front end asks to launch, as its flags or config give it (unchecked).
struct LaunchRequest {
  TrainOptions options;
  std::string devices;  // one per rank, as --devices ("" : cpu ranks)
  int ranks = 0;        // thread ranks (0: one per device, else 1); under MPI the job's
  PlanRequest plan;
  EngineOptions engine;  // prefetch, the gpumix planner's sharding, profile bounds, trace, drift
  // Settings that only a planner's start-up uses, as the front end names those its user
  // gave ("--sharding", "--profile-repeats"): refused where no planner runs.
  bool sharding_given = false;
  std::vector<std::string> profile_bounds_given;
};

// A launch, checked: what every rank runs.
struct Launch {
  TrainOptions options;
  std::vector<ClusterDevice> devices;  // one per rank, or none (cpu ranks)
  int ranks = 1;
  Work work;  // the given or plan file's work (ignored when engine.planner is set)
  EngineOptions engine;
  int threads = 1;  // OpenMP threads of each rank (threads_per_rank)
};

// Checks every argument of `request` (check_train_options, the devices against the ranks,
// the dtype on them, the plan and the settings only a planner uses) and reads a plan file,
// touching no folder. `comm`: this rank of an MPI job, whose `node_ranks` ranks share this
// node (its device is configured here); null: thread ranks of this process. Throws
// InputError / std::invalid_argument naming the setting, the numbers and the fix.
Launch prepare_launch(const LaunchRequest& request, Comm* comm = nullptr, int node_ranks = 1);

// Trains `launch` (whose run folder the caller has claimed): on its thread ranks
// (train_local), or with `comm` as this rank of the job, with launch.threads OpenMP threads
// for the call. Returns rank 0's result on thread ranks, this rank's under MPI.
TrainResult run_launch(const Launch& launch, Comm* comm = nullptr);

// Runs `ranks` thread ranks (devices: empty, or one per rank) sharing `threads` cores (0: the
// machine's), each
// calling train(). Returns rank 0's result; a rank's failure stops all and is rethrown.
TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const Work& work, const EngineOptions& engine, int threads);

}  // namespace gpumix::dist
