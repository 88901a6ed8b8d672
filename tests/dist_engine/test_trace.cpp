// The trace of training steps (dist/engine/trace.h): the file parses as the Trace Event
// Format, spans nest on every track, each traced step's phases add up to the step's time
// (the log's `ms`), and the sharded engine's spans are there per unit and micro-batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dist/engine/launch.h"
#include "dist/engine/trace.h"
#include "engine_test_util.h"

namespace gpumix::dist::test {
namespace {

using json = nlohmann::json;

struct Span {
  std::string name, cat, unit;
  double ts = 0, dur = 0;
  int pid = 0, tid = 0, step = 0, micro_batch = -1;
  double end() const { return ts + dur; }
};

struct Trace {
  std::vector<Span> spans;
  std::map<int, std::string> process_names;
  std::set<std::pair<int, int>> named_tracks;
};

// Parses the file, checking the fields each event must have.
Trace read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  const json j = json::parse(in);  // throws on a malformed file
  Trace t;
  EXPECT_TRUE(j.at("traceEvents").is_array());
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  for (const json& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M") {
      const int pid = e.at("pid").get<int>(), tid = e.value("tid", 0);
      if (e.at("name") == "process_name") t.process_names[pid] = e.at("args").at("name").get<std::string>();
      if (e.at("name") == "thread_name") t.named_tracks.insert({pid, tid});
      continue;
    }
    EXPECT_EQ(ph, "X") << e.dump();
    Span s;
    s.name = e.at("name");
    s.cat = e.at("cat");
    s.ts = e.at("ts");
    s.dur = e.at("dur");
    s.pid = e.at("pid");
    s.tid = e.at("tid");
    s.step = e.at("args").at("step");
    if (e.at("args").contains("unit")) s.unit = e.at("args").at("unit");
    if (e.at("args").contains("micro_batch")) s.micro_batch = e.at("args").at("micro_batch");
    EXPECT_GE(s.ts, 0) << e.dump();
    EXPECT_GE(s.dur, 0) << e.dump();
    t.spans.push_back(s);
  }
  return t;
}

// Times are written in microseconds to the nanosecond: a child may seem to end up to
// 2 ns after its parent.
constexpr double kRoundingUs = 0.002;

// On each track, any two spans are disjoint or one holds the other.
void expect_nested(const Trace& t) {
  std::map<std::pair<int, int>, std::vector<Span>> tracks;
  for (const Span& s : t.spans) tracks[{s.pid, s.tid}].push_back(s);
  for (auto& [track, spans] : tracks) {
    EXPECT_TRUE(t.named_tracks.count(track)) << "track " << track.second << " of rank " << track.first << " has no name";
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;  // parents first
    });
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back()->end() <= s.ts + kRoundingUs) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.end(), open.back()->end() + kRoundingUs)
            << "rank " << track.first << " track " << track.second << ": '" << s.name << "' [" << s.ts << ", "
            << s.end() << "] overlaps '" << open.back()->name << "' [" << open.back()->ts << ", "
            << open.back()->end() << "] without nesting in it";
      }
      open.push_back(&s);
    }
  }
}

// The spans of `rank`'s CPU track directly inside `parent` (not inside another of them).
std::vector<Span> children(const Trace& t, const Span& parent) {
  std::vector<Span> inside;
  for (const Span& s : t.spans)
    if (s.pid == parent.pid && s.tid == parent.tid && !(s.ts == parent.ts && s.dur == parent.dur) &&
        s.ts >= parent.ts - kRoundingUs && s.end() <= parent.end() + kRoundingUs)
      inside.push_back(s);
  std::vector<Span> direct;
  for (const Span& s : inside) {
    bool nested = false;
    for (const Span& o : inside)
      nested = nested || (&o != &s && o.dur > s.dur && o.ts <= s.ts + kRoundingUs && o.end() + kRoundingUs >= s.end());
    if (!nested) direct.push_back(s);
  }
  return direct;
}

// The step lines' ms, by step.
std::map<int, double> logged_ms(const std::string& out) {
  std::map<int, double> ms;
  std::ifstream in(out + "/log.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (!j.contains("final")) ms[j.at("step").get<int>()] = j.at("ms").get<double>();
  }
  return ms;
}

// Each traced step's phases (the step span's direct children) follow one another inside the
// step without overlapping, and the slowest rank's step is the log's ms. How much of the step
// they cover is not asserted: only the loop's own bookkeeping lies between them, but a thread
// rank descheduled there on a loaded machine (or under the sanitizers) widens the gap at will.
void expect_steps_add_up(const Trace& t, int ranks, int first, int last, const std::string& out) {
  const std::map<int, double> ms = logged_ms(out);
  for (int step = first; step <= last; ++step) {
    double slowest = 0;
    for (int r = 0; r < ranks; ++r) {
      std::vector<Span> steps;
      for (const Span& s : t.spans)
        if (s.pid == r && s.name == "step" && s.step == step) steps.push_back(s);
      ASSERT_EQ(steps.size(), 1u) << "rank " << r << " step " << step;
      const Span& st = steps[0];
      double sum = 0;
      std::set<std::string> phases;
      std::vector<Span> in_order = children(t, st);
      std::sort(in_order.begin(), in_order.end(), [](const Span& a, const Span& b) { return a.ts < b.ts; });
      for (size_t i = 0; i < in_order.size(); ++i) {
        sum += in_order[i].dur;
        phases.insert(in_order[i].name);
        if (i > 0) {
          EXPECT_GE(in_order[i].ts, in_order[i - 1].end() - kRoundingUs)
              << "rank " << r << " step " << step << ": " << in_order[i].name << " starts inside "
              << in_order[i - 1].name;
        }
      }
      EXPECT_EQ(phases, (std::set<std::string>{"load batch", "forward-backward", "loss all-reduce",
                                                "finite check and norm", "optimizer"}))
          << "rank " << r << " step " << step;
      EXPECT_LE(sum, st.dur + 5 * kRoundingUs) << "rank " << r << " step " << step;
      slowest = std::max(slowest, st.dur);
    }
    // The log's ms is the slowest rank's step, measured by the same clock reading.
    EXPECT_NEAR(slowest / 1e3, ms.at(step), 1e-5) << "step " << step;
  }
}

class TraceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir("trace_data");
    make_tiny_data(data_->path().string());
  }
  static void TearDownTestSuite() { delete data_; }
  static TempDir* data_;
};
TempDir* TraceTest::data_ = nullptr;

EngineOptions tracing(const std::string& file, int first, int last) {
  EngineOptions e;
  e.trace = file;
  e.trace_first = first;
  e.trace_last = last;
  return e;
}

std::set<int> traced_steps(const Trace& t) {
  std::set<int> steps;
  for (const Span& s : t.spans) steps.insert(s.step);
  return steps;
}

TEST_F(TraceTest, ThreeRanksUnevenPlan) {
  TempDir dir("trace3");
  TrainOptions o = tiny_options(data_->path().string(), dir.file("run"));
  const EngineOptions e = tracing(dir.file("trace.json"), 2, 3);
  const Work work = make_work({1, 3, 4}, {1, 2, 4}, {0.2, 0.3, 0.5});
  train_local(o, 3, {}, work, e, 2);
  const Trace t = read_trace(e.trace);
  expect_nested(t);
  expect_steps_add_up(t, 3, 2, 3, o.out);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(t.process_names.at(r).rfind("rank " + std::to_string(r), 0), 0u);

  EXPECT_EQ(traced_steps(t), (std::set<int>{2, 3}));

  // Per rank and step: every unit forward per micro-batch (the head's forward and backward
  // together), every block's recompute and backward per micro-batch, the embedding's
  // backward per micro-batch, one reduce-scatter per unit, one optimizer; prefetched
  // gathers in flight on the collectives track.
  const std::vector<std::string> units = {"embedding", "block 0", "block 1", "head"};
  for (int r = 0; r < 3; ++r) {
    const int micro_batches = (int)work.ranks[r].num_micro_batches();
    for (int step : {2, 3}) {
      std::map<std::string, int> count;  // "name|unit"
      int in_flight = 0;
      for (const Span& s : t.spans) {
        if (s.pid != r || s.step != step) continue;
        if (s.tid == Tracer::kCollectives) ++in_flight;
        else ++count[s.name + "|" + s.unit];
      }
      SCOPED_TRACE("rank " + std::to_string(r) + " step " + std::to_string(step));
      for (const char* u : {"embedding", "block 0", "block 1"}) EXPECT_EQ(count[std::string("forward|") + u], micro_batches);
      EXPECT_EQ(count["forward and backward|head"], micro_batches);
      for (const char* u : {"block 0", "block 1"})
        EXPECT_EQ(count[std::string("recompute and backward|") + u], micro_batches);
      EXPECT_EQ(count["backward|embedding"], micro_batches);
      for (const std::string& u : units) {
        EXPECT_EQ(count["reduce-scatter|" + u], 1) << u;
        EXPECT_GE(count[u + "|" + u], 1) << u;  // the unit's own span
        EXPECT_GE(count["gather|" + u] + count["wait for gather|" + u], 1) << u;
      }
      EXPECT_EQ(count["optimizer|"], 1);
      EXPECT_GE(in_flight, 4);  // gathers issued ahead: blocks and head forward, blocks backward
    }
  }
}

TEST_F(TraceTest, OneRankAndAResumedRun) {
  TempDir dir("trace1");
  TrainOptions o = tiny_options(data_->path().string(), dir.file("run"));
  o.ckpt_interval = 2;
  EngineOptions e = tracing(dir.file("trace.json"), 1, 2);
  train_local(o, 1, {}, make_work({8}, {4}, {1.0}), e, 2);
  Trace t = read_trace(e.trace);
  expect_nested(t);
  expect_steps_add_up(t, 1, 1, 2, o.out);
  int forward = 0, backward = 0;
  for (const Span& s : t.spans) {
    forward += s.name == "forward" && s.step == 1;
    backward += s.name == "backward" && s.step == 1;
  }
  EXPECT_EQ(forward, 2);  // 8 rows in micro-batches of 4
  EXPECT_EQ(backward, 2);

  // Resumed from step 2 with --trace-steps 1:4: steps 3 and 4 (those it trains).
  o.resume = o.out + "/ckpt-000002";
  e = tracing(dir.file("resumed.json"), 1, 4);
  train_local(o, 1, {}, make_work({8}, {4}, {1.0}), e, 2);
  t = read_trace(e.trace);
  EXPECT_EQ(traced_steps(t), (std::set<int>{3, 4}));
  expect_nested(t);
}

TEST_F(TraceTest, StepsOutsideTheRunAreAnInputError) {
  TempDir dir("trace_bad");
  TrainOptions o = tiny_options(data_->path().string(), dir.file("run"));
  const EngineOptions e = tracing(dir.file("trace.json"), 7, 9);
  try {
    train_local(o, 1, {}, make_work({8}, {8}, {1.0}), e, 2);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& err) {
    EXPECT_NE(std::string(err.what()).find("--trace-steps 7:9 holds none of the steps this run trains (1 to 5)"),
              std::string::npos)
        << err.what();
  }
  EXPECT_FALSE(fs::exists(e.trace));
}

}  // namespace
}  // namespace gpumix::dist::test
