// Local-update training (--sync local:H, dist/engine/outer_step.h) on the local backend
// (ranks as threads), on the tiny GPT of engine_test_util.h:
// - one group is every-step training, bitwise (the same losses, the same validation);
// - groups default to the nodes (LocalOptions::node_of_rank): as --groups 2 on nodes {0, 0, 1, 1};
// - the outer step maps the groups' layouts through the flat vector: two groups whose state
//   shards differ train as two groups with equal layouts do, up to the sharded engine's
//   rounding (kLossRtol, as every layout comparison of test_engine.cpp);
// - H = 1 with plain averaging (outer lr 1, momentum 0): the first step's loss is the
//   synchronous run's up to rounding; later steps are not, and cannot be: the groups'
//   AdamW steps are averaged, not the gradients (AdamW is not linear in the gradient), so
//   the test checks that every group holds the same weights after each outer step (the
//   validation, split over every rank, is then one model's) and that it trains;
// - the outer step's arithmetic, exactly: three ranks in two groups of different layouts,
//   numbers exact in bf16 but one (rounded to nearest even, as it is sent), two outer steps
//   (the momentum's turn);
// - the sliced exchange (every group the same layout) gives the flat one's bits, with the
//   bytes per rank counted against the flat leader's for G = 2, 3, 4, 8;
// - between outer steps no collective crosses a group (each step line's count); --init-from's
//   weights are the first outer step's start;
// - checkpoints (dist/engine/checkpoint.h), taken right after an outer step, hold every
//   group's moments and the outer momentum: a resume on the same groups continues bitwise,
//   on other ranks with the same groups within the layouts' rounding; SIGTERM mid-period
//   stops at the next outer step and saves what --stop-at there saves; a --stop-at at any
//   step (mid-period: every group's weights and the outer copy) and its resume are the run
//   that went on, bit for bit; another number of
//   groups (a node lost, every-step mode) starts from the token-weighted mean of the saved
//   moments, exactly; an every-step checkpoint starts the outer state from its master
//   weights; a local checkpoint missing a file or a field is refused by name.
// - with a planner (dist/plan/planner_local.h) on emulated devices, a slower group gets fewer
//   rows; the run's plan is the planner's on the run's own profile, and the simulator's split
//   of that profile is the same; the final log line has each group's predicted and measured
//   inner step and wait;
// - every bad combination fails before the run folder exists, naming the numbers and the fix.
#include <gtest/gtest.h>
#include <omp.h>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "dist/comm/comm.h"
#include "dist/engine/checkpoint.h"
#include "dist/engine/outer_step.h"
#include "dist/engine/stop.h"
#include "dist/engine/trainer.h"
#include "dist/engine/whole_model_engine.h"
#include "dist/engine/launch.h"
#include "dist/engine/run_report.h"
#include "dist/plan/planner_local.h"
#include "dist/plan/simulator.h"
#include "nn/hf/gpt2.h"
#include "nn/run_model.h"
#include "engine_test_util.h"

namespace gpumix::dist::test {
namespace {

const std::string& data_dir() {
  static TempDir dir("local_sync_data");
  static const std::string path = (make_tiny_data(dir.path().string()), dir.path().string());
  return path;
}

// dist::train on work.size() thread ranks; rank 0's result, or the first error ("" when none).
struct Outcome {
  TrainResult result;
  std::string error;
};
Outcome run_ranks(const TrainOptions& o, const Work& work, const EngineOptions& engine,
                  const std::vector<int>& nodes = {}) {
  Outcome out;
  std::mutex mu;
  LocalOptions local;
  local.timeout_s = 60;
  local.node_of_rank = nodes;
  try {
    run_local(
        (int)work.ranks.size(),
        [&](Comm& comm) {
          omp_set_num_threads(1);
          TrainResult r = train(o, work, comm, engine);
          std::lock_guard<std::mutex> lock(mu);
          if (comm.rank() == 0) out.result = r;
        },
        local);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

EngineOptions local_sync(int every, int groups, float outer_lr = 0.7f, float momentum = 0.9f) {
  EngineOptions e;
  e.sync = parse_sync("local:" + std::to_string(every));
  e.sync.groups = groups;
  e.sync.outer_lr = outer_lr;
  e.sync.outer_momentum = momentum;
  return e;
}

class LocalSyncTest : public ::testing::Test {
 protected:
  void SetUp() override { data_dir(); }
  TempDir tmp_;
  TrainOptions options(const std::string& name) const { return tiny_options(data_dir(), tmp_.file(name)); }
};

TEST_F(LocalSyncTest, OneGroupIsEveryStepTrainingBitwise) {
  const Work work = make_work({5, 3}, {3, 2}, {0.6, 0.4});
  TrainOptions every = options("every"), local = options("local");
  every.eval_interval = local.eval_interval = 0;
  const Outcome a = run_ranks(every, work, {});
  const Outcome b = run_ranks(local, work, local_sync(2, 1));
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  const std::vector<LogStep> la = read_log(every.out), lb = read_log(local.out);
  ASSERT_EQ(la.size(), (size_t)every.steps);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i].loss, lb[i].loss) << "step " << la[i].step;
    EXPECT_EQ(la[i].norm, lb[i].norm) << "step " << la[i].step;
  }
  EXPECT_EQ(a.result.val_loss, b.result.val_loss);
}

TEST_F(LocalSyncTest, GroupsWithDifferentLayoutsReduceAsEqualOnes) {
  // Groups of 2: {0, 1} and {2, 3}, each with half the batch; the same rows either way.
  TrainOptions uneven = options("uneven"), even = options("even");
  uneven.eval_interval = even.eval_interval = 0;
  const Outcome a = run_ranks(uneven, make_work({3, 1, 2, 2}, {3, 1, 2, 2}, {0.15, 0.35, 0.4, 0.1}), local_sync(2, 2));
  const Outcome b = run_ranks(even, make_work({3, 1, 2, 2}, {3, 1, 2, 2}, {0.25, 0.25, 0.25, 0.25}), local_sync(2, 2));
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  const Mismatch m = compare(losses_of(read_log(uneven.out)), losses_of(read_log(even.out)), kLossRtol, 0);
  EXPECT_LE(m.excess, 1) << describe(m, "losses");
  EXPECT_NEAR(a.result.val_loss, b.result.val_loss, kLossRtol * std::fabs(b.result.val_loss));
}

TEST_F(LocalSyncTest, GroupsDefaultToNodes) {
  // Nodes {0, 0, 1, 1} (the local backend's simulated nodes): the same groups as --groups 2,
  // so the same training, bit for bit.
  TrainOptions by_node = options("by_node"), given = options("given");
  by_node.eval_interval = given.eval_interval = 0;
  const Work work = make_work({2, 2, 2, 2}, {2, 2, 2, 2}, {0.25, 0.25, 0.25, 0.25});
  const Outcome a = run_ranks(by_node, work, local_sync(2, 0), {0, 0, 1, 1});
  const Outcome b = run_ranks(given, work, local_sync(2, 2));
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  const std::vector<LogStep> la = read_log(by_node.out), lb = read_log(given.out);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i].loss, lb[i].loss) << "step " << la[i].step;
  // sync_groups: the nodes as they are; --groups N: blocks of consecutive ranks.
  const std::vector<int> nodes = sync_groups(local_sync(2, 0).sync, {0, 1, 0, 1});
  EXPECT_EQ(nodes, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(sync_groups(local_sync(2, 2).sync, {0, 0, 0, 0}), (std::vector<int>{0, 0, 1, 1}));
}

