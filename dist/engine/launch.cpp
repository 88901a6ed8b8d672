#include "dist/engine/launch.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <numeric>
#include <sstream>

namespace gpumix::dist {

std::vector<ClusterDevice> parse_devices(const std::string& text) {
  std::vector<ClusterDevice> devices;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const ClusterDevice d = parse_device_spec(item, "--devices");
    GPUMIX_CHECK(d.kind == "cpu", "--devices: '", item, "' is not an emulated CPU device; this build "
                 "runs cpu devices (e.g. cpu:mem=2GiB:slow=3)");
    for (int i = 0; i < d.count; ++i) devices.push_back(d);
  }
  GPUMIX_CHECK(!devices.empty(), "--devices is empty; e.g. --devices cpu,cpu:slow=2");
  return devices;
}

void configure_rank_device(EngineOptions& engine, Device device, const ClusterDevice& spec) {
  DeviceProps props = device_props(device);
  if (spec.memory_bytes > 0) props.capacity = (int64_t)spec.memory_bytes;
  props.slowdown = spec.slowdown;
  props.emulated = spec.memory_bytes > 0 || spec.slowdown != 1.0;
  if (props.emulated) props.name = "cpu (emulated " + spec.label() + ")";
  configure_device(device, props);
  engine.device = device;
  engine.device_set = true;
  engine.device_label = spec.label();
}

std::vector<std::vector<int>> place_ranks(const std::vector<double>& slowdowns, int threads_per_rank, int cpus) {
  const int ranks = (int)slowdowns.size();
  std::vector<std::vector<int>> placed(ranks);
  if ((int64_t)ranks * threads_per_rank <= cpus) {
    for (int r = 0; r < ranks; ++r)
      for (int t = 0; t < threads_per_rank; ++t) placed[r].push_back(r * threads_per_rank + t);
    return placed;
  }
  if (threads_per_rank > 1 || cpus < 1) return placed;
  std::vector<int> order(ranks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return slowdowns[a] < slowdowns[b]; });
  std::vector<double> load(cpus, 0.0);
  for (int r : order) {
    const int cpu = (int)(std::min_element(load.begin(), load.end()) - load.begin());
    load[cpu] += 1.0 / slowdowns[r];
    placed[r].push_back(cpu);
  }
  return placed;
}

void start_local_rank(Comm& comm, const std::vector<ClusterDevice>& devices, int threads, EngineOptions& engine) {
  const int ranks = comm.size(), per_rank = std::max(1, threads / ranks);
  if (!devices.empty()) configure_rank_device(engine, Device::cpu(comm.rank()), devices[comm.rank()]);
  // Pinned before the first parallel region: OpenMP's threads inherit this thread's CPUs.
  cpu_set_t usable;
  if (sched_getaffinity(0, sizeof usable, &usable) == 0) {
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &usable)) cpus.push_back(c);
    std::vector<double> slowdowns(ranks, 1.0);
    for (int r = 0; r < (int)devices.size() && r < ranks; ++r) slowdowns[r] = devices[r].slowdown;
    const std::vector<int> mine = place_ranks(slowdowns, per_rank, (int)cpus.size())[comm.rank()];
    if (!mine.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : mine) CPU_SET(cpus[c], &set);
      sched_setaffinity(0, sizeof set, &set);  // best effort: unpinned ranks still run
    }
  }
  omp_set_num_threads(per_rank);
}

TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const std::vector<RankWork>& work, const EngineOptions& engine, int threads) {
  GPUMIX_CHECK(devices.empty() || (int)devices.size() == ranks, devices.size(), " devices for ", ranks,
               " ranks; give one device per rank");
  TrainResult result;
  run_local(ranks, [&](Comm& comm) {
    EngineOptions mine = engine;
    start_local_rank(comm, devices, threads, mine);
    TrainResult r = train(o, work, comm, mine);
    if (comm.rank() == 0) result = r;
  });
  return result;
}

}  // namespace gpumix::dist
