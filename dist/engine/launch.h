// Starting a training run the way the gpumix program and the C API do: the devices of
// `--devices` (one per rank; emulated CPU devices get their capacity and slowdown), and
// the ranks as threads of this process (the local backend).
#pragma once

#include <string>
#include <vector>

#include "dist/plan/cluster.h"
#include "dist/engine/trainer.h"

namespace gpumix::dist {

// "cpu:mem=2GiB:slow=3,cpu:mem=512MiB" -> one ClusterDevice per rank (":count=N" repeats).
// Throws naming the bad entry; only cpu devices can be emulated by this build.
std::vector<ClusterDevice> parse_devices(const std::string& text);

// Configures `device` as `spec` says (capacity, slowdown) and makes it this rank's device.
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

// Runs `ranks` thread ranks (devices: empty, or one per rank) sharing `threads` cores, each
// calling train(). Returns rank 0's result; a rank's failure stops all and is rethrown.
TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const std::vector<RankWork>& work, const EngineOptions& engine, int threads);

}  // namespace gpumix::dist
