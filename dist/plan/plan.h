// A plan: per rank, its work (dist/plan/work.h: the batch b_i, micro-batch m_i, state share
// r_i and offload flag), with the predicted memory terms and times; the sharded engine
// executes its work (Plan::work()). JSON, documented in docs/planner.md. A rank left out
// has b = 0 and r = 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/plan/cost_model.h"
#include "dist/plan/memory_model.h"
#include "dist/plan/profile.h"
#include "dist/plan/work.h"
#include "nn/gpt_config.h"

namespace gpumix::dist {

struct RankPlan {
  int rank = 0;
  std::string device;
  int node = 0;
  std::string node_name;         // the node's host name ("" : not known, e.g. a simulated cluster)
  RankWork work;                 // b_i, m_i (0 when b_i = 0, at most b_i), r_i, offload
  // Predictions.
  MemoryTerms memory;
  double capacity = 0;
  double block_s = 0;            // t_i, one block forward + backward with its collectives
  double fwd_s = 0, bwd_s = 0;   // compute of one block over all micro-batches
  double head_s = 0;             // embedding + head + loss compute
  double optimizer_s = 0;
  double busy_s = 0, comm_s = 0, idle_s = 0;  // over one step; they add up to the step

  bool left_out() const { return !work.takes_part(); }
  bool fits() const { return memory.total() <= capacity; }
};

struct PlanPrediction {
  double step_s = 0;
  double block_s = 0, head_s = 0, optimizer_s = 0;  // the three terms of T_step
  double ag_s = 0, rs_s = 0;                         // per block
  double ar_s = 0;                                   // per block, hybrid: across groups
  double embed_ag_s = 0, embed_rs_s = 0, embed_ar_s = 0;  // the embedding unit's, once a step each
  bool even_shares = true;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs / (step · Σ peak of all ranks)
};

struct Plan {
  std::string planner;  // "gpumix", "even", "proportional", "cephalo"
  GPTConfig model;
  int seq_len = 0;
  // The compute dtype it was made for (its profile's): its memory and times hold only in
  // it. Plan files without one are f32, the only dtype training had before.
  DType dtype = DType::f32;
  int64_t global_batch = 0;
  // Full or hybrid (dist/plan/cost_model.h); in a hybrid plan each rank's share is its
  // part of its group's state (the shares of each group sum to 1). Files without one: full.
  Sharding sharding;
  std::vector<RankPlan> ranks;
  PlanPrediction predicted;
  // The links its collectives were priced with (its profile's), so that a run of the plan
  // file chooses their forms as the prediction did; absent in files without one.
  std::optional<CommProfile> comm;

  bool fits() const;
  // Empty when the plan fits; otherwise which ranks run out of memory, by how much.
  std::string oom_message() const;
  // Every rank's work and the sharding: what the engine runs, and what a plan is made from
  // again (make_plan) when its predictions are to be redone.
  Work work() const;
};

// Builds a plan from every rank's work (b, m, r, offload), with every prediction filled in
// by the cost model (and its sharding). m is taken as min(m, b) (0 where b = 0), offload
// only where b > 0.
Plan make_plan(const CostModel& cost, const std::string& planner, int64_t global_batch,
               const std::vector<RankWork>& work);

nlohmann::json plan_to_json(const Plan& p);
Plan plan_from_json(const nlohmann::json& j);  // checks the file's own consistency
Plan read_plan(const std::string& path);
void write_plan(const Plan& p, const std::string& path);

// Checks a plan against the profile it will run on (same model, sequence length and
// ranks; Σ b = global batch; Σ r = 1, per group when hybrid; n = ceil(b/m); every rank
// fits its memory).
// Throws FormatError naming the field.
void validate_plan(const Plan& p, const Profile& profile, const MemoryParams& memory = {});

}  // namespace gpumix::dist