TEST_F(LocalSyncTest, PlainAveragingEveryStepStartsAsSynchronousAndTrains) {
  TrainOptions sync = options("sync"), local = options("local");
  sync.steps = local.steps = 8;
  sync.eval_interval = local.eval_interval = 0;
  const Work work = make_work({4, 4}, {4, 4}, {0.5, 0.5});
  const Outcome a = run_ranks(sync, work, {});
  const Outcome b = run_ranks(local, work, local_sync(1, 2, 1.0f, 0.0f));
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  const std::vector<LogStep> la = read_log(sync.out), lb = read_log(local.out);
  ASSERT_EQ(lb.size(), (size_t)local.steps);
  // Step 1: the same weights; the group means weighted by their tokens are the batch mean.
  EXPECT_NEAR(lb[0].loss, la[0].loss, kLossRtol * la[0].loss);
  EXPECT_LT(lb.back().loss, lb[0].loss);
  // The validation at the end (after the last outer step) is one model's: every rank
  // evaluates its windows on its group's weights, equal in every group up to nothing.
  EXPECT_TRUE(std::isfinite(b.result.val_loss));
  EXPECT_LT(b.result.val_loss, std::log((double)kTinyVocab));
}

// Ranks 2 and 3 four times slower (emulated: each kernel followed by a sleep of 3 times its
// own time), in groups {0, 1} and {2, 3}: the planner gives the slow group fewer rows so that
// both reach the outer step together.
TEST_F(LocalSyncTest, PlannerGivesASlowerGroupFewerRows) {
  TrainOptions o = options("planned");
  o.steps = 4;
  EngineOptions engine = local_sync(2, 2);
  engine.planner = "auto";
  engine.profiler.cache_dir = "-";  // this run's devices, measured
  engine.profiler.show_progress = false;
  engine.profiler.repeats = 1;
  ASSERT_NO_THROW(train_local(o, 4, parse_devices("cpu,cpu,cpu:slow=4,cpu:slow=4"), {}, engine, 1));
  const Plan ran = read_plan(o.out + "/plan.json");
  const Profile profile = read_profile(o.out + "/profile.json");
  const Work work = ran.work();
  ASSERT_EQ(work.ranks.size(), 4u);
  const int64_t fast = work.ranks[0].batch + work.ranks[1].batch, slow = work.ranks[2].batch + work.ranks[3].batch;
  EXPECT_EQ(fast + slow, o.batch);
  EXPECT_LT(slow, fast) << "plan " << work_text(work);
  EXPECT_GT(slow, 0) << "plan " << work_text(work);
  // The same planner on the run's profile makes the plan the run ran, and the simulator
  // (`gpumix simulate --sync local:2 --groups 2`) splits the rows alike.
  const LocalPlan again = plan_local(profile, o.batch, engine.sync);
  ASSERT_TRUE(again.planned()) << again.error;
  EXPECT_EQ(work_text(local_combined_plan(again, profile).work()), work_text(work));
  const LocalSimulation sim = simulate_local(profile, o.batch, engine.sync);
  ASSERT_TRUE(sim.planned()) << sim.error;
  EXPECT_EQ(sim.groups[0].batch, fast);
  EXPECT_EQ(sim.groups[1].batch, slow);
  // The final line: per group its rows, inner step and wait, predicted and measured.
  const nlohmann::json last = read_log_lines(o.out).back();
  ASSERT_TRUE(last.contains("final") && last.contains("groups") && last.contains("local")) << last.dump();
  EXPECT_EQ(last["local"]["outer_steps"], 2);  // steps 2 and 4
  EXPECT_GT(last["local"]["period_ms"]["predicted"].get<double>(), 0);
  ASSERT_EQ(last["groups"].size(), 2u);
  for (int g = 0; g < 2; ++g) {
    const nlohmann::json& j = last["groups"][g];
    EXPECT_EQ(j["ranks"], (std::vector<int>{2 * g, 2 * g + 1}));
    EXPECT_EQ(j["rows"], g == 0 ? fast : slow);
    EXPECT_DOUBLE_EQ(j["inner_ms"]["predicted"].get<double>(), 1e3 * again.groups[g].inner_s);
    EXPECT_GT(j["inner_ms"]["measured"].get<double>(), 0);
    for (const char* what : {"predicted", "measured"}) {
      EXPECT_GE(j["wait_pct"][what].get<double>(), 0) << what;
      EXPECT_LT(j["wait_pct"][what].get<double>(), 100) << what;
    }
  }
}

