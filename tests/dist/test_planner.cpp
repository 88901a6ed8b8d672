// The planner against exhaustive search, the baselines' failures it avoids, leaving slow
// devices out, a randomised sweep, determinism, infeasible inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <random>

#include "dist/plan/plan.h"
#include "dist/plan/planner.h"
#include "dist/plan/simulator.h"
#include "tests/dist/test_util.h"

namespace gpumix::dist {
namespace {

using testing::exhaustive_search;
using testing::fake_profile;
using testing::FakeDevice;
using testing::random_profile;
using testing::tiny_model;

constexpr double MiB = 1024.0 * 1024.0;

// A plan is well formed and fits: Σ b = B, Σ r = 1, n = ceil(b/m), every rank fits.
void expect_valid(const Plan& plan, const Profile& p, int64_t B) {
  int64_t sb = 0;
  double sr = 0;
  for (const RankPlan& r : plan.ranks) {
    sb += r.work.batch;
    sr += r.work.share;
    EXPECT_LE(r.memory.total(), r.capacity) << "rank " << r.rank;
    if (r.work.batch > 0) {
      EXPECT_GE(r.work.micro_batch, 1);
      EXPECT_EQ(r.work.num_micro_batches(), (r.work.batch + r.work.micro_batch - 1) / r.work.micro_batch);
    }
  }
  EXPECT_EQ(sb, B);
  // Hybrid: each group's shares sum to 1 (the same in every group).
  EXPECT_NEAR(sr, plan.sharding.hybrid() ? (double)plan.ranks.size() / plan.sharding.group_size : 1.0, 1e-9);
  EXPECT_TRUE(plan.fits()) << plan.oom_message();
  EXPECT_NO_THROW(validate_plan(plan, p));
}

TEST(Planner, MatchesExhaustiveSearchOnSmallInstances) {
  std::mt19937 rng(1234);
  int compared = 0, infeasible = 0;
  for (int trial = 0; trial < 160; trial++) {
    const Profile p = random_profile(rng, trial < 120 ? 3 : 4);
    const int64_t B = 1 + rng() % (p.num_ranks() <= 2 ? 16 : p.num_ranks() == 3 ? 10 : 7);
    const testing::Exhaustive ex = exhaustive_search(p, B);
    try {
      PlannerOptions full;  // the exhaustive search knows full sharding only
      full.group_size = 0;
      const Plan plan = plan_gpumix(p, B, full);
      expect_valid(plan, p, B);
      if (ex.found) {
        // Exact: never worse than the best plan on the grid of shares.
        EXPECT_LE(plan.predicted.step_s, ex.step * (1 + 1e-9)) << "trial " << trial << " N=" << p.num_ranks()
                                                               << " B=" << B;
        compared++;
      }
    } catch (const InfeasiblePlan& e) {
      EXPECT_FALSE(ex.found) << "trial " << trial << ": planner says infeasible, exhaustive found "
                             << ex.step << ": " << e.what();
      EXPECT_GE(e.missing_bytes, 0);
      infeasible++;
    }
  }
  EXPECT_GT(compared, 80);
  EXPECT_GT(infeasible, 0);
}

TEST(Planner, ExactOnFourRanksBatchSixteen) {
  const GPTConfig model = tiny_model(2);
  std::vector<FakeDevice> devs = {{"fast", 2.6 * MiB, 1e-4}, {"slow", 1.2 * MiB, 4e-4},
                                  {"mid", 1.6 * MiB, 2e-4, 2e-4, 2e-9, 2e9}};
  const Profile p = fake_profile(model, 32, devs, {0, 1, 2, 1});
  const testing::Exhaustive ex = exhaustive_search(p, 12, 24);
  ASSERT_TRUE(ex.found);
  const Plan plan = plan_gpumix(p, 12);
  expect_valid(plan, p, 12);
  EXPECT_LE(plan.predicted.step_s, ex.step * (1 + 1e-9));
}

// Cephalo's water-filling puts state on ranks that have no room for it; ours fits. Among
// random small clusters, find the cases where its plan overflows a rank that *received*
// state (the flaw of docs/method.md §4.1), and check that ours fits there.
TEST(Planner, CephaloPlanDoesNotFitOursDoes) {
  std::mt19937 rng(31);
  int flaw_cases = 0, ours_fit = 0;
  for (int trial = 0; trial < 400; trial++) {
    const Profile p = random_profile(rng, 4);
    const int64_t B = 1 + rng() % 16;
    const Plan ceph = plan_cephalo(p, B);
    if (ceph.fits()) continue;
    bool receiver_overflows = false;
    for (const RankPlan& r : ceph.ranks)
      if (!r.fits() && r.work.share > 1.0 / p.num_ranks() + 1e-12) receiver_overflows = true;
    if (!receiver_overflows) continue;
    flaw_cases++;
    try {
      const Plan ours = plan_gpumix(p, B);
      expect_valid(ours, p, B);
      ours_fit++;
    } catch (const InfeasiblePlan&) {
    }
  }
  EXPECT_GE(flaw_cases, 10);
  EXPECT_GE(ours_fit, 5);
  RecordProperty("cephalo_overflowed_receivers", flaw_cases);
  RecordProperty("gpumix_fits_there", ours_fit);
}

// A very slow device with a slow link: leaving it out is faster.
TEST(Planner, LeavesOutASlowDeviceWhenThatIsFaster) {
  const GPTConfig model = tiny_model(2);
  std::vector<FakeDevice> devs = {{"fast", 4 * MiB, 1e-4}, {"crawl", 4 * MiB, 1e-2}};
  // Rank 2 sits on another node: its collectives cross the slow inter-node link.
  const Profile p = fake_profile(model, 32, devs, {0, 0, 1}, 1e9, 1e-5, 1.1, {0, 0, 1});
  const Plan ours = plan_gpumix(p, 8);
  expect_valid(ours, p, 8);
  EXPECT_TRUE(ours.ranks[2].left_out()) << "b=" << ours.ranks[2].work.batch << " r=" << ours.ranks[2].work.share;
  const testing::Exhaustive ex = exhaustive_search(p, 8);
  EXPECT_LE(ours.predicted.step_s, ex.step * (1 + 1e-9));
  EXPECT_LT(ours.predicted.step_s, plan_even(p, 8).predicted.step_s);
  EXPECT_LT(ours.predicted.step_s, plan_proportional(p, 8).predicted.step_s);
}

// The planner may keep a slow rank only as a holder of state when memory is short.
TEST(Planner, SlowRankWithMemoryHoldsStateOnly) {
  const GPTConfig model = tiny_model(2);
  std::vector<FakeDevice> devs = {{"fast", 1.3 * MiB, 1e-4}, {"crawl-big", 8 * MiB, 1e-1}};
  const Profile p = fake_profile(model, 32, devs, {0, 0, 1});
  const Plan ours = plan_gpumix(p, 8);
  expect_valid(ours, p, 8);
  EXPECT_EQ(ours.ranks[2].work.batch, 0);
  EXPECT_GT(ours.ranks[2].work.share, 0.3);
}

TEST(Planner, RandomisedSweepEveryPlanFits) {
  std::mt19937 rng(99);
  int plans = 0, infeasible = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int trial = 0; trial < 3000; trial++) {
    const Profile p = random_profile(rng, 4);
    const int64_t B = 1 + rng() % 16;
    try {
      const Plan plan = plan_gpumix(p, B);
      ASSERT_TRUE(plan.fits()) << "trial " << trial << ": " << plan.oom_message();
      int64_t sb = 0;
      double sr = 0;
      for (const RankPlan& r : plan.ranks) {
        sb += r.work.batch;
        sr += r.work.share;
      }
      ASSERT_EQ(sb, B);
      ASSERT_NEAR(sr, plan.sharding.hybrid() ? (double)plan.ranks.size() / plan.sharding.group_size : 1.0, 1e-9);
      plans++;
    } catch (const InfeasiblePlan& e) {
      EXPECT_NE(std::string(e.what()).find("no plan fits"), std::string::npos);
      EXPECT_GE(e.missing_bytes, 0);
      infeasible++;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(s));
  EXPECT_GT(plans, 1000);
  EXPECT_GT(infeasible, 50);
}

TEST(Planner, InfeasibleSaysHowMuchIsMissing) {
  const GPTConfig model = tiny_model(2);
  std::vector<FakeDevice> devs = {{"small", 0.6 * MiB, 1e-4}};
  const Profile p = fake_profile(model, 32, devs, {0, 0});
  try {
    plan_gpumix(p, 4);
    FAIL() << "expected InfeasiblePlan";
  } catch (const InfeasiblePlan& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lacks"), std::string::npos) << what;
    EXPECT_GT(e.missing_bytes, 0.5 * MiB);
    // Adding the missing memory per rank (plus slack for the per-sample terms) makes it fit.
    std::vector<FakeDevice> more = {{"small", 0.6 * MiB + e.missing_bytes / 2 + 0.2 * MiB, 1e-4}};
    EXPECT_NO_THROW(plan_gpumix(fake_profile(model, 32, more, {0, 0}), 4));
  }
  // A rank that cannot even hold the gathered parameters is named.
  std::vector<FakeDevice> tiny = {{"tiny", 0.1 * MiB, 1e-4}};
  try {
    plan_gpumix(fake_profile(model, 32, tiny, {0}), 1);
    FAIL();
  } catch (const InfeasiblePlan& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 (tiny"), std::string::npos) << e.what();
  }
}

TEST(Planner, Deterministic) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; trial++) {
    const Profile p = random_profile(rng, 4);
    try {
      const Plan a = plan_gpumix(p, 9), b = plan_gpumix(p, 9);
      EXPECT_EQ(plan_to_json(a).dump(), plan_to_json(b).dump());
    } catch (const InfeasiblePlan&) {
    }
  }
}

TEST(Planner, NeverWorseThanAFittingBaseline) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 300; trial++) {
    const Profile p = random_profile(rng, 4);
    const int64_t B = 1 + rng() % 16;
    Plan ours;
    try {
      ours = plan_gpumix(p, B);
    } catch (const InfeasiblePlan&) {
      for (const char* name : {"even", "proportional", "cephalo"})
        EXPECT_FALSE(run_planner(name, p, B).fits()) << name << " fits where gpumix found nothing";
      continue;
    }
    for (const char* name : {"even", "proportional", "cephalo"}) {
      const Plan base = run_planner(name, p, B);
      if (base.fits()) {
        EXPECT_LE(ours.predicted.step_s, base.predicted.step_s * (1 + 1e-7)) << name;
      }
    }
  }
}

