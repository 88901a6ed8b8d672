// Profile, cluster and plan files: round trips and validation errors that name the field.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "dist/plan/cluster.h"
#include "dist/plan/plan.h"
#include "dist/plan/planner.h"
#include "dist/plan/profile.h"
#include "dist/plan/simulator.h"
#include "tests/dist/test_util.h"

namespace gpumix::dist {
namespace {

using nlohmann::json;
using testing::FakeDevice;

constexpr double MiB = 1024.0 * 1024.0;

Profile sample_profile() {
  std::vector<FakeDevice> devs = {{"fast", 3 * MiB, 1e-4, 1e-4, 1e-9, 2e9}, {"slow", 2 * MiB, 3e-4}};
  return testing::fake_profile(testing::tiny_model(2), 32, devs, {0, 1, 1}, 1e9, 1e-5, 1.2, {0, 0, 1});
}

// Expects `f` to throw FormatError whose message contains `field`.
template <class F>
void expect_field_error(F f, const std::string& field) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << field;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(ProfileFile, RoundTrip) {
  const Profile p = sample_profile();
  const json j = profile_to_json(p);
  const Profile q = profile_from_json(j);
  EXPECT_EQ(profile_to_json(q).dump(), j.dump());
  const std::string path = ::testing::TempDir() + "/profile.json";
  write_profile(p, path);
  EXPECT_EQ(profile_to_json(read_profile(path)).dump(), j.dump());
}

TEST(ProfileFile, ErrorsNameTheField) {
  const json good = profile_to_json(sample_profile());
  auto broken = [&](auto edit, const std::string& field) {
    json j = good;
    edit(j);
    expect_field_error([&] { profile_from_json(j); }, field);
  };
  broken([](json& j) { j["devices"][1]["samples"][0]["block_fwd_s"] = -1; }, "devices[1].samples[0].block_fwd_s");
  broken([](json& j) { j["devices"][0]["samples"][1]["m"] = 1; }, "devices[0].samples[1].m");
  broken([](json& j) { j["devices"][0].erase("memory_bytes"); }, "devices[0].memory_bytes");
  broken([](json& j) { j["devices"][0]["memory_bytes"] = "12 potatoes"; }, "devices[0].memory_bytes");
  broken([](json& j) { j["ranks"][2]["device"] = "nope"; }, "ranks[2].device");
  broken([](json& j) { j["comm"]["all_gather"].erase("inter_node"); }, "comm.all_gather.inter_node");
  broken([](json& j) { j["comm"]["reduce_scatter"]["uneven_factor"] = 0.5; }, "comm.reduce_scatter.uneven_factor");
  broken([](json& j) { j["seq_len"] = 4096; }, "seq_len");
  broken([](json& j) { j["model"]["C"] = 65; }, "model");
  broken([](json& j) { j["devices"][0]["dtype_bytes"] = 3; }, "devices[0].dtype_bytes");
  broken([](json& j) { j["dtype"] = "fp16"; }, "profile.dtype: unknown value 'fp16'; valid: bf16, fp32 (or f32)");
  broken([](json& j) { j["dtype"] = 2; }, "profile.dtype");
  // One dtype per run: a device that says another one is refused.
  broken([](json& j) { j["devices"][1]["dtype_bytes"] = 4; }, "devices[1].dtype_bytes: 4 bytes, but the profile computes in bf16");
}

TEST(ProfileFile, DtypeOfOneRunAndOfProfilesBeforeIt) {
  json j = profile_to_json(sample_profile());
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_FALSE(j["devices"][0].contains("dtype_bytes"));
  j["dtype"] = "fp32";
  EXPECT_EQ(profile_from_json(j).dtype, DType::f32);
  // Written before the profile's "dtype": the devices' bytes (by default 4 on CPUs, 2 on
  // GPUs), which must agree.
  j.erase("dtype");
  for (json& d : j["devices"]) d["dtype_bytes"] = 4;
  EXPECT_EQ(profile_from_json(j).dtype, DType::f32);
  for (json& d : j["devices"]) d.erase("dtype_bytes");
  EXPECT_EQ(profile_from_json(j).dtype, DType::bf16);  // kind "gpu"
  j["devices"][1]["kind"] = "cpu";
  expect_field_error([&] { profile_from_json(j); }, "devices[1].dtype_bytes: 4 bytes, but the profile computes in bf16");
}

TEST(ProfileFile, MemoryAcceptsUnits) {
  json j = profile_to_json(sample_profile());
  j["devices"][0]["memory_bytes"] = "3MiB";
  EXPECT_DOUBLE_EQ(profile_from_json(j).devices[0].memory_bytes, 3 * MiB);
}

TEST(Interpolation, LinearBetweenFlatBelowExtrapolatedAbove) {
  std::vector<MicroBatchSample> s(2);
  s[0].m = 2;
  s[0].block_fwd_s = 1.0;
  s[1].m = 4;
  s[1].block_fwd_s = 1.5;
  EXPECT_DOUBLE_EQ(interpolate(s, 1, &MicroBatchSample::block_fwd_s), 1.0);
  EXPECT_DOUBLE_EQ(interpolate(s, 3, &MicroBatchSample::block_fwd_s), 1.25);
  EXPECT_DOUBLE_EQ(interpolate(s, 8, &MicroBatchSample::block_fwd_s), 2.5);
  std::vector<MicroBatchSample> one(1);
  one[0].m = 4;
  one[0].block_act_bytes = 400;
  EXPECT_DOUBLE_EQ(interpolate(one, 10, &MicroBatchSample::block_act_bytes), 1000);
}

TEST(ClusterFile, RoundTripAndDeviceSpecs) {
  const json j = json::parse(R"({"name": "lab",
    "intra_node": {"bandwidth_GBps": 12, "latency_us": 15},
    "inter_node": {"bandwidth_GBps": 3, "latency_us": 50},
    "nodes": [{"devices": ["L4:count=2", "a6000", {"type": "P40", "memory": "20GiB"}]},
              {"devices": ["cpu:mem=2GiB:slow=3", {"type": "cpu", "memory": 1073741824, "slowdown": 1.5}]}]})");
  const Cluster c = cluster_from_json(j);
  ASSERT_EQ(c.num_ranks(), 6);
  const auto ranks = c.ranks();
  EXPECT_EQ(ranks[2].device.type, "A6000");
  EXPECT_EQ(ranks[3].device.label(), "P40:mem=20GiB");
  EXPECT_EQ(ranks[4].device.kind, "cpu");
  EXPECT_EQ(ranks[4].device.label(), "cpu:mem=2GiB:slow=3");
  EXPECT_DOUBLE_EQ(ranks[5].device.slowdown, 1.5);
  EXPECT_EQ(ranks[5].node, 1);
  const Cluster back = cluster_from_json(cluster_to_json(c));
  EXPECT_EQ(cluster_to_json(back).dump(), cluster_to_json(c).dump());
  EXPECT_EQ(back.num_ranks(), 6);
}

TEST(ClusterFile, ErrorsNameTheField) {
  auto bad = [](const char* text, const std::string& field) {
    expect_field_error([&] { cluster_from_json(json::parse(text)); }, field);
  };
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": ["Z80"]}]})", "nodes[0].devices[0].type");
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": ["L4:mem=lots"]}]})", "nodes[0].devices[0].mem");
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": ["L4:colour=red"]}]})", "nodes[0].devices[0]");
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": ["L4"]}, {"devices": ["L4"]}]})",
      "inter_node.bandwidth_GBps");
  bad(R"({"nodes": [{"devices": ["L4:count=2"]}]})", "intra_node.bandwidth_GBps");
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": [{"type": "L4", "slowdown": 0.5}]}]})",
      "nodes[0].devices[0].slowdown");
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": []})", "nodes");
  // Regression (UBSan, fuzzing): absurd counts once overflowed the int rank count.
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": [{"type": "L4", "count": 2147483647},
      {"type": "L4", "count": 2147483647}]}]})", "nodes[0].devices[0].count");
  bad(R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": ["L4:count=99999999999"]}]})",
      "nodes[0].devices[0].count");
}

