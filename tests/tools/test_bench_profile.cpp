// One source of truth (issue 21): the profiler's per-block compute time, what the planner
// sees (dist/engine/profiler.h: block_bwd_s, one block's forward and backward through
// autograd, as training runs it), and `gpumix bench`'s kernels of one block (tools/bench.h:
// the same ops, timed one by one), in one process on one OpenMP thread. How the two times
// compare is bench/'s question (`gpumix bench` prints its step breakdown): this test counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>

#include "core/runtime.h"
#include "dist/comm/comm.h"
#include "dist/engine/profiler.h"
#include "tools/bench.h"

namespace {

using namespace gpumix;

// gpt-micro at T 256, one sequence (the profiler's m = 1). What is asserted is counted, not
// timed, so that it holds at any load of the machine (the two times were once compared within
// 0.45x-1.5x, which a busy CI machine broke at 1.52x; they are printed for a look):
//  - the profiler measured the block: a positive, finite time at m = 1;
//  - the bench's kernel list for one block does the block's arithmetic once: its FLOPs are
//    at least the model's (3 x forward: the forward, and the backward's two products per
//    GEMM and attention) and at most 1.25x them: the bench also counts attention's backward
//    recomputation (2.5x its forward where the model counts 2x) and the elementwise ops the
//    model leaves out, together 3% here. A missing or doubled GEMM family (a third of the
//    block's FLOPs each) falls outside.
TEST(BenchProfile, ProfilerAndBenchMeasureTheSameBlock) {
  omp_set_num_threads(1);
  const GPTConfig model = gpt_preset("gpt-micro");
  const int T = 256;
  double profiled = 0;
  dist::run_local(1, [&](dist::Comm& comm) {
    omp_set_num_threads(1);
    dist::ProfilerOptions o;
    o.max_micro_batch = 1;
    o.repeats = 3;
    o.cache_dir = "-";
    o.show_progress = false;
    const dist::Profile p = dist::profile_cluster(model, T, DType::f32, "cpu", Device::cpu(0), comm, o);
    ASSERT_EQ(p.devices.at(0).samples.at(0).m, 1);
    profiled = p.devices[0].samples[0].block_bwd_s;
  });
  EXPECT_TRUE(std::isfinite(profiled) && profiled > 0) << profiled;

  tools::BenchOptions b;
  b.devices = {"cpu"};
  b.model = model;
  b.seq = T;
  b.batch = 1;
  b.dtype = DType::f32;
  b.filters = {"block"};
  b.repeat = 2;
  b.progress = false;
  const nlohmann::json run = tools::run_bench(b);
  double flops = 0, summed = 0;
  for (const nlohmann::json& k : run.at("devices").at(0).at("kernels")) {
    EXPECT_EQ(k.at("group"), "block") << k.dump();
    flops += k.at("per_block").get<int>() * k.at("flops").get<double>();
    summed += k.at("per_block").get<int>() * k.at("median_s").get<double>();
  }
  // One block's forward FLOPs per token, as the cost model counts them: two layers' less one's.
  GPTConfig one = model, two = model;
  one.L = 1;
  two.L = 2;
  const double model_flops = 3.0 * (two.forward_flops_per_token(T) - one.forward_flops_per_token(T)) * T;
  EXPECT_GE(flops, model_flops) << "the bench's block kernels count " << flops << " FLOPs, the model " << model_flops;
  EXPECT_LE(flops, 1.25 * model_flops) << "the bench's block kernels count " << flops << " FLOPs, the model "
                                       << model_flops;
  std::printf("one gpt-micro block (T 256, B 1, fp32, 1 thread): %.3g FLOPs in the bench's kernels, %.3g in the "
              "model (%.3fx); profiler %.2f ms, bench kernel sum %.2f ms (not compared: load-dependent)\n",
              flops, model_flops, flops / model_flops, profiled * 1e3, summed * 1e3);
}

// The CUDA path where a GPU can be used (on the emulated GPU build: always): two devices of
// one GPU, the second emulated 2x slower, a few roles; every kernel and collective measured,
// the datasheet found, and the emulated GPU's figures marked as such.
TEST(BenchProfile, CudaDevicesWhereAGpuIsUsable) {
  std::string why;
  if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  tools::BenchOptions b;
  b.devices = {"cuda:0", "cuda:0:slow=2"};
  b.model = gpt_preset("gpt-nano");
  b.seq = 32;
  b.batch = 2;
  b.dtype = DType::bf16;
  b.filters = {"qkv", "attn", "ln", "gather"};
  b.repeat = 2;
  b.progress = false;
  const nlohmann::json run = tools::run_bench(b);
  ASSERT_EQ(run.at("devices").size(), 2u);
  for (const nlohmann::json& d : run["devices"]) {
#ifdef GPUMIX_CUDA_EMULATOR
    EXPECT_TRUE(d.at("emulated_gpu").get<bool>());
#else
    EXPECT_FALSE(d.at("emulated_gpu").get<bool>());
#endif
    EXPECT_GT(d.at("roofs").at("peak_flops").get<double>(), 0);
    EXPECT_EQ(d.at("kernels").size(), 10u) << d.dump(1);  // ln 2, qkv 3, attn 2, attn_proj 3
    for (const nlohmann::json& k : d.at("kernels")) EXPECT_GT(k.at("median_s").get<double>(), 0) << k.dump();
  }
  EXPECT_EQ(run["devices"][1].at("slowdown").get<double>(), 2.0);
  ASSERT_EQ(run.at("collectives").size(), 2u);  // the block's and the embedding's gathers
  for (const nlohmann::json& k : run["collectives"]) EXPECT_GT(k.at("median_s").get<double>(), 0) << k.dump();
}

}  // namespace
