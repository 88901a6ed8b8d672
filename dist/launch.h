// Starting a training run the way the gpumix program and the C API do: the devices of
// `--devices` (one per rank; emulated CPU devices get their capacity and slowdown), and
// the ranks as threads of this process (the local backend).
#pragma once

#include <string>
#include <vector>

#include "dist/cluster.h"
#include "dist/trainer.h"

namespace gpumix::dist {

// "cpu:mem=2GiB:slow=3,cpu:mem=512MiB" -> one ClusterDevice per rank (":count=N" repeats).
// Throws naming the bad entry; only cpu devices can be emulated by this build.
std::vector<ClusterDevice> parse_devices(const std::string& text);

// Configures `device` as `spec` says (capacity, slowdown) and makes it this rank's device.
void configure_rank_device(EngineOptions& engine, Device device, const ClusterDevice& spec);

// Runs `ranks` thread ranks (devices: empty, or one per rank) sharing `threads` cores, each
// calling train(). Returns rank 0's result; a rank's failure stops all and is rethrown.
TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const std::vector<RankWork>& work, const EngineOptions& engine, int threads);

}  // namespace gpumix::dist
