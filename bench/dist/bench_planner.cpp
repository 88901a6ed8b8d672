// Planning time: GPUMix's planner and the baselines on clusters from 4 to 1,024 devices.
// The claim to hold: 1,024 devices of 8 types, B = 4,096, well under a second on one core.
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include "dist/plan/cluster.h"
#include "dist/plan/planner.h"
#include "dist/plan/simulator.h"

namespace {

using namespace gpumix::dist;
using nlohmann::json;

// `nodes` nodes of 8 devices each, the types cycling through the first `types` of the list.
Profile make_profile(int nodes, int types, const char* model) {
  const char* names[] = {"H100", "A100-80GB", "A100-40GB", "L40S", "A6000", "V100-32GB", "A10G", "L4"};
  json jn = json::array();
  for (int n = 0; n < nodes; n++)
    jn.push_back({{"devices", {std::string(names[n * types / nodes]) + ":count=8"}}});
  const Cluster c = cluster_from_json(json{{"intra_node", {{"bandwidth_GBps", 40}, {"latency_us", 8}}},
                                           {"inter_node", {{"bandwidth_GBps", 25}, {"latency_us", 20}}},
                                           {"nodes", jn}});
  return synthesize_profile(c, gpumix::gpt_preset(model), 512);
}

void run(benchmark::State& state, const char* planner, int nodes, int types, int64_t B) {
  const Profile p = make_profile(nodes, types, "gpt-1.3b");
  for (auto _ : state) {
    Plan plan = run_planner(planner, p, B);
    benchmark::DoNotOptimize(plan);
  }
  state.counters["devices"] = p.num_ranks();
  state.counters["global_batch"] = (double)B;
}

void BM_gpumix_1024x8_B4096(benchmark::State& s) { run(s, "gpumix", 128, 8, 4096); }
void BM_gpumix_256x8_B1024(benchmark::State& s) { run(s, "gpumix", 32, 8, 1024); }
void BM_gpumix_64x4_B512(benchmark::State& s) { run(s, "gpumix", 8, 4, 512); }
void BM_gpumix_16x2_B128(benchmark::State& s) { run(s, "gpumix", 2, 2, 128); }
void BM_even_1024x8_B4096(benchmark::State& s) { run(s, "even", 128, 8, 4096); }
void BM_proportional_1024x8_B4096(benchmark::State& s) { run(s, "proportional", 128, 8, 4096); }
void BM_cephalo_1024x8_B4096(benchmark::State& s) { run(s, "cephalo", 128, 8, 4096); }
void BM_cephalo_64x4_B512(benchmark::State& s) { run(s, "cephalo", 8, 4, 512); }

// Small: the exact search (all subsets, every micro-batch size, dynamic programme).
void BM_gpumix_exact_4ranks_B32(benchmark::State& state) {
  json jn = json::array({json{{"devices", {"L4:count=2", "A6000", "P40"}}}});
  const Cluster c = cluster_from_json(json{{"intra_node", {{"bandwidth_GBps", 10}, {"latency_us", 15}}}, {"nodes", jn}});
  const Profile p = synthesize_profile(c, gpumix::gpt_preset("gpt-1.3b"), 512);
  for (auto _ : state) {
    Plan plan = plan_gpumix(p, 32);
    benchmark::DoNotOptimize(plan);
  }
}

}  // namespace

BENCHMARK(BM_gpumix_1024x8_B4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gpumix_256x8_B1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gpumix_64x4_B512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gpumix_16x2_B128)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gpumix_exact_4ranks_B32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_even_1024x8_B4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_proportional_1024x8_B4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cephalo_1024x8_B4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cephalo_64x4_B512)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