// The large path (greedy allocation, 1-2-4-8 grid) on instances the exact path also solves:
// within 1.5x of the exact plan on 95 % of them (58 here; 1 beyond with gcc -O3, 2 with
// clang -O1, whose rounding breaks ties differently), never beyond 2x. (Ranks of one device type
// move together in the greedy allocation, so a tiny batch that the exact path gives to one
// rank of a type can cost it; trial 51 here, B = 4 on three small devices, is such a case.)
TEST(Planner, FastPathCloseToExact) {
  std::mt19937 rng(5);
  PlannerOptions fast;
  fast.exact_max_ranks = 0;
  int solved = 0, beyond = 0;
  for (int trial = 0; trial < 100; trial++) {
    const Profile p = random_profile(rng, 4);
    const int64_t B = 1 + rng() % 16;
    try {
      const Plan exact = plan_gpumix(p, B);
      const Plan approx = plan_gpumix(p, B, fast);
      expect_valid(approx, p, B);
      solved++;
      beyond += approx.predicted.step_s > exact.predicted.step_s * 1.5;
      EXPECT_LE(approx.predicted.step_s, exact.predicted.step_s * 2) << "trial " << trial << " B " << B << "\n"
          << plan_table(exact) << plan_table(approx);
    } catch (const InfeasiblePlan&) {
    }
  }
  EXPECT_GT(solved, 50);
  EXPECT_LE(beyond, solved / 20) << beyond << " of " << solved << " beyond 1.5x of the exact plan";
}


