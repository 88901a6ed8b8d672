// Local mode's part of the step loop (--sync local:H, dist/engine/outer_step.h): the ranks'
// groups and their communicators, each group's share of the batch, the outer step and what
// the run measures of it. The step loop (dist/engine/trainer.cpp) reads the same in both
// modes: its per-step collectives run on step_comm() (the whole run in every-step mode, this
// rank's group here) and the groups meet only where meets() says (every step in every-step
// mode, at the outer steps here):
//
//   inner step  the loss, the finite check, the norm, the step time: inside the group;
//               nothing crosses a group (log.jsonl's "cross_group_collectives": 0)
//   outer step  the exchange (OuterStep), then one meeting of every rank: the weighted
//               loss of the batch, the period's busy times, the stop request
//
// So a SIGTERM mid-period stops after the period's outer step (up to H - 1 steps later),
// with the regular checkpoint of an outer step; --stop-at and the last step run the outer
// step at their step (every rank knows them in advance).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/comm.h"
#include "dist/engine/engine.h"
#include "dist/engine/outer_step.h"
#include "dist/engine/run_report.h"  // LocalRunSummary
#include "dist/plan/planner_local.h"
#include "dist/plan/work.h"

namespace gpumix::dist {

class LocalMode {
 public:
  explicit LocalMode(const LocalSync& sync) : sync_(sync) {}

  // The groups' plan, when a planner made one (before form_groups).
  void set_plan(std::unique_ptr<LocalPlan> plan) { plan_ = std::move(plan); }
  const LocalPlan* plan() const { return plan_.get(); }

  // The ranks' groups, each with its communicator (and `device_comm`'s split, when the
  // engine's collectives run there) and its rows' share of the batch. Collective over `comm`.
  void form_groups(const TrainOptions& o, const Work& work, Comm& comm, Comm* device_comm);
  // After the engine is built (several groups): the outer step, from its master weights.
  void make_outer(Comm& comm, int64_t params, Engine& engine, Device host);
  // The engine's master weights were set after make_outer (--init-from): they are the outer
  // copy the first outer step measures the groups' change from.
  void masters_set(Engine& engine);

  bool formed() const { return group_comm_ != nullptr; }
  Comm& group_comm() { return *group_comm_; }
  // The engine's communicator of this group: the device communicator's split, else the group's.
  Comm& engine_comm() { return engine_group_ ? *engine_group_ : *group_comm_; }
  const std::vector<int>& group_of_rank() const { return group_of_rank_; }
  int group() const { return group_; }
  int groups() const { return groups_; }
  // The run's ranks in this group, in the group's rank order.
  const std::vector<int>& members() const { return members_; }
  int64_t rows() const { return rows_; }      // the group's rows of every global batch
  double weight() const { return weight_; }  // its share of the batch's tokens
  const LocalSync& sync() const { return sync_; }

  OuterStep* outer() { return outer_.get(); }
  const OuterStep* outer() const { return outer_.get(); }
  // `steps`: the run's --steps (a --stop-at before it saves mid-period, outer_step.h).
  bool outer_due(int step, int steps) const { return outer_ && outer_->due(step, steps); }
  // The exchange and the outer optimizer; returns its seconds.
  double outer_step(int step, Engine& engine);
  // Whether the groups meet after `step`: at its outer steps (always with one group).
  bool meets(int step, int steps) const { return !outer_ || outer_->due(step, steps); }
  // Whether the groups hold different weights after `step` (no outer step there).
  bool mid_period(int step) const { return outer_ && outer_->period_start() != step; }

  // Each step since the last meeting: this rank's busy seconds and its group's loss. At the
  // meeting, every rank's busy seconds (per step: per rank of the run) and the batch's loss
  // (per step: the groups' weighted, summed in group order): one all-gather over `comm`, the
  // doubles sent as their bits (exact).
  void add_step(double busy_s, double group_loss) { period_.push_back({busy_s, group_loss}); }
  struct Period {
    std::vector<std::vector<double>> busy_s;
    std::vector<double> loss;
  };
  Period gather_period(Comm& comm, Device host);

  // The collectives this rank ran across groups so far: on the whole run's communicator
  // `comm` (nothing else spans groups) and in the outer exchange.
  int64_t cross_group_calls(const Comm& comm) const;

  // What the final report says of the groups.
  LocalRunSummary summary(const Work& work) const;

 private:
  LocalSync sync_;
  std::unique_ptr<LocalPlan> plan_;  // with a planner: the groups' plan (the Replanner runs it combined)
  std::unique_ptr<Comm> group_comm_, engine_group_;
  std::vector<int> group_of_rank_, members_;
  int group_ = 0, groups_ = 1;
  int64_t rows_ = 0;
  double weight_ = 1;
  std::unique_ptr<OuterStep> outer_;  // null: one group
  std::vector<double> outer_history_s_;  // each outer step's seconds on this rank
  std::vector<std::array<double, 2>> period_;  // per step since the last meeting: busy seconds, group loss
};

}  // namespace gpumix::dist
