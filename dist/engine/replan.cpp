#include "dist/engine/replan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace gpumix::dist {

std::string Replanner::Change::describe_factors() const {
  std::string text;
  for (size_t i = 0; i < factors.size(); ++i)
    if (factors[i] != 1.0) text += str(" rank ", i, " x", std::round(factors[i] * 100) / 100);
  return text;
}

nlohmann::json Replanner::Change::record(const std::string& plan_text) const {
  nlohmann::json j = {{"factors", factors}, {"adopted", adopted},
                      {"predicted_ms_before", before_s * 1e3}, {"predicted_ms_after", after_s * 1e3}};
  if (adopted) j["plan"] = plan_text;
  return j;
}

std::string Replanner::Change::message(const std::string& plan_text) const {
  std::string text = str("rank speeds drifted from the plan (measured/predicted, relative:", describe_factors(), "): ");
  if (adopted)
    return text + str("re-planned and re-sharded, predicted step ", before_s * 1e3, " -> ", after_s * 1e3,
                      " ms; plan b/m/r per rank now ", plan_text);
  return text + str("kept the plan (a new one would not be 5% faster: ", before_s * 1e3, " vs ", after_s * 1e3,
                    " ms predicted)");
}

Replanner::Replanner(Profile profile, std::string name, int64_t global_batch, const DriftOptions& drift,
                     int sharding)
    : profile_(std::move(profile)), name_(std::move(name)), global_batch_(global_batch), drift_(drift) {
  // This engine keeps every rank in every collective, so a rank left out of the plan
  // would still hold the gathered units that its memory model does not count.
  options_.allow_leave_out = false;
  options_.group_size = sharding;
  plan_ = run_planner(name_, profile_, global_batch_, options_);
  // The engine re-shards within one group size: re-plans keep the first plan's sharding.
  options_.group_size = plan_.sharding.group_size;
  watch();
}

Replanner::Replanner(Profile profile, std::string name, Plan plan)
    : profile_(std::move(profile)), name_(std::move(name)), global_batch_(plan.global_batch), plan_(std::move(plan)),
      fixed_(true) {}

bool Replanner::observe(const std::vector<double>& busy_s) {
  if (fixed_ || name_ == "even") return false;  // even shares ignore speed: nothing to re-plan
  const std::vector<double> factors = monitor_->observe(busy_s);
  if (factors.empty()) return false;
  profile_ = corrected_profile(profile_, factors);
  const Plan current = make_plan(CostModel(profile_, options_.memory, 0, plan_.sharding), name_, global_batch_, plan_.work().ranks);
  change_ = {factors, false, current.predicted.step_s, current.predicted.step_s};
  plan_ = current;
  try {
    Plan next = run_planner(name_, profile_, global_batch_, options_);
    change_.after_s = next.predicted.step_s;
    if (next.predicted.step_s < 0.95 * current.predicted.step_s) {
      plan_ = std::move(next);
      change_.adopted = true;
      // A device whose speed keeps changing (the load of a shared machine) would be
      // re-planned back and forth: each adopted re-plan doubles the steps that must
      // confirm the next drift.
      drift_.steps = std::min(2 * drift_.steps, kMaxDriftSteps);
    }
  } catch (const InfeasiblePlan&) {
    // The corrected devices cannot hold any plan the model trusts: keep the running one.
  }
  watch();
  return true;
}

void Replanner::watch() {
  std::vector<double> predicted = predicted_busy_s(plan_);
  for (size_t i = 0; i < predicted.size(); ++i)
    if (plan_.ranks[i].work.batch == 0) predicted[i] = 0;  // a state-only rank's time is too small to judge
  monitor_ = std::make_unique<DriftMonitor>(drift_, predicted);
}

double median_after_warm_up(const std::vector<double>& per_step) {
  const size_t skip = per_step.size() > 3 ? 2 : 0;
  if (per_step.size() <= skip) return 0;
  std::vector<double> v(per_step.begin() + (long)skip, per_step.end());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<double> predicted_busy_s(const Plan& plan) {
  std::vector<double> t;
  for (const RankPlan& r : plan.ranks) t.push_back(r.busy_s);
  return t;
}

std::vector<double> predicted_bytes(const Plan& plan) {
  std::vector<double> b;
  for (const RankPlan& r : plan.ranks) b.push_back(r.memory.total());
  return b;
}

std::string prediction_table(const Plan& plan, const std::vector<std::vector<double>>& busy_history,
                             const std::vector<double>& peak) {
  std::string out = "predicted vs measured, per rank (compute per step; memory peak)\n"
                    "rank   busy ms pred   measured   ratio  |  memory pred   measured   ratio\n";
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    std::vector<double> b;
    for (const std::vector<double>& step : busy_history) b.push_back(step[r]);
    const double measured = median_after_warm_up(b), predicted = plan.ranks[r].busy_s;
    const double mem = plan.ranks[r].memory.total();
    char row[200];
    std::snprintf(row, sizeof row, "%4zu %14.1f %10.1f %7.2f  | %12s %10s %7.2f\n", r, predicted * 1e3, measured * 1e3,
                  predicted > 0 ? measured / predicted : 0.0, format_bytes((int64_t)mem).c_str(),
                  format_bytes((int64_t)peak[r]).c_str(), mem > 0 ? peak[r] / mem : 0.0);
    out += row;
  }
  return out;
}

}  // namespace gpumix::dist