// Full sharding across two nodes joined by a slow link, where the collectives run
// hierarchically: node 0's devices update their state 100x cheaper, so the optimizer alone
// would put 99 % of it there, but then node 1's leader receives nearly every block over the
// slow link (and node 0's reduces nearly all of it). The planner splits the state evenly
// between the nodes, and its plan beats the optimizer's placement by the model; where one
// of node 1's ranks has room for little state (no even shares fit), node 1's other rank
// takes the rest of node 1's half.
TEST(Planner, StateOnTheFarSideOfASlowLinkCostsMoreToGather) {
  const GPTConfig model = tiny_model(2);
  std::vector<FakeDevice> devs = {{"cheap-optimizer", 8 * MiB, 1e-4, 1e-4, 1e-10},
                                  {"dear-optimizer", 8 * MiB, 1e-4, 1e-4, 1e-8},
                                  {"dear-and-small", 1.0 * MiB, 1e-4, 1e-4, 1e-8}};
  PlannerOptions full;
  full.group_size = 0;
  full.allow_leave_out = false;  // as training plans: every rank in every collective
  for (int last : {1, 2}) {
    SCOPED_TRACE(devs[last].name + " as rank 3");
    const Profile p = fake_profile(model, 32, devs, {0, 0, 1, last}, 1e8, 1e-5, 1.1, {0, 0, 1, 1});
    const Plan plan = plan_gpumix(p, 8, full);
    expect_valid(plan, p, 8);
    const double node0 = plan.ranks[0].work.share + plan.ranks[1].work.share;
    EXPECT_NEAR(node0, 0.5, 0.1) << "node 0 holds " << node0 << " of the state\n" << plan_table(plan);
    if (last == 2) {
      EXPECT_GT(plan.ranks[2].work.share, 1.5 * plan.ranks[3].work.share) << plan_table(plan);
    }
    // The optimizer's placement (shares in inverse proportion to its time per parameter)
    // with the same batches, predicted by the same model: slower.
    std::vector<RankWork> by_optimizer = plan.work().ranks;
    const double w0 = 1 / 1e-10, w1 = 1 / 1e-8;
    for (int i = 0; i < 4; i++) by_optimizer[i].share = (i < 2 ? w0 : w1) / (2 * w0 + 2 * w1);
    const CostModel cost(p, {}, 8);
    const Plan placed_by_optimizer = make_plan(cost, "gpumix", 8, by_optimizer);
    EXPECT_LT(plan.predicted.step_s, 0.9 * placed_by_optimizer.predicted.step_s);
    EXPECT_GT(placed_by_optimizer.predicted.ag_s, 1.2 * plan.predicted.ag_s);
  }
}

