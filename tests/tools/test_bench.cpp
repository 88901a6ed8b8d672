// `gpumix bench` end to end, as a child process on small shapes: bad input fails with a
// message naming the problem and the fix; a run on two CPU devices of different speed writes
// a JSON with every kernel of the step, a roofline picture, and `bench compare` of it shows
// the slowdown (test_bench_profile.cpp checks the bench against the profiler).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_gpumix.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;


using gpumix::test::quote;
using gpumix::test::read_file;
using gpumix::test::Result;

class Bench : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpumix_bench_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `gpumix <args>` with `threads` OpenMP threads (the machine is shared; one thread times
  // steadily).
  Result gpumix(const std::vector<std::string>& args, int threads = 1) {
    return ::gpumix::test::gpumix(args, dir_.string(), "", threads);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string show(const Result& r) { return "exit " + std::to_string(r.code) + "\nstderr:\n" + r.err + "stdout:\n" + r.out; }

TEST_F(Bench, BadDevicesNameTheEntry) {
  const Result r = gpumix({"bench", "--devices", "cpu,gpu7", "--model", "gpt-nano", "--quiet"});
  EXPECT_EQ(r.code, 1) << show(r);
  EXPECT_NE(r.err.find("gpu7"), std::string::npos) << show(r);
  const Result empty = gpumix({"bench", "--devices", "cpu,,cpu", "--model", "gpt-nano", "--quiet"});
  EXPECT_EQ(empty.code, 1) << show(empty);
  EXPECT_NE(empty.err.find("empty entry"), std::string::npos) << show(empty);
}

TEST_F(Bench, UnknownRoleListsTheRoles) {
  const Result r = gpumix({"bench", "--devices", "cpu", "--model", "gpt-nano", "--filter", "qkv,nosuch", "--quiet"});
  EXPECT_EQ(r.code, 1) << show(r);
  EXPECT_NE(r.err.find("'nosuch' names no kernel role"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("attn.bwd"), std::string::npos) << show(r);  // the list of roles
  // Collectives are roles only with two devices.
  const Result comm = gpumix({"bench", "--devices", "cpu", "--model", "gpt-nano", "--filter", "gather", "--quiet"});
  EXPECT_EQ(comm.code, 1) << show(comm);
  EXPECT_NE(comm.err.find("collectives need two --devices"), std::string::npos) << show(comm);
}

TEST_F(Bench, SeqLongerThanTheContext) {
  const Result r = gpumix({"bench", "--model", "gpt-nano", "--seq", "4096", "--quiet"});
  EXPECT_EQ(r.code, 1) << show(r);
  EXPECT_NE(r.err.find("--seq 4096 is longer than gpt-nano's context of 128"), std::string::npos) << show(r);
}

TEST_F(Bench, CompareRefusesUnreadableFiles) {
  std::ofstream(path("broken.json")) << "{\"gpumix_bench\": 1, \"devices\": [";
  std::ofstream(path("other.json")) << "{\"steps\": 3}";
  Result r = gpumix({"bench", "compare", path("broken.json"), path("other.json")});
  EXPECT_EQ(r.code, 1) << show(r);
  EXPECT_NE(r.err.find("broken.json' is not JSON"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("gpumix bench --json"), std::string::npos) << show(r);
  r = gpumix({"bench", "compare", path("other.json"), path("other.json")});
  EXPECT_EQ(r.code, 1) << show(r);
  EXPECT_NE(r.err.find("other.json' is JSON but not a `gpumix bench --json` file"), std::string::npos) << show(r);
  r = gpumix({"bench", "compare", path("missing.json"), path("other.json")});
  EXPECT_EQ(r.code, 1) << show(r);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << show(r);
}

// Two CPU devices, the second emulated 3x slower: every role measured on both, the collectives
// among them, the roofline drawn, and compare's per-block speed ratio the one the files give.
// (How slow the emulated device comes out depends on the machine's load, core/slowdown.h: on a
// shared machine its wait follows its CPU time, so the ratio itself is not asserted.)
TEST_F(Bench, TwoDevicesOfDifferentSpeedThenCompare) {
  const Result r = gpumix({"bench", "--devices", "cpu,cpu:slow=3", "--model", "gpt-nano", "--seq", "32", "--batch",
                           "2", "--repeat", "3", "--dtype", "fp32", "--json", path("a.json"), "--svg", path("a.svg")});
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.err.find("kernel 1 of"), std::string::npos) << show(r);  // progress
  EXPECT_NE(r.err.find("ETA"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("emulated slowdown x3"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("step breakdown"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("if every kernel reached its roof"), std::string::npos) << show(r);
  const json j = json::parse(read_file(path("a.json")));
  ASSERT_EQ(j.at("devices").size(), 2u);
  for (const char* field : {"hostname", "cpu_model"}) EXPECT_TRUE(j.at("machine").contains(field)) << field;
  EXPECT_TRUE(j.at("build").contains("git_describe"));
  EXPECT_TRUE(j.at("load_average_start").is_array());
  double block[2] = {0, 0};
  for (int d = 0; d < 2; ++d) {
    const json& dev = j["devices"][d];
    EXPECT_GT(dev.at("roofs").at("bandwidth_Bps").get<double>(), 0);
    EXPECT_GT(dev.at("roofs").at("peak_flops").get<double>(), 0);
    std::vector<std::string> roles;
    for (const json& k : dev.at("kernels")) {
      roles.push_back(k.at("role"));
      EXPECT_GT(k.at("median_s").get<double>(), 0) << k.dump();
      EXPECT_EQ(k.at("times_s").size(), 3u) << k.dump();
      block[d] += k.at("per_block").get<int>() * k.at("median_s").get<double>();
    }
    for (const char* role : {"embed.fwd", "ln.bwd", "qkv.bwd_w", "attn.fwd", "attn.bwd", "mlp_down.bwd_in",
                             "mlp_up.fwd", "lm_head.fwd", "xent.bwd", "adamw", "grad_norm"})
      EXPECT_NE(std::find(roles.begin(), roles.end(), role), roles.end()) << role;
  }
  EXPECT_EQ(j.at("collectives").size(), 4u);
  const std::string svg = read_file(path("a.svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("qkv.fwd"), std::string::npos);
  EXPECT_NE(svg.find("cpu:slow=3"), std::string::npos);

  const Result c = gpumix({"bench", "compare", path("a.json"), path("a.json"), "--svg", path("c.svg")});
  ASSERT_EQ(c.code, 0) << show(c);
  // Columns: [1] cpu, [2] cpu:slow=3, [3] cpu, [4] cpu:slow=3; [2]'s per-block speed vs [1].
  const size_t speed = c.out.find("speed ", c.out.find("one block"));
  ASSERT_NE(speed, std::string::npos) << c.out;
  EXPECT_NEAR(std::atof(c.out.c_str() + speed + 6), block[0] / block[1], 0.006) << c.out;
  EXPECT_NE(c.out.find("[4] "), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("emulated slowdown x3"), std::string::npos) << c.out;
  EXPECT_EQ(read_file(path("c.svg")).rfind("<svg", 0), 0u);
}

}  // namespace
