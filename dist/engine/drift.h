// Drift: a device that no longer runs at the speed it was profiled at (thermal throttling,
// a noisy neighbour, an emulated device slowed down mid-run). The trainer compares each
// rank's measured compute time per step with the running plan's prediction; when a rank
// drifts, the profile is corrected and the planner asked again (dist/engine/trainer.cpp).
//
// What counts is relative speed: every rank's measured/predicted ratio is divided by the
// median ratio of all computing ranks, so that a model that is off by the same factor on
// every rank (a loaded machine) never triggers a re-plan; one rank whose relative ratio
// stays beyond 1 ± threshold on the same side (slower, or faster) for `steps` consecutive
// judged steps does. A step on which it is within the threshold, or off on the other side,
// starts its count again: a rank that was slower than planned just before it turned fast
// (a hiccup, or a plan that predicts its small batch badly) has drifted fast for as many
// steps as it has run fast, not one more.
#pragma once

#include <vector>

#include "dist/plan/profile.h"

namespace gpumix::dist {

struct DriftOptions {
  double threshold = 0.3;  // relative deviation that counts as drift (0: never re-plan)
  int steps = 3;           // consecutive drifting steps before re-planning
  int warmup = 2;          // steps after a (re)start or a re-plan that are not judged
};

class DriftMonitor {
 public:
  // predicted_busy_s: per rank, the plan's compute seconds per step (0 for a rank without a
  // batch: its time is too small to judge).
  DriftMonitor(const DriftOptions& options, std::vector<double> predicted_busy_s);

  // One step's measured compute seconds per rank. Returns, once drift is confirmed, one
  // factor per rank (measured / predicted relative to the others, the median over the
  // `steps` steps that confirmed it; exactly 1 for ranks whose median is within the
  // threshold) and starts over, warm-up included; otherwise an empty vector.
  std::vector<double> observe(const std::vector<double>& measured_busy_s);

 private:
  DriftOptions options_;
  std::vector<double> predicted_;
  int seen_ = 0;
  std::vector<std::vector<double>> window_;  // relative ratios of the last `steps` judged steps
  std::vector<int> run_;  // per rank: consecutive judged steps off to one side (+: slower, -: faster)
};

// The profile with rank i's device times (block forward/backward, head, optimizer,
// micro-batch overhead) multiplied by factors[i] where it is not 1. A corrected rank gets a
// device entry of its own ("<device>@rank<i>"), so ranks that shared a device type keep
// theirs.
Profile corrected_profile(const Profile& profile, const std::vector<double>& factors);

}  // namespace gpumix::dist
