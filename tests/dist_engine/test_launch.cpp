// The one launcher (dist/engine/launch.h) of `gpumix train`, `gpumix profile` and the C API:
// its threads-per-rank rule, its default plan, its run-folder check on one rank and on
// thread ranks sharing it, and a launch refused whole before any folder is touched. No
// training here: tests/tools and tests/capi run the front ends end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/comm/comm.h"
#include "dist/engine/launch.h"

namespace fs = std::filesystem;
using namespace gpumix;
using namespace gpumix::dist;

namespace {

class Launcher : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("gpumix_launch_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchRules, ThreadsPerRank) {
  const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(threads_per_rank(8, 4, 4), 2);  // thread ranks share the threads given
  EXPECT_EQ(threads_per_rank(3, 4, 4), 1);  // at least 1
  EXPECT_EQ(threads_per_rank(6, 1, 3), 6);  // an MPI rank: the threads given are its own
  EXPECT_EQ(threads_per_rank(0, 1, 1), cores);
  EXPECT_EQ(threads_per_rank(0, 1, 2 * cores), 1);  // the node's cores shared by its ranks
  EXPECT_EQ(threads_per_rank(0, 2, 2), std::max(1, cores / 2));
}

TEST(LaunchRules, TheDefaultPlan) {
  PlanRequest r;
  EXPECT_EQ(resolved_plan(r, false), "even");
  EXPECT_EQ(resolved_plan(r, true), "auto");
  r.shares = "0.5,0.5";
  EXPECT_EQ(resolved_plan(r, true), "given");
  r.plan = "cephalo";
  EXPECT_EQ(resolved_plan(r, false), "cephalo");
}

TEST_F(Launcher, ARunFolderThatHoldsARunIsRefusedUnlessResumed) {
  const std::string run = dir_ + "/run";
  const std::string fix = "continue it elsewhere";
  { RunLock fresh = claim_run_folder(run, false, fix); EXPECT_TRUE(fresh.held()); }
  std::ofstream(run + "/log.jsonl").close();  // empty: a run that failed before its first step
  { RunLock empty_log = claim_run_folder(run, false, fix); EXPECT_TRUE(empty_log.held()); }
  std::ofstream(run + "/log.jsonl") << "{\"step\": 1}\n";
  EXPECT_EQ(error_of([&] { claim_run_folder(run, false, fix); }),
            "run folder " + run + " already holds a run (" + run + "/log.jsonl); " + fix);
  EXPECT_EQ(error_of([&] { claim_run_folder(run, true, fix); }), "");
  // Held by another claim: refused, naming the holder, on every thread rank alike.
  RunLock held = claim_run_folder(run, true, fix);
  std::vector<std::string> said(3);
  run_local(3, [&](Comm& comm) {
    said[comm.rank()] = error_of([&] { claim_run_folder(run, true, fix, &comm); });
  });
  for (const std::string& s : said) {
    EXPECT_NE(s.find("run folder " + run + " is in use by another run"), std::string::npos) << s;
    EXPECT_EQ(s, said[0]);
  }
}

// Every argument is checked before the folder is made or locked: nothing is left behind.
TEST_F(Launcher, ABadLaunchTouchesNoFolder) {
  LaunchRequest r;
  r.options.out = dir_ + "/never";
  auto refused = [&](const LaunchRequest& request, const std::string& says) {
    const std::string error = error_of([&] { prepare_launch(request); });
    EXPECT_NE(error.find(says), std::string::npos) << "'" << says << "' missing from: " << error;
    EXPECT_FALSE(fs::exists(dir_ + "/never"));
  };
  LaunchRequest bad = r;
  bad.options.lr = NAN;
  refused(bad, "--lr must be positive and finite, got nan");
  bad = r;
  bad.options.steps = 0;
  refused(bad, "--steps must be at least 1, got 0");
  bad = r;
  bad.options.batch = 0;
  refused(bad, "--batch must be at least 1, got 0");
  bad = r;
  bad.options.data = dir_ + "/no_corpus";
  refused(bad, "does not exist");
  bad = r;
  bad.ranks = 3;
  bad.devices = "cpu,cpu";
  refused(bad, "--ranks 3 but --devices lists 2 devices");
  bad = r;
  bad.plan.plan = "even";
  bad.sharding_given = true;
  refused(bad, "--sharding is the gpumix planner's");
  bad = r;
  bad.profile_bounds_given = {"--profile-repeats"};
  refused(bad, "--profile-repeats bounds the profile that a planner measures at start-up");
  // A good one: the even plan of two thread ranks, each with its share of the threads.
  r.devices = "cpu,cpu:slow=2";
  r.plan.plan = "even";
  r.options.batch = 4;
  r.options.threads = 4;
  const Launch launch = prepare_launch(r);
  EXPECT_EQ(launch.ranks, 2);
  EXPECT_EQ(launch.work.ranks.size(), 2u);
  EXPECT_EQ(launch.threads, 2);
  EXPECT_EQ(launch.engine.planner, "even");  // with devices, even is planned on their profile
  EXPECT_FALSE(fs::exists(dir_ + "/never"));
}

}  // namespace
