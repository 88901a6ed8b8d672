// Re-planning during training: the running plan and what it was made from (the profile,
// corrected as devices drift, and the planner), the drift monitor that compares measured
// compute times with the plan's, and the report of the plan's predictions against what
// was measured. The step loop (dist/engine/trainer.cpp) asks observe() each step and, when
// a new plan is adopted, re-shards the engine (Engine::reshard) from the next step on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/engine/drift.h"
#include "dist/plan/planner.h"

namespace gpumix::dist {

class Replanner {
 public:
  static constexpr int kMaxDriftSteps = 64;
  struct Change {
    std::vector<double> factors;       // per rank: measured / predicted, relative to the others
    bool adopted = false;              // a new plan replaced the running one
    double before_s = 0, after_s = 0;  // predicted step of the running plan and of the new one
    std::string describe_factors() const;
    // The log line's "replan" entry and the console message; `plan_text` is the b/m/r per
    // rank of the plan now running (shown when the change was adopted).
    nlohmann::json record(const std::string& plan_text) const;
    std::string message(const std::string& plan_text) const;
  };

  // `sharding`: the gpumix planner's (PlannerOptions::group_size; -1 it chooses).
  Replanner(Profile profile, std::string name, int64_t global_batch, const DriftOptions& drift, int sharding = -1);
  // A plan made elsewhere from `profile` (local updates' combined plan, dist/plan/planner_local.h),
  // kept for the whole run: observe() never re-plans.
  Replanner(Profile profile, std::string name, Plan plan);

  const Plan& plan() const { return plan_; }
  const Profile& profile() const { return profile_; }
  const std::string& name() const { return name_; }
  const Change& last_change() const { return change_; }

  // One step's compute seconds per rank. True when drift was confirmed: the profile is
  // corrected and, if the planner then finds a plan at least 5% faster than the running
  // one (both predicted on the corrected profile), it becomes the plan (last_change()).
  // Always false for a plan made elsewhere.
  bool observe(const std::vector<double>& busy_s);

 private:
  void watch();

  Profile profile_;
  std::string name_;
  int64_t global_batch_;
  DriftOptions drift_;
  PlannerOptions options_;
  Plan plan_;
  std::unique_ptr<DriftMonitor> monitor_;
  Change change_;
  bool fixed_ = false;  // a plan made elsewhere: never re-planned
};

// The median of per-step values, the first 2 (warming up) left out when there are more
// than 3; 0 when there are none.
double median_after_warm_up(const std::vector<double>& per_step);

// A plan's predictions per rank: compute seconds per step, and memory bytes.
std::vector<double> predicted_busy_s(const Plan& plan);
std::vector<double> predicted_bytes(const Plan& plan);

// Per rank: the plan's compute time per step next to the measured median (the first two
// steps of the plan left out: warm-up), and its memory next to the allocator's peak.
std::string prediction_table(const Plan& plan, const std::vector<std::vector<double>>& busy_history,
                             const std::vector<double>& peak);

}  // namespace gpumix::dist