TEST(ClusterFile, CudaDevicesNameTheirGpu) {
  const ClusterDevice d = parse_device_spec("cuda:1:mem=8GiB:slow=2", "--devices");
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.kind, "gpu");
  EXPECT_EQ(d.gpu, 1);
  EXPECT_DOUBLE_EQ(d.memory_bytes, 8.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(d.slowdown, 2.0);
  EXPECT_EQ(d.label(), "cuda:1:mem=8GiB:slow=2");
  EXPECT_EQ(parse_device_spec(d.label(), "label").gpu, 1);
  const ClusterDevice local = parse_device_spec("cuda", "--devices");  // the node-local rank's GPU
  EXPECT_EQ(local.gpu, -1);
  EXPECT_EQ(local.label(), "cuda");
  // Several ranks on one GPU, in a cluster file too (string and object forms).
  const Cluster c = cluster_from_json(json::parse(R"({"intra_node": {"bandwidth_GBps": 100},
    "nodes": [{"devices": ["cuda:0", "cuda:0:mem=6GiB:slow=3", {"type": "cuda", "gpu": 0, "count": 2}]}]})"));
  ASSERT_EQ(c.num_ranks(), 4);
  for (const auto& r : c.ranks()) EXPECT_EQ(r.device.gpu, 0);
  EXPECT_EQ(c.ranks()[1].device.label(), "cuda:0:mem=6GiB:slow=3");
  EXPECT_EQ(cluster_to_json(cluster_from_json(cluster_to_json(c))).dump(), cluster_to_json(c).dump());
  // A GPU index belongs to cuda only, and stays in range.
  expect_field_error([] { parse_device_spec("cpu:0", "--devices"); }, "--devices.gpu");
  expect_field_error([] { parse_device_spec("cuda:99999", "--devices"); }, "--devices.gpu");
  expect_field_error([] { parse_device_spec("cuda:0:1", "--devices"); }, "--devices");
}

