// The simulator: a cluster file and a model → a profile (measured device profiles where
// given, otherwise synthesised from the device catalog), then every planner's plan and its
// predicted step, side by side.
//
// Synthesis, per device type (see device_catalog.h for the efficiency assumptions):
//   block_fwd_s(m) = launch + m·T·flops_block / (peak · eff · mT/(mT + 256)) · slowdown
//   block_bwd_s(m) = launch·2 + 3 × the compute part (recompute 1× + backward 2×)
//   head_s(m)      = launch + 3 · m·T·2·C·V / (same rate) (embedding, LM head, loss)
//   block_act_bytes, head_bytes: MemoryModel's analytic formulas, in the profile's dtype
//   (the rates are the catalog's, in its dtype, whatever the profile's)
//   work_bytes = 1 GiB on GPUs (context, cuBLAS workspace, NCCL buffers), 256 MiB on CPUs
//   optimizer_s_per_param = 30 B / (0.7 · memory bandwidth)
//   microbatch_overhead_s = 30 µs (GPU), 100 µs (CPU)
// and communication from the cluster's links (same link figures for AG and RS).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/plan/cluster.h"
#include "dist/plan/plan.h"
#include "dist/plan/planner.h"
#include "dist/plan/profile.h"

namespace gpumix::dist {

// The profile of the cluster's ranks computing in `dtype` (default: as a run would choose,
// dist/plan/compute_dtype.h: bf16 where every device type's catalog rate is a 16-bit one,
// the GPUs, f32 otherwise). A measured profile of another dtype is an error naming both.
Profile synthesize_profile(const Cluster& cluster, const GPTConfig& model, int seq_len,
                           const std::vector<Profile>& measured = {}, std::optional<DType> dtype = {});

struct SimEntry {
  std::string planner;
  bool planned = false;  // false: the planner found no plan (error says why)
  std::string error;
  Plan plan;
};

struct Simulation {
  std::string cluster;
  int ranks = 0;
  GPTConfig model;
  int seq_len = 0;
  DType dtype = DType::f32;
  int64_t global_batch = 0;
  // gpumix, (on clusters of several nodes: gpumix-full and gpumix-hybrid, the best of each
  // sharding), even, proportional, cephalo
  std::vector<SimEntry> entries;
};

Simulation simulate(const Profile& profile, const std::string& cluster_name, int64_t global_batch,
                    const PlannerOptions& opts = {});

// Text for the terminal.
std::string simulation_table(const Simulation& s);
std::string plan_table(const Plan& p);
nlohmann::json simulation_to_json(const Simulation& s);

}  // namespace gpumix::dist