// An engine that is only a slice of master weights: [offset, offset + values.size()).
class SliceEngine final : public Engine {
 public:
  SliceEngine(int64_t offset, const std::vector<float>& values)
      : offset_(offset), master_(Tensor::from_vector(values, {(int64_t)values.size()})) {}
  std::vector<Tensor> forward_backward(const Tensor&, const Tensor&, int64_t, float) override { return {}; }
  std::vector<Tensor> loss_sums(const Tensor&, const Tensor&, int64_t) override { return {}; }
  std::vector<Tensor> unit_grads() override { return {}; }
  void scale_grads(float) override {}
  void optimizer_step(float, int) override {}
  std::vector<OwnedSlice> slices() override { return {{offset_, master_, nullptr}}; }
  void sync_compute_params() override {}
  void reshard(const ShardLayout&) override {}
  float* data() { return master_.data<float>(); }

 private:
  int64_t offset_;
  Tensor master_;
};

TEST(OuterStep, ExactOnTwoGroupsOfDifferentLayouts) {
  // Group 0: ranks 0 (element 0) and 1 (elements 1-3), 3/4 of the tokens; group 1: rank 2
  // (all 4), 1/4. Outer lr 0.5, momentum 0.5, Nesterov: outer -= 0.5 (d + 0.5 m).
  const std::vector<float> x0 = {1, 2, 3, 4};
  const std::vector<std::vector<float>> delta = {{0.5f, 1, -2, 0.25f}, {1 + 0x1p-9f, -1, 2, 4}};
  // 0.25 (1 + 2^-9) is 0.25 in bf16 (7 fraction bits, to nearest even): d[0] = 0.375 + 0.25.
  const std::vector<float> d = {0.625f, 0.5f, -1, 1.1875f};
  LocalSync sync = parse_sync("local:1");
  sync.outer_lr = 0.5f;
  sync.outer_momentum = 0.5f;
  std::vector<std::vector<float>> after(3);
  LocalOptions local;
  local.timeout_s = 30;
  run_local(3, [&](Comm& comm) {
    const int r = comm.rank(), group = r < 2 ? 0 : 1;
    const int64_t begin = r == 1 ? 1 : 0, end = r == 0 ? 1 : 4;
    std::vector<float> mine(x0.begin() + begin, x0.begin() + end);
    SliceEngine engine(begin, mine);
    std::unique_ptr<Comm> group_comm = comm.split(group);
    OuterStep outer(sync, comm, *group_comm, group, group == 0 ? 0.75 : 0.25, 4, engine, Device::cpu());
    for (int step = 0; step < 2; ++step) {  // each group moves by its delta from the outer copy
      for (int64_t j = begin; j < end; ++j) engine.data()[j - begin] -= delta[group][j];
      outer.step(engine);
    }
    after[r].assign(engine.data(), engine.data() + (end - begin));
  }, local);
  // Step 1: m = d, outer = x0 - 0.75 d; step 2: m = 1.5 d, outer -= 0.875 d: x0 - 1.625 d.
  // Step 2's delta of element 0 in group 1 is computed from the new outer copy: 0.25 (1 + 2^-9)
  // again (exact in fp32 here), so the same d.
  for (int r = 0; r < 3; ++r) {
    const int64_t begin = r == 1 ? 1 : 0;
    for (size_t j = 0; j < after[r].size(); ++j)
      EXPECT_EQ(after[r][j], x0[begin + j] - 1.625f * d[begin + j]) << "rank " << r << " element " << begin + j;
  }
}

