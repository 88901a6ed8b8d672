// What the planners of dist/plan/planner.h share, internal to dist/plan (not installed):
//   planner.cpp            the cost model and micro-batch grid of a plan, the gpumix
//                          planner's choice between full and hybrid sharding, the lookup by name
//   planner_search.cpp     full sharding's search over (b, m, r, offload) per rank
//   planner_full.cpp       full sharding: the sets searched, why nothing fits, the offload pass
//   planner_hybrid.cpp     hybrid sharding: the group sizes, the positions' shares, the batch
//   planner_baselines.cpp  even, proportional, cephalo
// A plan is built on ONE cost model and ONE micro-batch grid: plan_gpumix hands the same to
// full sharding and to every hybrid group size (CostModel::with_sharding shares its tables).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dist/plan/cost_model.h"
#include "dist/plan/plan.h"
#include "dist/plan/planner.h"
#include "dist/plan/profile.h"

namespace gpumix::dist {

// Throws std::invalid_argument unless 1 <= B <= kMaxGlobalBatch.
void check_batch(int64_t B);

// The cost model of a plan for global batch B (checked): full sharding, its tables up to
// micro-batch B.
CostModel planner_cost_model(const Profile& profile, int64_t B, const PlannerOptions& opts);

// The micro-batch sizes the searches of large instances try: 1, 2, 4, 8, ... up to B, plus
// the sizes profiled (at most B) on the devices of the cost model's ranks.
std::vector<int64_t> micro_batch_grid(const CostModel& cost, int64_t B);

// Full sharding's search: the fastest work (every rank's, in rank order) over the
// participating `sets` that fits, exactly or on `grid` (planner.h says how); nullopt when
// none fits.
std::optional<std::vector<RankWork>> search_full(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid,
                                                 const PlannerOptions& opts, bool exact,
                                                 const std::vector<std::vector<int>>& sets);

// plan_gpumix's full sharding on `cost` (full); throws InfeasiblePlan with the numbers.
Plan plan_full(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid, const PlannerOptions& opts);

// plan_hybrid on `cost`, whose sharding is hybrid (its group size is the plan's).
Plan plan_hybrid_on(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid);

}  // namespace gpumix::dist
