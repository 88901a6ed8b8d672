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
// A device is a catalog type, "cpu", or "cuda" (a real CUDA GPU of the machine that runs:
// "cuda:N" names GPU N, plain "cuda" the GPU of the rank's node-local rank), optionally
// with mem= (usable memory, overriding the catalog or the GPU's free memory), slow=
// (slowdown factor, emulated devices) and count=. As a string:
// TYPE[:N][:mem=SIZE][:slow=F][:count=N] (N only for cuda); as an object: {"type",
// "gpu", "memory", "slowdown", "count"}. Several entries may name one GPU
// (cuda:0,cuda:0:mem=6GiB:slow=3): each is a rank of its own with its own memory cap.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/plan/json_fields.h"

namespace gpumix::dist {

struct ClusterDevice {
  std::string type;          // catalog name, "cpu", or "cuda"
  std::string kind = "gpu";  // "gpu" or "cpu" (from the catalog; "gpu" for cuda)
  int gpu = -1;              // cuda: the GPU index (cuda:N); -1: the node-local rank's
  double memory_bytes = 0;   // usable memory; 0: the catalog's
  double slowdown = 1.0;     // times are multiplied by this (emulated devices)
  int count = 1;
  // "A6000", "cpu:mem=2GiB:slow=3", "cuda:0:slow=2": the device type's name in profiles
  // and plans.
  std::string label() const;
  bool is_cuda() const { return type == "cuda"; }
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