// G groups of 2 ranks, every group the same uneven layout (position 0: the first 300 of
// 1000 elements, position 1: the rest), two outer steps with momentum and deltas of many
// magnitudes (bf16 rounding and the fp32 sum's order both matter): the sliced exchange
// gives the flat one's bits, on G = 2, 3 (a peer idle in each round), 4 and 8. Bytes per
// outer step across groups, as the communicators count them: the flat exchange's leader
// sends 2P (G - 1); the sliced one's ranks each 2 x 2m (G - 1) / G (m: its elements), at
// G = 8 under a quarter of the leader's. The table is printed for the record.
TEST(OuterStep, SlicedExchangeGivesTheFlatOnesBitsWithFewerBytes) {
  constexpr int64_t P = 1000, cut = 300;
  LocalSync sync = parse_sync("local:1");
  sync.outer_lr = 0.7f;
  sync.outer_momentum = 0.9f;
  auto delta = [](int group, int64_t j) {
    return (float)(std::sin(0.1 * (double)j + group) * std::pow(10.0, (double)(j % 7) - 3.0) * (1 + group % 3));
  };
  std::printf("outer exchange bytes per outer step across groups (P = %lld, groups of 2 ranks)\n", (long long)P);
  std::printf("  G   flat: leader   sliced: rank 0   sliced: largest rank   sliced / flat\n");
  for (int G : {2, 3, 4, 8}) {
    SCOPED_TRACE(G);
    std::vector<std::vector<float>> after[2];
    int64_t flat_leader = 0, sliced_max = 0, sliced_rank0 = 0, wrong_bytes = 0;
    for (bool flat : {true, false}) {
      std::vector<std::vector<float>>& out = after[flat ? 0 : 1];
      out.assign(2 * G, {});
      std::vector<int64_t> bytes(2 * G), expected(2 * G);
      std::vector<int> sliced(2 * G);
      LocalOptions local;
      local.timeout_s = 30;
      run_local(2 * G, [&](Comm& comm) {
        const int r = comm.rank(), group = r / 2, position = r % 2;
        const int64_t begin = position == 0 ? 0 : cut, end = position == 0 ? cut : P;
        std::vector<float> mine;
        for (int64_t j = begin; j < end; ++j) mine.push_back(0.01f * (float)(j % 13) - 0.05f);
        SliceEngine engine(begin, mine);
        std::unique_ptr<Comm> group_comm = comm.split(group);
        OuterStep outer(sync, comm, *group_comm, group, 1.0 / G, P, engine, Device::cpu(), flat);
        for (int step = 0; step < 2; ++step) {
          for (int64_t j = begin; j < end; ++j) engine.data()[j - begin] -= delta(group + step, j);
          outer.step(engine);
        }
        out[r].assign(engine.data(), engine.data() + (end - begin));
        bytes[r] = outer.cross_group_bytes() / 2;  // per outer step
        sliced[r] = outer.sliced();
        // Sliced: its chunk's G - 1 partners' chunks out in bf16, then its own chunk's sums to each peer.
        const int64_t m = end - begin;
        int64_t e = 0;
        for (int j = 0; j < G; ++j) {
          const int64_t c = m * (j + 1) / G - m * j / G;
          e += j == group ? 2 * c * (G - 1) : 2 * c;
        }
        expected[r] = e;
      }, local);
      for (int r = 0; r < 2 * G; ++r) EXPECT_EQ(sliced[r], !flat) << "rank " << r;
      if (flat) {
        flat_leader = bytes[0];
        EXPECT_EQ(flat_leader, 2 * P * (G - 1));
        EXPECT_EQ(bytes[1], 0);  // not a leader
      } else {
        sliced_rank0 = bytes[0];
        for (int r = 0; r < 2 * G; ++r) {
          sliced_max = std::max(sliced_max, bytes[r]);
          wrong_bytes += bytes[r] != expected[r];
        }
      }
    }
    EXPECT_EQ(wrong_bytes, 0);
    for (int r = 0; r < 2 * G; ++r) {
      ASSERT_EQ(after[0][r].size(), after[1][r].size());
      EXPECT_EQ(std::memcmp(after[0][r].data(), after[1][r].data(), after[0][r].size() * sizeof(float)), 0)
          << "rank " << r << ": the sliced exchange's weights differ from the flat one's";
    }
    if (G == 8) {
      EXPECT_LE(4 * sliced_max, flat_leader);
    }
    std::printf("  %d   %12lld   %14lld   %20lld   %13.3f\n", G, (long long)flat_leader, (long long)sliced_rank0,
                (long long)sliced_max, (double)sliced_max / (double)flat_leader);
  }
}

TEST_F(LocalSyncTest, BadCombinationsFailBeforeTheRunFolder) {
  struct Case {
    const char* name;
    Work work;
    EngineOptions engine;
    std::function<void(TrainOptions&)> tweak;
    std::vector<const char*> says;
  };
  EngineOptions h0 = local_sync(1, 2);
  h0.sync.every = 0;
  EngineOptions planned_hybrid = local_sync(2, 2);  // the planner, told to shard in pairs
  planned_hybrid.planner = "gpumix";
  planned_hybrid.sharding = 2;
  const std::vector<Case> cases = {
      {"h0", make_work({4, 4}, {4, 4}, {0.5, 0.5}), h0, {},
       {"H (inner steps between outer steps) must be at least 1", "local:50"}},
      {"one_rank", make_work({8}, {8}, {1.0}), local_sync(2, 0), {}, {"needs several ranks", "this run has 1"}},
      {"groups", make_work({3, 3, 2}, {3, 3, 2}, {0.3, 0.3, 0.4}), local_sync(2, 2), {},
       {"--groups 2 does not divide the 3 ranks", "a divisor of 3"}},
      {"no_tokens", make_work({8, 0}, {8, 1}, {0.5, 0.5}), local_sync(2, 2), {},
       {"group 1 (ranks 1) has no rows of the batch", "--batches"}},
      {"ckpt", make_work({4, 4}, {4, 4}, {0.5, 0.5}), local_sync(4, 2), [](TrainOptions& o) { o.ckpt_interval = 6; },
       {"--ckpt-interval 6 is not a multiple of H = 4", "right after an outer step", "--ckpt-interval 4"}},
      {"eval", make_work({4, 4}, {4, 4}, {0.5, 0.5}), local_sync(4, 2), [](TrainOptions& o) { o.eval_interval = 6; },
       {"--eval-interval 6 is not a multiple of H = 4", "--eval-interval 4"}},
      {"hybrid", make_work({2, 2, 2, 2}, {2, 2, 2, 2}, {0.25, 0.25, 0.25, 0.25}), planned_hybrid, {},
       {"--sharding 2 with --sync local:2", "drop --sharding"}},
  };
  for (const Case& c : cases) {
    TrainOptions o = options(c.name);
    if (c.tweak) c.tweak(o);
    const Outcome r = run_ranks(o, c.work, c.engine);
    EXPECT_NE(r.error, "") << c.name;
    for (const char* s : c.says) EXPECT_NE(r.error.find(s), std::string::npos) << c.name << ": " << r.error;
    EXPECT_FALSE(fs::exists(o.out)) << c.name << ": the run folder was made";
  }
  EXPECT_THROW(parse_sync("local:x"), InputError);
  EXPECT_THROW(parse_sync("sometimes"), InputError);
}