// ---- hybrid sharding -------------------------------------------------------------------------

// 4 nodes of 4 equal ranks: the profile's inter-node link (latency x5, bandwidth / 8 of the
// link inside a node, fake_profile's) or, with `fast_inter`, links as fast as inside a node.
Profile four_nodes(double latency, bool fast_inter) {
  const GPTConfig model = tiny_model(2);
  std::vector<FakeDevice> devs = {{"gpu", 8 * MiB, 1e-4}};
  std::vector<int> ranks(16, 0), nodes;
  for (int i = 0; i < 16; i++) nodes.push_back(i / 4);
  Profile p = fake_profile(model, 32, devs, ranks, 1e9, latency, 1.1, nodes);
  if (fast_inter)
    for (CollectiveProfile* c : {&p.comm.all_gather, &p.comm.reduce_scatter}) c->inter_node = c->intra_node;
  return p;
}

TEST(Planner, HybridGroupSizesFollowNodeBoundaries) {
  EXPECT_EQ(hybrid_group_sizes(four_nodes(1e-5, false)), (std::vector<int>{1, 2, 4, 8}));
  // Nodes of 3 and 1 ranks: only single ranks lie within a node and tile the cluster.
  const GPTConfig model = tiny_model(2);
  const Profile uneven = fake_profile(model, 32, {{"gpu", 8 * MiB, 1e-4}}, {0, 0, 0, 0}, 1e9, 1e-5, 1.1, {0, 0, 0, 1});
  EXPECT_EQ(hybrid_group_sizes(uneven), (std::vector<int>{1}));
  // One node: never hybrid.
  const Profile one = fake_profile(model, 32, {{"gpu", 8 * MiB, 1e-4}}, {0, 0, 0, 0});
  EXPECT_TRUE(hybrid_group_sizes(one).empty());
  EXPECT_FALSE(plan_gpumix(one, 8).sharding.hybrid());
}

