// Profiles: what the planner knows about each device and about communication, for one
// model shape and sequence length. Written by the profiler (measured) or by the simulator
// (synthesised from the device catalog); read by the planner. JSON, documented in
// docs/planner.md.
//
// Units everywhere: seconds, bytes, bytes per second. Glossary: L layers, C channels,
// V vocabulary, T sequence length, m micro-batch size (samples), b a rank's batch.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "dist/plan/json_fields.h"
#include "nn/gpt_config.h"

namespace gpumix::dist {

// Everything a rank of this device type costs at one micro-batch size m.
struct MicroBatchSample {
  int64_t m = 0;                // micro-batch size (samples)
  double block_fwd_s = 0;       // forward of one block over one micro-batch
  double block_bwd_s = 0;       // backward of one block including the forward recompute
  double block_act_bytes = 0;   // allocator peak of one block's recompute + backward at m
  double head_s = 0;            // embedding + LM head + loss, forward and backward
  double head_bytes = 0;        // logits / loss buffers of one micro-batch
};

struct DeviceProfile {
  std::string name;             // device type, e.g. "A6000" or "cpu"
  std::string kind = "gpu";     // "gpu" or "cpu"
  double memory_bytes = 0;      // usable capacity
  double work_bytes = 0;        // fixed working memory: workspaces, communication buffers
  double optimizer_s_per_param = 0;  // AdamW on one fp32 parameter of the rank's shard
  double microbatch_overhead_s = 0;  // per block, per micro-batch beyond the first
  double host_bandwidth_Bps = 0;     // device <-> host copies for offload; 0: cannot offload
  double peak_flops = 0;             // dense peak in the compute dtype, for MFU only
  std::vector<MicroBatchSample> samples;  // ascending m, at least one

  // Interpolated / extrapolated value at micro-batch m >= 1 (see interpolate()).
  MicroBatchSample at(int64_t m) const;
  // at(m) for m = 1..max_m, at index m (index 0 unused), in one pass over the samples.
  std::vector<MicroBatchSample> table(int64_t max_m) const;
};

// One link class: time of a collective over n ranks moving `bytes` (the full, gathered
// buffer) is (n - 1) * latency_s + (n - 1) / n * bytes / bandwidth_Bps (the ring model;
// bandwidth_Bps is the bus bandwidth that nccl-tests reports). How the forms of the
// collectives (flat, hierarchical) are priced from the classes: dist/comm/collective_cost.h.
struct LinkProfile {
  double latency_s = 0;
  double bandwidth_Bps = 0;
};

struct CollectiveProfile {
  LinkProfile intra_node;       // all participants on one node
  LinkProfile inter_node;       // a flat collective whose participants span nodes (bandwidth_Bps 0: unset)
  LinkProfile leaders;          // one rank per node: the link between nodes itself (bandwidth_Bps 0: inter_node's)
  double uneven_factor = 1.0;   // the bytes term costs this much more when shares differ
};

struct CommProfile {
  CollectiveProfile all_gather;      // gathers a unit's parameters in the compute dtype
  CollectiveProfile reduce_scatter;  // reduces a unit's fp32 gradients
  // The fraction of a prefetched all-gather that the compute it was issued before hides,
  // 0..1: min(AG, compute) · overlap of it is hidden. 1 where the collective progresses on
  // its own (a GPU's comm stream); an MPI library without an asynchronous progress thread
  // moves most of a large message only inside the wait, and the profiler measures how much.
  double overlap = 1.0;
};

struct RankInfo {
  std::string device;  // a key of Profile::devices
  int node = 0;
  std::string node_name;  // the node's host name where the profiler ran ("" : not known)
};

struct Profile {
  GPTConfig model;
  int seq_len = 0;                     // T of the training sequences (<= model.T)
  // The run's compute dtype (f32 or bf16): every device computes in it, and every time and
  // activation size above was measured (or synthesised) in it.
  DType dtype = DType::f32;
  std::vector<DeviceProfile> devices;  // one per device type
  std::vector<RankInfo> ranks;         // rank r runs on ranks[r].device
  CommProfile comm;

  const DeviceProfile& device(const std::string& name) const;  // throws if unknown
  const DeviceProfile& rank_device(int rank) const { return device(ranks[rank].device); }
  int num_ranks() const { return (int)ranks.size(); }
  int num_nodes() const;

  // Throws FormatError naming the field when something is missing or out of range.
  void validate() const;
};


// The interpolation rule, one place for all tables: linear between measured sizes; below
// the smallest, the smallest's value (a smaller micro-batch is never slower or bigger);
// above the largest, linear extrapolation along the last segment (proportional to m when
// there is one sample), never decreasing.
double interpolate(const std::vector<MicroBatchSample>& samples, int64_t m,
                   double MicroBatchSample::*field);

// Time of one collective (bytes = the full buffer) among `ranks` of the profile, on
// `nodes` distinct nodes; `even` when all participants hold equal shares.
double collective_time(const CollectiveProfile& c, int ranks, int nodes, double bytes, bool even);

// The "comm" object of profile (and plan) files; `where` names it in errors.
nlohmann::json comm_to_json(const CommProfile& c);
CommProfile comm_from_json(const nlohmann::json& j, const std::string& where);

nlohmann::json profile_to_json(const Profile& p);
Profile profile_from_json(const nlohmann::json& j);  // validates
Profile read_profile(const std::string& path);
void write_profile(const Profile& p, const std::string& path);

// config_from_json (nn/gpt_config.h) for the profile and plan files: its errors as
// FormatError, so that reading a file names it.
GPTConfig model_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace gpumix::dist