// ---- checkpoints and resume -------------------------------------------------------------

// Four ranks in two groups of different layouts and token weights: {0, 1} with 5 of the 8
// rows, {2, 3} with 3.
Work four_ranks() { return make_work({3, 2, 2, 1}, {3, 2, 2, 1}, {0.3, 0.2, 0.25, 0.25}); }

// The resumes' reference: 8 steps (2 of warm-up), an outer step every 2, a checkpoint every 4.
TrainOptions straight_options(TrainOptions o) {
  o.steps = 8;
  o.warmup = 2;
  o.ckpt_interval = 4;
  return o;
}

std::vector<std::string> sorted_arrays(const std::string& ckpt) {
  std::vector<std::string> names = CheckpointReader(ckpt).array_names();
  std::sort(names.begin(), names.end());
  return names;
}

// Every array of two checkpoints, bit for bit.
void expect_same_arrays(const std::string& a, const std::string& b) {
  ASSERT_EQ(sorted_arrays(a), sorted_arrays(b));
  for (const std::string& name : sorted_arrays(a)) {
    const std::vector<float> x = read_array(a, name), y = read_array(b, name);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << name << " differs";
  }
}

// The log of `resumed` (steps from + 1 on) against the same steps of `straight`, bit for bit.
void expect_continues_bitwise(const std::string& resumed, const std::string& straight, int from) {
  const std::vector<LogStep> a = read_log(resumed), b = read_log(straight);
  ASSERT_EQ(a.size() + from, b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i + from].step);
    EXPECT_EQ(a[i].loss, b[i + from].loss) << "step " << a[i].step;
    EXPECT_EQ(a[i].norm, b[i + from].norm) << "step " << a[i].step;
  }
}

// The batch's loss of each step of a run's log: a step line's "loss", but between local
// mode's outer steps (where it is the group's), which the next outer step's line gives in
// "period_losses".
std::map<int, double> batch_losses(const std::string& out) {
  std::map<int, double> loss;
  for (const nlohmann::json& j : read_log_lines(out)) {
    if (j.contains("final")) continue;
    const int step = j.at("step").get<int>();
    if (j.contains("period_losses")) {
      const std::vector<double> period = j["period_losses"].get<std::vector<double>>();
      for (size_t i = 0; i < period.size(); ++i) loss[step - (int)period.size() + 1 + (int)i] = period[i];
    } else if (!j.contains("group")) {
      loss[step] = j.at("loss").get<double>();
    }
  }
  return loss;
}

// A resume's first step computes its loss on the checkpoint's weights, whatever it does with
// the moments: the straight run's loss of that step up to the layouts' rounding. Then it
// keeps training: every later loss finite and below the straight run's first.
void expect_resumes_from_the_weights(const std::string& resumed, const std::string& straight, int from) {
  const std::vector<LogStep> a = read_log(resumed), b = read_log(straight);
  ASSERT_EQ(a.size() + from, b.size());
  const std::map<int, double> la = batch_losses(resumed), lb = batch_losses(straight);
  ASSERT_TRUE(la.count(from + 1) && lb.count(from + 1));
  EXPECT_NEAR(la.at(from + 1), lb.at(from + 1), kLossRtol * lb.at(from + 1)) << "step " << from + 1;
  for (const LogStep& s : a) {
    EXPECT_TRUE(std::isfinite(s.loss)) << "step " << s.step;
    EXPECT_LT(s.loss, b[0].loss) << "step " << s.step;
  }
}

TEST_F(LocalSyncTest, CheckpointsHoldEveryGroupAndResumeBitwise) {
  const TrainOptions o = straight_options(options("straight"));
  const Outcome straight = run_ranks(o, four_ranks(), local_sync(2, 2));
  ASSERT_EQ(straight.error, "");
  const std::string ckpt4 = o.out + "/ckpt-000004";
  EXPECT_EQ(sorted_arrays(ckpt4), (std::vector<std::string>{"adam_m", "adam_m.g1", "adam_v", "adam_v.g1", "master",
                                                            "outer_momentum"}));
  const SavedGroups saved = saved_groups(CheckpointReader(ckpt4));
  EXPECT_TRUE(saved.local);
  EXPECT_EQ(saved.groups, 2);
  EXPECT_EQ(saved.weights, (std::vector<double>{0.625, 0.375}));
  EXPECT_EQ(saved.sync.every, 2);
  EXPECT_EQ(saved.outer_steps, 2);
  EXPECT_NE(read_array(ckpt4, "adam_m"), read_array(ckpt4, "adam_m.g1"));  // each group's own

  // The same groups and ranks: steps 5-8 and every array as if never stopped.
  TrainOptions r = o;
  r.out = tmp_.file("resumed");
  r.resume = ckpt4;
  const Outcome resumed = run_ranks(r, four_ranks(), local_sync(2, 2));
  ASSERT_EQ(resumed.error, "");
  expect_continues_bitwise(r.out, o.out, 4);
  expect_same_arrays(resumed.result.checkpoint, straight.result.checkpoint);
  EXPECT_EQ(saved_groups(CheckpointReader(resumed.result.checkpoint)).outer_steps, 4);

  // The same groups on two ranks, one each (whole-model engines), with the same rows: the
  // same training up to the layouts' rounding, as GroupsWithDifferentLayoutsReduceAsEqualOnes.
  r.out = tmp_.file("two_ranks");
  ASSERT_EQ(run_ranks(r, make_work({5, 3}, {5, 3}, {0.5, 0.5}), local_sync(2, 2)).error, "");
  const std::vector<double> straight_losses = losses_of(read_log(o.out));
  const Mismatch m = compare(losses_of(read_log(r.out)),
                             std::vector<double>(straight_losses.begin() + 4, straight_losses.end()), kLossRtol, 0);
  EXPECT_LE(m.excess, 1) << describe(m, "losses");
}