// A latency-bound link between nodes: even sharding every unit over all 16 ranks
// hierarchically (3 latencies between the nodes' leaders per collective instead of a flat
// ring's 15), groups of two nodes, replicated twice, are faster still; the plan says so
// and holds.
TEST(Planner, ChoosesHybridWhereTheLinkBetweenNodesIsTheBottleneck) {
  const Profile p = four_nodes(1e-4, false);
  const int64_t B = 64;
  PlannerOptions full_only;
  full_only.group_size = 0;
  const Plan full = plan_gpumix(p, B, full_only);
  const Plan chosen = plan_gpumix(p, B);
  ASSERT_TRUE(chosen.sharding.hybrid());
  EXPECT_EQ(chosen.sharding.group_size, 8);
  expect_valid(chosen, p, B);
  EXPECT_LT(chosen.predicted.step_s, 0.85 * full.predicted.step_s)
      << "hybrid " << chosen.predicted.step_s << " s vs full " << full.predicted.step_s << " s";
  for (const RankPlan& r : chosen.ranks) EXPECT_NEAR(r.work.share, 0.125, 1e-12) << "rank " << r.rank;
  // Forced group sizes give those plans; each fits and is no faster.
  for (int g : {1, 2, 4}) {
    PlannerOptions o;
    o.group_size = g;
    const Plan h = plan_gpumix(p, B, o);
    EXPECT_EQ(h.sharding.group_size, g);
    expect_valid(h, p, B);
    EXPECT_GE(h.predicted.step_s, chosen.predicted.step_s * (1 - 1e-12)) << "g = " << g;
  }
  // Groups of a node: the collectives within a node for AG / RS, the all-reduce across the
  // 4 nodes (their whole gradient through each node's link).
  PlannerOptions o;
  o.group_size = 4;
  const Plan node = plan_gpumix(p, B, o);
  for (const RankPlan& r : node.ranks) EXPECT_NEAR(r.work.share, 0.25, 1e-12) << "rank " << r.rank;
  const CollectiveProfile& ag = p.comm.all_gather;
  const double block_bytes = (double)p.model.block_params() * 2;
  EXPECT_NEAR(node.predicted.ag_s, 3 * ag.intra_node.latency_s + 0.75 * block_bytes / ag.intra_node.bandwidth_Bps,
              1e-12);
  const double grad = (double)p.model.block_params() * 4;
  const LinkProfile& inter = p.comm.reduce_scatter.inter_node;
  EXPECT_NEAR(node.predicted.ar_s, 2 * (3 * inter.latency_s + 0.75 * grad / inter.bandwidth_Bps), 1e-12);
  // Full sharding across the nodes runs hierarchically: each collective's middle stage over
  // the 4 leaders, instead of a ring over all 16 ranks on the slow link.
  const LinkProfile& inter_ag = ag.inter_node;
  EXPECT_LT(full.predicted.ag_s, 15 * inter_ag.latency_s) << "a flat ring's 15 latencies";
  EXPECT_GT(full.predicted.ag_s, 3 * inter_ag.latency_s + 0.75 * block_bytes / inter_ag.bandwidth_Bps);
}

TEST(Planner, StaysFullWhereTheLinkBetweenNodesIsAsFast) {
  // Bandwidth-bound and no slower across nodes: the replicas' all-reduce only adds bytes.
  const Profile p = four_nodes(1e-8, true);
  const Plan chosen = plan_gpumix(p, 64);
  EXPECT_FALSE(chosen.sharding.hybrid()) << chosen.sharding.describe();
}

TEST(Planner, HybridPlanFilesRoundTripAndAreChecked) {
  const Profile p = four_nodes(1e-4, false);
  PlannerOptions by_node;
  by_node.group_size = 4;
  const Plan chosen = plan_gpumix(p, 64, by_node);
  ASSERT_TRUE(chosen.sharding.hybrid());
  const Plan back = plan_from_json(plan_to_json(chosen));
  EXPECT_EQ(back.sharding.group_size, chosen.sharding.group_size);
  EXPECT_EQ(plan_to_json(back)["sharding"]["groups"], 4);
  EXPECT_NO_THROW(validate_plan(back, p));
  // Position 1 of the second group with another share: refused, naming the ranks.
  nlohmann::json j = plan_to_json(chosen);
  j["ranks"][5]["share"] = 0.3;
  j["ranks"][6]["share"] = 0.2;
  try {
    plan_from_json(j);
    FAIL() << "a hybrid plan whose groups differ was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5's share 0.3 differs from rank 1's 0.25"), std::string::npos)
        << e.what();
  }
  EXPECT_NE(check_sharding(Sharding{5}, 16).find("divides the 16 ranks"), std::string::npos);
  EXPECT_NE(check_sharding(Sharding{16}, 16).find("at least 2 groups"), std::string::npos);
  EXPECT_EQ(check_sharding(Sharding{0}, 16), "");
}

