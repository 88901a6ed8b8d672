// The drift monitor (dist/engine/drift.h) on given step times: which steps count as
// drifting, and when a drift is confirmed. No clock: the timelines are exact.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/engine/drift.h"

namespace gpumix::dist {
namespace {

// Three ranks predicted at 1 s each; --drift-threshold 0.5, `steps` drifting steps.
DriftMonitor three_ranks(int steps) {
  DriftOptions o;
  o.threshold = 0.5;
  o.steps = steps;
  o.warmup = 2;
  return DriftMonitor(o, {1, 1, 1});
}

// Feeds steps of times {1, 1, rank2} and returns the 1-based index of the step that
// confirmed a drift (0: none), with the factors it returned.
int confirmed_at(DriftMonitor& monitor, const std::vector<double>& rank2, std::vector<double>* factors = nullptr) {
  for (size_t k = 0; k < rank2.size(); ++k) {
    std::vector<double> f = monitor.observe({1, 1, rank2[k]});
    if (!f.empty()) {
      if (factors) *factors = f;
      return (int)k + 1;
    }
  }
  return 0;
}

TEST(Drift, ASlowRankIsConfirmedAfterItsStepsWithTheMedianFactor) {
  DriftMonitor m = three_ranks(3);
  std::vector<double> f;
  // Warm-up (not judged, however slow), two drifting steps, one within the threshold
  // (starts over), then three drifting steps.
  EXPECT_EQ(confirmed_at(m, {9, 9, 2, 3, 1.2, 2, 4, 3}, &f), 8);
  EXPECT_EQ(f, (std::vector<double>{1, 1, 3}));
  // After a confirmation it starts over, warm-up included.
  EXPECT_EQ(confirmed_at(m, {3, 3, 3, 3}), 0);
  EXPECT_EQ(confirmed_at(m, {3}), 1);
}

// Issue 15: rank 2, already slower than planned at step 11 (slow side), runs fast from
// step 12 on; with 4 steps to confirm, step 11 must not count: the first possible
// confirmation is step 15, not 14.
TEST(Drift, AStepDriftingTheOtherWayDoesNotCountForADrift) {
  DriftMonitor m = three_ranks(4);
  std::vector<double> rank2 = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1.6, 0.3, 0.3, 0.3, 0.3};
  std::vector<double> f;
  EXPECT_EQ(confirmed_at(m, rank2, &f), 15);
  EXPECT_EQ(f, (std::vector<double>{1, 1, 0.3}));
}

// Another rank's drifting step (rank 0 slow at step 5) does not count for rank 2's drift
// either.
TEST(Drift, AnotherRanksDriftingStepDoesNotCount) {
  DriftMonitor m = three_ranks(3);
  const std::vector<std::vector<double>> steps = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
                                                  {2, 1, 1}, {1, 1, 3}, {1, 1, 3}, {1, 1, 3}};
  for (size_t k = 0; k < steps.size(); ++k) {
    const std::vector<double> f = m.observe(steps[k]);
    EXPECT_EQ(f.empty(), k + 1 != steps.size()) << "step " << k + 1;
    if (!f.empty()) {
      EXPECT_EQ(f, (std::vector<double>{1, 1, 3}));
    }
  }
}

// The factors are the median over the confirming steps of every rank, kept where beyond the
// threshold: a second rank that drifted as well is corrected in the same re-plan.
TEST(Drift, EveryRankBeyondTheThresholdOverTheStepsGetsItsFactor) {
  DriftOptions o;
  o.threshold = 0.5;
  o.steps = 3;
  o.warmup = 0;
  DriftMonitor m(o, {1, 1, 1, 1, 1});
  EXPECT_TRUE(m.observe({1, 1, 1, 4, 0.2}).empty());
  EXPECT_TRUE(m.observe({1, 1, 1, 1, 0.3}).empty());
  EXPECT_EQ(m.observe({1, 1, 1, 4, 0.25}), (std::vector<double>{1, 1, 1, 4, 0.25}));
}

TEST(Drift, ALoadedMachineSlowingEveryRankIsNoDrift) {
  DriftMonitor m = three_ranks(2);
  for (int k = 0; k < 10; ++k) EXPECT_TRUE(m.observe({5, 5, 5}).empty()) << "step " << k + 1;
}

TEST(Drift, RanksWithoutAPredictionAreNotJudgedAndThresholdZeroNeverReplans) {
  DriftOptions o;
  o.threshold = 0.5;
  o.steps = 2;
  o.warmup = 0;
  DriftMonitor without_batch(o, {1, 1, 0});  // rank 2 holds state only
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(without_batch.observe({1, 1, 50}).empty());
  DriftMonitor one_judged(o, {1, 0, 0});  // nothing to compare it with
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(one_judged.observe({9, 1, 1}).empty());
  o.threshold = 0;
  DriftMonitor never(o, {1, 1, 1});
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(never.observe({1, 1, 9}).empty());
}

TEST(Drift, MeasuredTimesForTheWrongNumberOfRanksAreAnError) {
  DriftMonitor m = three_ranks(2);
  try {
    m.observe({1, 1});
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("2 measured times for 3 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpumix::dist