TEST_F(LocalSyncTest, SigtermStopsAtTheNextOuterStepAndSaves) {
  // A stop asked before the run: the groups learn of each other's request where they meet,
  // at the outer step of step 2 (H = 2), and every rank stops there. Its checkpoint is what
  // --stop-at 2 saves.
  TrainOptions stop = options("sigterm"), at = options("stop_at");
  stop.steps = at.steps = 6;
  at.stop_at = 2;
  request_stop(SIGTERM);
  const Outcome stopped = run_ranks(stop, four_ranks(), local_sync(2, 2));
  clear_stop_request();
  ASSERT_EQ(stopped.error, "");
  EXPECT_EQ(stopped.result.stop_signal, SIGTERM);
  EXPECT_EQ(stopped.result.step, 2);
  const Outcome ended = run_ranks(at, four_ranks(), local_sync(2, 2));
  ASSERT_EQ(ended.error, "");
  expect_same_arrays(stopped.result.checkpoint, ended.result.checkpoint);
  EXPECT_EQ(saved_groups(CheckpointReader(stopped.result.checkpoint)).outer_steps, 1);
  stop.resume = stop.out;
  const Outcome rest = run_ranks(stop, four_ranks(), local_sync(2, 2));
  ASSERT_EQ(rest.error, "");
  EXPECT_EQ(rest.result.step, 6);
  EXPECT_EQ(rest.result.stop_signal, 0);
}

// Exact preemption: a run stopped at any step (--stop-at; mid-period no outer step runs
// early, the checkpoint holds every group's weights, the outer copy and the period's start)
// and resumed equals the run that went on, bit for bit: every step's loss and norm, every
// array of the last checkpoint. H = 3 on 6 steps: stops at 1, 2 (mid-period), 3 (an outer
// step), 4 and 5. A mid-period checkpoint resumed on other groups is refused by name.
TEST_F(LocalSyncTest, StoppedAndResumedAtAnyStepIsTheRunThatWentOn) {
  TrainOptions straight = options("straight");
  straight.steps = 6;
  const Outcome whole = run_ranks(straight, four_ranks(), local_sync(3, 2));
  ASSERT_EQ(whole.error, "");
  for (int k = 1; k <= 5; ++k) {
    SCOPED_TRACE(k);
    TrainOptions o = straight;
    o.out = tmp_.file(str("stopped", k));
    o.stop_at = k;
    const Outcome stopped = run_ranks(o, four_ranks(), local_sync(3, 2));
    ASSERT_EQ(stopped.error, "");
    EXPECT_EQ(stopped.result.step, k);
    const SavedGroups saved = saved_groups(CheckpointReader(stopped.result.checkpoint));
    EXPECT_EQ(saved.mid_period(), k % 3 != 0);
    EXPECT_EQ(saved.outer_steps, k / 3);
    if (saved.mid_period()) {
      EXPECT_EQ(saved.period_start, k / 3 * 3);
      EXPECT_NE(read_array(stopped.result.checkpoint, "master"), read_array(stopped.result.checkpoint, "master.g1"));
    }
    o.stop_at = 0;
    o.resume = o.out;
    const Outcome rest = run_ranks(o, four_ranks(), local_sync(3, 2));
    ASSERT_EQ(rest.error, "");
    EXPECT_EQ(rest.result.step, 6);
    expect_continues_bitwise(o.out, straight.out, 0);
    expect_same_arrays(rest.result.checkpoint, whole.result.checkpoint);
    EXPECT_EQ(rest.result.val_loss, whole.result.val_loss);
    if (k == 2) {  // on one group (every-step mode) instead: refused, naming the groups
      TrainOptions other = o;
      other.out = tmp_.file("other_groups");
      other.resume = stopped.result.checkpoint;
      const Outcome refused = run_ranks(other, four_ranks(), {});
      EXPECT_NE(refused.error.find("taken mid-period (step 2, the last outer step at 0) by 2 groups"),
                std::string::npos) << refused.error;
      EXPECT_NE(refused.error.find("resume it on 2 groups"), std::string::npos) << refused.error;
    }
  }
}