TEST(PlanFile, RoundTripAndValidation) {
  const Profile p = sample_profile();
  const Plan plan = plan_gpumix(p, 7);
  const json j = plan_to_json(plan);
  const Plan back = plan_from_json(j);
  EXPECT_EQ(plan_to_json(back).dump(), j.dump());
  EXPECT_NO_THROW(validate_plan(back, p));
  EXPECT_EQ(j["dtype"], "bf16");  // the profile's
  json old = j;
  old.erase("dtype");
  EXPECT_EQ(plan_from_json(old).dtype, DType::f32);  // plan files before dtypes: fp32
  const std::string path = ::testing::TempDir() + "/plan.json";
  write_plan(plan, path);
  EXPECT_EQ(plan_to_json(read_plan(path)).dump(), j.dump());
  // The links it was priced with travel with it (a run of the file chooses the collectives'
  // forms by them); files without them still read.
  ASSERT_TRUE(back.comm.has_value());
  EXPECT_EQ(back.comm->all_gather.intra_node.bandwidth_Bps, p.comm.all_gather.intra_node.bandwidth_Bps);
  EXPECT_EQ(back.comm->overlap, p.comm.overlap);
  json no_comm = j;
  no_comm.erase("comm");
  EXPECT_FALSE(plan_from_json(no_comm).comm.has_value());

  auto broken = [&](auto edit, const std::string& field) {
    json k = j;
    edit(k);
    expect_field_error([&] { validate_plan(plan_from_json(k), p); }, field);
  };
  broken([](json& k) {
    k["ranks"][0]["batch"] = k["ranks"][0]["batch"].get<int>() + 1;
    k["ranks"][0].erase("num_micro_batches");
  }, "ranks[].batch");
  broken([](json& k) { k["ranks"][1]["share"] = 1.5; }, "ranks[1].share");
  broken([](json& k) { k["comm"]["overlap"] = 2; }, "comm.overlap");
  broken([](json& k) { k["ranks"][1]["device"] = "fast"; }, "ranks[1].device");
  broken([](json& k) { k["seq_len"] = 16; }, "seq_len");
  broken([](json& k) { k["ranks"][0].erase("batch"); }, "ranks[0].batch");
  broken([](json& k) { k["ranks"][0]["num_micro_batches"] = 99; }, "ranks[0].num_micro_batches");
  broken([](json& k) { k["dtype"] = "f32"; }, "plan.dtype: f32 but the profile computes in bf16");
  broken([](json& k) { k["dtype"] = "int8"; }, "plan.dtype: unknown value 'int8'");
  // A plan that puts all state on the small rank does not fit: the error names the rank.
  json k = j;
  for (auto& r : k["ranks"]) r["share"] = 0.0;
  k["ranks"][1]["share"] = 1.0;
  expect_field_error([&] { validate_plan(plan_from_json(k), p); }, "ranks[1]");
}

