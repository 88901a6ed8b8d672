// The simulator: a cluster file and a model → a profile (measured device profiles where
// given, otherwise synthesised from the device catalog), then every planner's plan and its
// predicted step, side by side.
//
// Synthesis, per device type (see device_catalog.h for the efficiency assumptions):
//   block_fwd_s(m) = launch + m·T·flops_block / (peak · eff · mT/(mT + 256)) · slowdown
//   block_bwd_s(m) = launch·2 + 3 × the compute part (recompute 1× + backward 2×)
//   head_s(m)      = launch + 3 · m·T·flops_head / (same rate) (embedding, LM head, loss)
//   (flops_block, flops_head: the model family's, nn/model_family.h)
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
#include "dist/plan/planner_local.h"
#include "dist/plan/profile.h"
#include "dist/plan/sync.h"

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

// Local updates (`gpumix simulate --sync local:H [--groups N]`), as dist/engine/outer_step.h
// runs them and `gpumix train --sync local:H` plans them: the gpumix planner's local plan
// (dist/plan/planner_local.h: the groups, their rows and plans, the outer step, the waits),
// and per step tokens/s and MFU as every-step's (model FLOPs of the global batch over the
// step and the sum of every rank's peak) and the bytes across groups. Not modelled besides
// what planner_local.h leaves out: the bf16 rounding's effect on the loss. One group has no
// outer step: its prediction is every-step full sharding's exactly.
struct LocalSimulation : LocalPlan {
  double tokens_per_s = 0, mfu = 0;
  double cross_bytes_per_leader = 0;  // per step: 2P(G − 1)/H each leader sends (flat), 4(P/n)(G − 1)/(G H) each rank (sliced)
  double cross_bytes = 0;             // per step, all of them: G (flat) or G n (sliced) times that
  // The same cut for the every-step plan of the cluster (gpumix's; every_step_cross_bytes).
  double every_step_cross_bytes = 0;
};

// Bytes an every-step plan moves between the groups (group_of_rank) in one step, received by
// all groups together, as the hierarchical forms move them (dist/comm/collective_cost.h):
// a gather or reduce-scatter of a unit of U bytes among participants in K groups brings each
// group what it lacks, (K − 1)·U in all whatever the shares; per step the blocks are gathered
// twice (forward and backward), the embedding and head units once, every unit's fp32
// gradient reduce-scattered once. Hybrid sharding: that within each replica, plus the
// replicas' all-reduce, 2(K − 1)·S for a position's slice S over K groups. A lower bound for
// the flat forms, which cross a boundary more often.
double every_step_cross_bytes(const Plan& plan, const std::vector<int>& group_of_rank);

// Throws as plan_local (dist/plan/planner_local.h) does.
LocalSimulation simulate_local(const Profile& profile, int64_t global_batch, const LocalSync& sync,
                               const PlannerOptions& opts = {});
// every_step_cross_bytes of `every` (the every-step plan on the same profile) across l's groups.
void set_every_step_cross_bytes(LocalSimulation& l, const Plan& every);
std::string local_table(const LocalSimulation& l, const Simulation& s);
nlohmann::json local_to_json(const LocalSimulation& l);

// Text for the terminal.
std::string simulation_table(const Simulation& s);
std::string plan_table(const Plan& p);
nlohmann::json simulation_to_json(const Simulation& s);

}  // namespace gpumix::dist