TEST_F(LocalSyncTest, NoCollectiveCrossesAGroupBetweenOuterSteps) {
  // H = 3 on 7 steps: outer steps at 3, 6 and 7 (the last), validation and a checkpoint at
  // 6. Each line counts what its step ran on the whole run's communicator and in the
  // exchange: nothing on an inner step; the exchange and the meeting (plus validation at 6)
  // on an outer one. The checkpoint at 6 follows its line (written first, so that a fault
  // while saving leaves it).
  TrainOptions o = options("counted");
  o.steps = 7;
  o.eval_interval = o.ckpt_interval = 6;
  ASSERT_EQ(run_ranks(o, four_ranks(), local_sync(3, 2)).error, "");
  int lines = 0;
  for (const nlohmann::json& j : read_log_lines(o.out)) {
    if (j.contains("final")) continue;
    const int step = j.at("step").get<int>();
    ++lines;
    ASSERT_TRUE(j.contains("cross_group_collectives")) << j.dump();
    const int64_t n = j["cross_group_collectives"].get<int64_t>();
    const bool outer = step % 3 == 0 || step == 7;
    if (outer) {
      EXPECT_GE(n, 3) << "step " << step;  // the exchange's all-gather, the meeting's, the stop request
      EXPECT_TRUE(j.contains("period_losses") && j.contains("group_loss")) << j.dump();
      EXPECT_EQ(j["period_losses"].size(), step == 7 ? 1u : 3u);
      ASSERT_EQ(j["period_busy_ms"].size(), j["period_losses"].size());  // per step of the period: per rank
      EXPECT_EQ(j["period_busy_ms"][0].size(), 4u);
    } else {
      EXPECT_EQ(n, 0) << "step " << step;
      EXPECT_EQ(j["group"], 0);
      EXPECT_FALSE(j.contains("period_losses"));
    }
  }
  EXPECT_EQ(lines, 7);
  // Validation at step 6 crosses the groups too: more there than at 3.
  const std::vector<nlohmann::json> log = read_log_lines(o.out);
  EXPECT_GT(log[5]["cross_group_collectives"].get<int64_t>(), log[2]["cross_group_collectives"].get<int64_t>());
  // Every-step lines carry no count: there is one group.
  TrainOptions every = options("every");
  every.steps = 2;
  ASSERT_EQ(run_ranks(every, four_ranks(), {}).error, "");
  for (const nlohmann::json& j : read_log_lines(every.out)) EXPECT_FALSE(j.contains("cross_group_collectives"));
}

// --init-from writes the master weights after the engine (and the outer step) is built: the
// outer copy must follow them. With momentum 0 an outer step with lr eta moves the outer
// copy x0 to x0 - eta d (d: the weighted pseudo-gradient, the same in runs alike up to it),
// so two runs with lr 1 and 0.5 give x0 = 2 x(0.5) - x(1): the loaded weights, within fp32
// rounding (the random initialisation, before the fix: a 14 % relative difference).
TEST_F(LocalSyncTest, InitFromIsTheFirstOuterStepsStart) {
  const TrainOptions tiny = options("config");
  const GPTConfig config = resolve_model(tiny, kTinyVocab, tiny.seq);
  std::vector<float> loaded((size_t)config.total_params());
  for (size_t i = 0; i < loaded.size(); ++i) loaded[i] = 0.02f * std::sin(0.37f * (float)i) + 0.01f;
  const std::string hf_dir = tmp_.file("hf");
  hf::write_model(hf_dir, config, loaded.data(), data::Tokenizer::load(data_dir() + "/tokenizer.bpe"),
                  safetensors::DType::F32);
  std::vector<std::vector<float>> after;
  for (float lr : {1.0f, 0.5f}) {
    TrainOptions o = options(str("lr", lr));
    o.tokenizer.clear();
    o.layers = o.heads = o.channels = 0;
    o.init_from = hf_dir;
    o.steps = 2;
    const Outcome out = run_ranks(o, four_ranks(), local_sync(2, 2, lr, 0.0f));
    ASSERT_EQ(out.error, "");
    after.push_back(read_array(out.result.checkpoint));
  }
  ASSERT_EQ(after[0].size(), loaded.size());
  int64_t wrong = 0;
  double worst = 0;
  for (size_t i = 0; i < loaded.size(); ++i) {
    const double start = 2.0 * after[1][i] - after[0][i];
    const double error = std::fabs(start - loaded[i]);
    worst = std::max(worst, error);
    wrong += error > 4e-7 * std::fabs(loaded[i]) + 1e-9;
  }
  EXPECT_EQ(wrong, 0) << "largest difference " << worst;
  // And the run moved: the outer step is not the loaded weights themselves.
  EXPECT_NE(std::memcmp(after[0].data(), loaded.data(), loaded.size() * sizeof(float)), 0);
}

