// The planners' common ground (dist/plan/planner_shared.h lists the files of each kind):
// the cost model and micro-batch grid of a plan, the gpumix planner's choice between full
// and hybrid sharding, and the lookup by name.
#include "dist/plan/planner.h"

#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "dist/plan/planner_shared.h"

namespace gpumix::dist {

void check_batch(int64_t B) {
  if (B < 1 || B > kMaxGlobalBatch)
    throw std::invalid_argument("global batch must be in [1, " + std::to_string(kMaxGlobalBatch) +
                                "] sequences, got " + std::to_string(B));
}

CostModel planner_cost_model(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  check_batch(B);
  return CostModel(profile, opts.memory, B);
}

std::vector<int64_t> micro_batch_grid(const CostModel& cost, int64_t B) {
  std::set<int64_t> ms;
  for (int64_t m = 1; m <= B; m *= 2) ms.insert(m);
  std::set<int> devices;
  for (int i = 0; i < cost.profile().num_ranks(); i++) devices.insert(cost.device_index(i));
  for (int d : devices)
    for (const MicroBatchSample& s : cost.profile().devices[d].samples)
      if (s.m <= B) ms.insert(s.m);
  return std::vector<int64_t>(ms.begin(), ms.end());
}

Plan plan_gpumix(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  const CostModel cost = planner_cost_model(profile, B, opts);
  const std::vector<int64_t> grid = micro_batch_grid(cost, B);
  if (opts.group_size > 0) return plan_hybrid_on(cost.with_sharding(Sharding{opts.group_size}), B, grid);
  if (opts.group_size == 0) return plan_full(cost, B, grid, opts);
  // Full, then every aligned hybrid: the shortest predicted step that fits (full on a tie).
  std::optional<Plan> chosen;
  std::optional<InfeasiblePlan> full_error;
  try {
    chosen = plan_full(cost, B, grid, opts);
  } catch (const InfeasiblePlan& e) {
    full_error = e;
  }
  for (int g : hybrid_group_sizes(profile)) {
    try {
      Plan h = plan_hybrid_on(cost.with_sharding(Sharding{g}), B, grid);
      if (h.fits() && (!chosen || h.predicted.step_s < chosen->predicted.step_s)) chosen = std::move(h);
    } catch (const InfeasiblePlan&) {
      // This group size cannot hold the state or the batch: others may.
    }
  }
  if (!chosen) throw *full_error;
  return *chosen;
}

std::vector<std::string> planner_names() { return {"gpumix", "even", "proportional", "cephalo"}; }

Plan run_planner(const std::string& name, const Profile& profile, int64_t B, const PlannerOptions& opts) {
  if (name == "gpumix") return plan_gpumix(profile, B, opts);
  if (name == "even") return plan_even(profile, B, opts);
  if (name == "proportional") return plan_proportional(profile, B, opts);
  if (name == "cephalo") return plan_cephalo(profile, B, opts);
  throw std::invalid_argument("unknown planner '" + name + "' (gpumix, even, proportional, cephalo)");
}

}  // namespace gpumix::dist