// The collectives a step waits for outside the blocks, as ShardedEngine::forward_backward
// runs them: the embedding's gather, then the first block's (issued when the embedding's
// returns, with only the embedding's lookup to hide behind), the embedding's and the head
// unit's reduce-scatters; the head unit's gather is prefetched behind the last block's
// forward. Compute far above the collectives hides every other gather, so the step is the
// compute plus L reduce-scatters plus those.
TEST(CostModel, ExposesTheFirstBlocksGatherAndHidesTheHeadUnits) {
  const GPTConfig model = tiny_model(2);
  const Profile p = fake_profile(model, 32, {{"gpu", 8 * MiB, 1e-2}}, {0, 0, 0, 0}, 1e8, 1e-5, 1.1, {0, 0, 1, 1});
  const CostModel cost(p, {}, 8);
  std::vector<RankWork> work(4, RankWork{2, 2, 0.25, false});
  const CostModel::Step s = cost.evaluate(work);
  const RankTimes& t = s.ranks[0];
  ASSERT_GT(s.comm.ag, 0);
  ASSERT_LT(s.comm.ag, std::min(t.fwd, t.bwd)) << "every block's gather must hide behind compute";
  const double compute = model.L * (t.fwd + t.bwd) + t.head_compute + s.optimizer;
  const double exposed = model.L * s.comm.rs + s.comm.embed_ag + s.comm.ag + s.comm.embed_rs + s.comm.head_rs;
  EXPECT_NEAR(s.step, compute + exposed, 64 * std::numeric_limits<double>::epsilon() * s.step);
}

// Hybrid sharding: ShardedEngine leaves each unit's all-reduce across the groups in flight
// behind the next unit's backward. On GPUs (their comm stream moves it) it hides there
// behind what the gather left; the last block's, followed only by the embedding's
// backward, stays exposed. On CPUs (MPI's nonblocking all-reduce moves inside the wait)
// every one is charged whole, and the head unit's besides.
TEST(CostModel, AllReducesAcrossGroupsHideBehindTheNextBlocksBackwardOnGpusOnly) {
  const GPTConfig model = tiny_model(3);
  Profile p = fake_profile(model, 32, {{"gpu", 8 * MiB, 1e-2}}, {0, 0, 0, 0}, 1e8, 1e-5, 1.1, {0, 0, 1, 1});
  const std::vector<RankWork> work(4, RankWork{2, 2, 0.5, false});
  const CostModel::Step gpu = CostModel(p, {}, 8, Sharding{2}).evaluate(work);
  p.devices[0].kind = "cpu";
  const CostModel::Step cpu = CostModel(p, {}, 8, Sharding{2}).evaluate(work);
  const RankTimes& t = gpu.ranks[0];
  ASSERT_GT(gpu.comm.ar, gpu.comm.head_ar);
  ASSERT_LT(gpu.comm.ag + gpu.comm.ar, t.bwd) << "the gather and the all-reduce must hide behind a block's backward";
  const double compute = model.L * (t.fwd + t.bwd) + t.head_compute + gpu.optimizer;
  const double outside = gpu.comm.embed_ag + gpu.comm.ag + gpu.comm.embed_rs + gpu.comm.embed_ar + gpu.comm.head_rs;
  const double tol = 64 * std::numeric_limits<double>::epsilon() * cpu.step;
  EXPECT_NEAR(gpu.step, compute + model.L * gpu.comm.rs + outside + gpu.comm.ar, tol);
  EXPECT_NEAR(cpu.step, compute + model.L * (cpu.comm.rs + cpu.comm.ar) + outside + cpu.comm.head_ar, tol);
}

}  // namespace
}  // namespace gpumix::dist
