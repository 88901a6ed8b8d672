#include "dist/launch.h"

#include <omp.h>

#include <algorithm>
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

TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const std::vector<RankWork>& work, const EngineOptions& engine, int threads) {
  GPUMIX_CHECK(devices.empty() || (int)devices.size() == ranks, devices.size(), " devices for ", ranks,
               " ranks; give one device per rank");
  TrainResult result;
  run_local(ranks, [&](Comm& comm) {
    omp_set_num_threads(std::max(1, threads / ranks));  // this rank's share of the cores
    EngineOptions mine = engine;
    if (!devices.empty()) configure_rank_device(mine, Device::cpu(comm.rank()), devices[comm.rank()]);
    TrainResult r = train(o, work, comm, mine);
    if (comm.rank() == 0) result = r;
  });
  return result;
}

}  // namespace gpumix::dist