TEST_F(LocalSyncTest, OtherNumbersOfGroupsStartFromTheMeanOfTheMoments) {
  const TrainOptions o = straight_options(options("straight"));
  ASSERT_EQ(run_ranks(o, four_ranks(), local_sync(2, 2)).error, "");
  const std::string ckpt4 = o.out + "/ckpt-000004";

  // The rule, exactly: one rank of one group reads master.bin and (5/8 m_0 + 3/8 m_1) / 1 in
  // double, rounded once (checkpoint.h).
  const GPTConfig config = config_from_json(CheckpointReader(ckpt4).model(), ckpt4);
  run_local(1, [&](Comm& comm) {
    AdamWConfig adam;
    adam.weight_decay = o.weight_decay;
    WholeModelEngine engine(config, Device::cpu(), DType::f32, o.seed, adam, false);
    EXPECT_EQ(load_checkpoint(ckpt4, config, engine, comm, 0), 4);
    const OwnedSlice slice = engine.slices()[0];
    const std::vector<ParamInfo> layout = gpt_param_layout(config);
    for (const char* name : {"master", "adam_m", "adam_v"}) {
      const bool moment = name[0] == 'a';
      const std::vector<float> g0 = read_array(ckpt4, name);
      const std::vector<float> g1 = moment ? read_array(ckpt4, std::string(name) + ".g1") : g0;
      const Tensor& got = !moment ? slice.master : name[5] == 'm' ? slice.opt->m() : slice.opt->v();
      const float* x = got.data<float>();
      int64_t wrong = 0;
      for (const SavedRun& run : gpt_saved_runs(layout, 0, got.numel()))
        for (int64_t j = 0; j < run.count; ++j) {
          const int64_t k = run.saved + j;
          const float want = moment ? (float)((0.625 * (double)g0[k] + 0.375 * (double)g1[k]) / 1.0) : g0[k];
          wrong += x[run.flat + j] != want;
        }
      EXPECT_EQ(wrong, 0) << name;
    }
  });

  // Three groups with another H (allowed, said); the node of a 2-node run lost (2 ranks on
  // one node: one group, every-step training); every-step mode on 3 ranks. Each starts on
  // the checkpoint's weights and trains on.
  struct Resume {
    const char* name;
    Work work;
    EngineOptions engine;
    std::vector<int> nodes;
    int groups_saved;  // in the final checkpoint (1: an every-step one)
  };
  const Resume resumes[] = {
      {"three_groups", make_work({3, 3, 2}, {3, 3, 2}, {0.4, 0.3, 0.3}), local_sync(4, 3), {}, 3},
      {"node_lost", make_work({4, 4}, {4, 4}, {0.5, 0.5}), local_sync(2, 0), {0, 0}, 1},
      {"every_step", make_work({3, 3, 2}, {3, 3, 2}, {0.4, 0.3, 0.3}), {}, {}, 1},
  };
  for (const Resume& c : resumes) {
    SCOPED_TRACE(c.name);
    TrainOptions r = o;
    r.out = tmp_.file(c.name);
    r.resume = ckpt4;
    const Outcome out = run_ranks(r, c.work, c.engine, c.nodes);
    ASSERT_EQ(out.error, "");
    expect_resumes_from_the_weights(r.out, o.out, 4);
    const SavedGroups saved = saved_groups(CheckpointReader(out.result.checkpoint));
    EXPECT_EQ(saved.groups, c.groups_saved);
    if (c.groups_saved > 1) {
      EXPECT_EQ(saved.outer_steps, 3);  // 2 saved, 1 at step 8 (H = 4)
    }
  }
}

TEST_F(LocalSyncTest, AnEveryStepCheckpointStartsTheOuterStateFromItsWeights) {
  const TrainOptions o = straight_options(options("every_step"));
  ASSERT_EQ(run_ranks(o, four_ranks(), {}).error, "");
  TrainOptions r = o;
  r.out = tmp_.file("local");
  r.resume = o.out + "/ckpt-000004";
  const Outcome local = run_ranks(r, four_ranks(), local_sync(2, 2));
  ASSERT_EQ(local.error, "");
  expect_resumes_from_the_weights(r.out, o.out, 4);
  const SavedGroups saved = saved_groups(CheckpointReader(local.result.checkpoint));
  EXPECT_EQ(saved.groups, 2);
  EXPECT_EQ(saved.outer_steps, 2);  // steps 6 and 8: counted from this run's start
}

TEST_F(LocalSyncTest, BrokenLocalCheckpointsAreRefusedByName) {
  TrainOptions o = options("straight");
  o.steps = 4;
  ASSERT_EQ(run_ranks(o, four_ranks(), local_sync(2, 2)).error, "");
  const std::string ckpt = o.out + "/ckpt-000004";
  struct Case {
    const char* name;
    std::function<void(const std::string& dir, nlohmann::json& meta)> breaks;
    std::vector<const char*> says;
  };
  const std::vector<Case> cases = {
      {"no_outer_file", [](const std::string& dir, nlohmann::json&) { fs::remove(dir + "/outer_momentum.bin"); },
       {"outer_momentum.bin is missing"}},
      {"unlisted_group", [](const std::string&, nlohmann::json& meta) {
         nlohmann::json kept = nlohmann::json::array();
         for (const nlohmann::json& a : meta["arrays"])
           if (a["name"] != "adam_v.g1") kept.push_back(a);
         meta["arrays"] = kept;
       }, {"written in local mode with 2 groups", "lists no array 'adam_v.g1' (adam_v.g1.bin)", "another checkpoint"}},
      {"weights", [](const std::string&, nlohmann::json& meta) { meta["extra"]["local"]["weights"] = {1.0}; },
       {"meta.json: extra.local.weights must hold one number per group (2), got [1.0]"}},
  };
  for (const Case& c : cases) {
    const std::string dir = tmp_.file(std::string("broken_") + c.name);
    fs::copy(ckpt, dir);
    nlohmann::json meta;
    std::ifstream(dir + "/meta.json") >> meta;
    c.breaks(dir, meta);
    std::ofstream(dir + "/meta.json") << meta.dump(1);
    TrainOptions r = o;
    r.steps = 6;
    r.out = tmp_.file(std::string("resumed_") + c.name);
    r.resume = dir;
    const Outcome out = run_ranks(r, four_ranks(), local_sync(2, 2));
    EXPECT_NE(out.error, "") << c.name;
    for (const char* s : c.says) EXPECT_NE(out.error.find(s), std::string::npos) << c.name << ": " << out.error;
  }
}

}  // namespace
}  // namespace gpumix::dist::test