TEST(PlanFile, BaselinesAndSimulatorJson) {
  const Profile p = sample_profile();
  const Simulation sim = simulate(p, "test", 7);
  const json j = simulation_to_json(sim);
  // Two nodes: gpumix's choice, then full and hybrid sharding side by side, then the baselines.
  ASSERT_EQ(j["planners"].size(), 6u);
  EXPECT_EQ(j["planners"][1]["planner"], "gpumix-full");
  EXPECT_EQ(j["planners"][1]["plan"]["sharding"]["mode"], "full");
  EXPECT_EQ(j["planners"][2]["planner"], "gpumix-hybrid");
  // Groups of 1 (the only size that tiles 2 + 1 ranks) would put the whole state on the
  // 2 MiB device: no hybrid plan fits, and the entry says why.
  EXPECT_FALSE(j["planners"][2]["planned"].get<bool>());
  EXPECT_NE(j["planners"][2]["error"].get<std::string>().find("hybrid sharding in groups of 1"), std::string::npos)
      << j["planners"][2].dump();
  for (const json& e : j["planners"]) {
    if (e["planned"].get<bool>()) {
      EXPECT_NO_THROW(plan_from_json(e["plan"]));
    }
  }
  EXPECT_NE(simulation_table(sim).find("gpumix"), std::string::npos);
}

// Ranks' node names (from the communicator's topology, issue 23) go from the profile into
// the plan, its file and its table; files without them still read.
TEST(PlanFile, NodeNamesFromTheProfile) {
  Profile p = sample_profile();
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    p.ranks[r].node = (int)(r % 2);
    p.ranks[r].node_name = r % 2 ? "gpumix-node1" : "gpumix-node0";
  }
  p.comm.all_gather.inter_node = p.comm.all_gather.intra_node;  // two nodes need the link between them
  p.comm.reduce_scatter.inter_node = p.comm.reduce_scatter.intra_node;
  const Profile pb = profile_from_json(profile_to_json(p));
  ASSERT_EQ(pb.ranks.size(), p.ranks.size());
  EXPECT_EQ(pb.ranks[1].node_name, "gpumix-node1");
  const Plan plan = plan_gpumix(pb, 7);
  const Plan back = plan_from_json(plan_to_json(plan));
  EXPECT_EQ(back.ranks[0].node_name, "gpumix-node0");
  EXPECT_EQ(back.ranks[1].node_name, "gpumix-node1");
  EXPECT_EQ(back.ranks[1].node, 1);
  const std::string table = plan_table(back);
  EXPECT_NE(table.find("gpumix-node1"), std::string::npos) << table;
  json old = plan_to_json(plan);
  for (auto& r : old["ranks"]) r.erase("node_name");
  EXPECT_EQ(plan_from_json(old).ranks[1].node_name, "");
  EXPECT_EQ(plan_table(plan_from_json(old)).find("gpumix-node"), std::string::npos);
}

}  // namespace
}  // namespace gpumix::dist
