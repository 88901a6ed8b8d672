// Cluster files: which devices, on which nodes, linked how. What the simulator turns into
// a profile, and (in a later issue) how emulated CPU devices are described. JSON:
//
//   {"format": "gpumix-cluster", "name": "lab",
//    "intra_node": {"bandwidth_GBps": 12, "latency_us": 15},
//    "inter_node": {"bandwidth_GBps": 3, "latency_us": 50},     (when more than one node)
//    "uneven_factor": 1.1,
//    "nodes": [{"name": "n0", "devices": ["L4", "L4", "A6000", {"type": "P40", "count": 1}]},
//              {"name": "n1", "devices": ["cpu:mem=2GiB:slow=3", "V100-32GB:count=8"]}]}
//
// A device is a catalog type or "cpu", optionally with mem= (usable memory, overriding the
// catalog), slow= (slowdown factor, emulated devices) and count=. As a string:
// TYPE[:mem=SIZE][:slow=F][:count=N]; as an object: {"type", "memory", "slowdown", "count"}.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/plan/json_fields.h"

namespace gpumix::dist {

struct ClusterDevice {
  std::string type;          // catalog name, or "cpu"
  std::string kind = "gpu";  // "gpu" or "cpu" (from the catalog)
  double memory_bytes = 0;   // usable memory; 0: the catalog's
  double slowdown = 1.0;     // times are multiplied by this (emulated devices)
  int count = 1;
  // "A6000", "cpu:mem=2GiB:slow=3": the device type's name in profiles and plans.
  std::string label() const;
};

struct ClusterNode {
  std::string name;
  std::vector<ClusterDevice> devices;
};

struct ClusterLink {
  double bandwidth_GBps = 0;  // bus bandwidth of collectives over this link class, 1e9 B/s
  double latency_us = 0;      // per ring step
};

struct Cluster {
  std::string name;
  std::vector<ClusterNode> nodes;
  ClusterLink intra_node;
  ClusterLink inter_node;
  double uneven_factor = 1.1;

  int num_ranks() const;
  // One entry per rank, in rank order (node by node, device entry by entry).
  struct Rank {
    ClusterDevice device;
    int node;
  };
  std::vector<Rank> ranks() const;
  void validate() const;  // throws FormatError naming the field
};

ClusterDevice parse_device_spec(const std::string& spec, const std::string& where);

nlohmann::json cluster_to_json(const Cluster& c);
Cluster cluster_from_json(const nlohmann::json& j);  // validates
Cluster read_cluster(const std::string& path);
void write_cluster(const Cluster& c, const std::string& path);

}  // namespace gpumix::dist
