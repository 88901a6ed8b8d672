// The planner of local updates (`--sync local:H [--groups N]`, dist/engine/outer_step.h runs
// them): the one place that decides each group's rows of every global batch and each group's
// plan, for `gpumix train --sync local:H` with a planner and for `gpumix simulate --sync
// local:H` (dist/plan/simulator.h adds its throughput figures).
//
// The ranks form groups (sync_groups: one per node, or N of consecutive ranks). Each group is
// an every-step run of its own: the planner's plan for the group as a cluster of its own (its
// ranks, their links; full sharding inside, as the engine's groups shard) on its rows of
// every global batch, priced by the one cost model; every rank of a group takes part, as the
// engine runs them. All groups take H inner steps between
// outer steps, so a group's rows decide when it reaches the outer step: the rows are split in
// proportion to the groups' speeds, first the sum of their ranks' compute rates (samples/s of
// a whole step at a micro-batch of min(8, B/ranks)), then for up to kSplitRounds rounds in
// proportion to the tokens/s of the groups' plans at the last split, keeping the split with
// the shortest period (a group's communication and memory make its speed depend on its rows).
// The `even` planner splits the rows in proportion to the groups' ranks instead (the same
// rows for every rank, speeds ignored, as its every-step plan does). Every H inner steps, the
// outer step:
//   exchange_g = ring all-reduce of 4P fp32 bytes + tree broadcast of 4P bytes inside group g
//                (its node's link, or the inter-node one when it spans nodes)
//   cross      = the leaders' ring all-gather of 2P bf16 bytes each: (G − 1)·latency +
//                2P(G − 1) / bandwidth on the link between nodes (intra when every leader
//                shares one node); each leader receives 2P(G − 1) bytes
//   outer      = max_g exchange_g + cross
//   period     = max_g H · inner_g + outer,   wait_g = max_h H · inner_h − H · inner_g
//   step       = period / H
// P: the model's parameters (total_params, the engine's flat vector). Not modelled: the outer
// optimizer's compute (a few passes over P per outer step), any overlap of the exchange with
// the inner steps. One group has no outer step: its plan is every-step full sharding's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/plan/plan.h"
#include "dist/plan/planner.h"
#include "dist/plan/profile.h"
#include "dist/plan/sync.h"

namespace gpumix::dist {

// Re-splits of the rows by the groups' planned speeds after the first split by rates.
constexpr int kSplitRounds = 4;

struct SyncGroupPrediction {
  int group = 0;
  std::vector<int> ranks;   // of the cluster, ascending
  int64_t batch = 0;        // its rows of every global batch
  bool planned = false;     // false: no plan fits the group (error says why)
  std::string error;
  Plan plan;                // its own plan, its ranks numbered from 0
  double inner_s = 0;       // one inner step: its plan's step
  double exchange_s = 0;    // its part of the outer step inside the group
  double wait_s = 0;        // at each outer step, for the slowest group's H inner steps
};

struct LocalPlan {
  LocalSync sync;
  std::string planner;      // the planner of each group: gpumix, even, proportional, cephalo
  int64_t global_batch = 0;
  int64_t params = 0;       // P
  std::vector<SyncGroupPrediction> groups;
  std::string error;        // "": every group planned
  bool sliced = false;      // the sliced exchange (every group the same layout), else the flat one (outer_step.h)
  double cross_s = 0;       // the exchange across groups and the meeting after it (their latency), once per outer step
  double outer_s = 0;       // the whole exchange of an outer step
  double period_s = 0;      // H inner steps and the outer step
  double step_s = 0;        // period / H
  bool planned() const { return error.empty(); }
};

// Hybrid sharding (group_size > 0, --sharding G) with local updates: an InputError naming the
// flag and the fix (each group shards fully). Nothing when !sync.local.
void check_local_sharding(const LocalSync& sync, int group_size);

// Throws InputError for a bad --sync / --groups (dist/plan/sync.h: H < 1, one rank, groups
// not dividing the ranks), a global batch that gives a group no rows, hybrid sharding asked
// for (opts.group_size > 0: each group shards fully) and an unknown planner. A group that no
// plan fits is reported in the result's error (and its group's), not thrown.
LocalPlan plan_local(const Profile& profile, int64_t global_batch, const LocalSync& sync,
                     const std::string& planner = "gpumix", const PlannerOptions& opts = {});

// Every rank's plan in one, as `gpumix train` runs and writes it (plan.json): each group's
// ranks at their places in the cluster (rank, node), their shares divided by the number of
// groups (so that they sum to 1 over all the ranks, as a plan's do; the run renormalises them
// within each group: each group holds the whole state) and their idle time grown by their
// group's wait for the slowest group; its prediction is the slowest group's inner step (what
// a step between outer steps takes), its collectives those of rank 0's group (the group whose
// collectives a run times). Needs l.planned().
Plan local_combined_plan(const LocalPlan& l, const Profile& profile);

// The plan's per-group section for `gpumix train`: per group its ranks, rows per inner step,
// predicted inner step, the outer step's communication (inside the group and across), the
// wait per outer period and its share of the period.
std::string local_plan_table(const LocalPlan& l);

}  // namespace gpumix::dist
