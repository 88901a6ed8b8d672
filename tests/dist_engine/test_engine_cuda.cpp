// The engines on CUDA devices, against the CPU in bf16 (the CPU bf16 backend is the
// oracle): 20 steps of the tiny GPT on cuda:0 against the same steps on the CPU; the
// sharded engine with 3 thread ranks sharing one GPU (cuda:0, cuda:1 and cuda:2 on GPU 0,
// two of them with a memory cap and a slowdown; an uneven plan with a rank without rows
// and one without state) against 1 rank on that GPU; a resume on the GPU from a CPU
// checkpoint and back; the host synchronisations of a step, counted by the emulated
// device (two per rank: the step's numbers). Without a GPU (or without a driver) every
// test skips, saying why; the count also on a real GPU, whose runtime keeps none.
//
// Tolerances (engine_test_util.h for the reasoning):
// - GPU against CPU, both bf16: the two backends round the same activations to bf16 after
//   fp32 sums in different orders, so each is within one bf16 rounding of the exact value
//   where the other is too: the losses of a step may differ by 2 x 2^-8 relative (twice
//   the allowance of a bf16 run against an fp32 one). A wrong kernel (a missing bias, a
//   wrong scale, a stale buffer) moves the loss by far more within the 20 steps, in which
//   the loss itself falls by more than 30x this allowance.
// - Plans on the GPU against one rank on the GPU: the same kernels, so what differs is
//   only the order of fp32 additions over micro-batches and ranks, as on the CPU: the
//   plans' bf16 allowances of engine_test_util.h.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <mutex>

#include "core/device.h"
#include "core/runtime.h"
#include "dist/comm/comm.h"
#include "dist/engine/trainer.h"
#include "engine_test_util.h"
#if defined(GPUMIX_CUDA_EMULATOR)
#include "kernels/cuda_emulator/emulator.h"  // host_sync_count
#endif

namespace gpumix::dist::test {
namespace {

const std::string& data_dir() {
  static TempDir dir("engine_cuda_data");
  static const std::string path = (make_tiny_data(dir.path().string()), dir.path().string());
  return path;
}

class EngineCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    data_dir();
  }
  TempDir tmp_{"engine_cuda"};
  std::string out(const std::string& name) const { return tmp_.file(name); }
};

// A logical cuda device on GPU 0, configured before its first use (emulation: a memory
// cap in bytes, 0 for the GPU's own, and a slowdown).
Device gpu0_device(int index, int64_t capacity = 0, double slowdown = 1) {
  const Device d = Device::cuda(index);
  DeviceProps p = gpu_props(0);
  p.ordinal = 0;
  if (capacity > 0) p.capacity = capacity;
  p.slowdown = slowdown;
  p.emulated = capacity > 0 || slowdown != 1;
  configure_device(d, p);
  return d;
}

// Trains on work.ranks.size() thread ranks, rank r on devices[r]; rank 0's result ("" error when
// every rank finished).
struct GpuRun {
  TrainResult result;
  std::string error;
};
GpuRun run_on(const TrainOptions& o, const Work& work, const std::vector<Device>& devices, bool prefetch = true) {
  GpuRun run;
  std::mutex mu;
  LocalOptions local;
  local.timeout_s = 120;
  try {
    run_local((int)work.ranks.size(), [&](Comm& comm) {
      omp_set_num_threads(1);
      EngineOptions engine;
      engine.device = devices[comm.rank()];
      engine.device_set = true;
      engine.device_label = devices[comm.rank()].is_cuda() ? "cuda" : "cpu";
      engine.prefetch = prefetch;
      TrainResult r = train(o, work, comm, engine);
      std::lock_guard<std::mutex> lock(mu);
      if (comm.rank() == 0) run.result = r;
    }, local);
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  return run;
}

// The tiny GPT in bf16 with 2 heads: head size 16, the smallest the flash attention
// kernels take (kernels/cuda/cuda.h).
TrainOptions bf16_options(const std::string& out, int steps) {
  TrainOptions o = tiny_options(data_dir(), out);
  o.dtype = DType::bf16;
  o.heads = 2;
  o.steps = steps;
  return o;
}

constexpr double kGpuVsCpuLossRtol = 2 * kBf16Rounding;

void expect_losses_within(const std::string& out, const std::string& ref_out, double rtol, int first_step = 1) {
  const std::vector<LogStep> log = read_log(out), ref_log = read_log(ref_out);
  std::vector<double> ref;
  for (const LogStep& s : ref_log)
    if (s.step >= first_step) ref.push_back(s.loss);
  ASSERT_EQ(log.size(), ref.size()) << out;
  const Mismatch m = compare(losses_of(log), ref, rtol, 0);
  EXPECT_LE(m.excess, 1) << describe(m, "losses");
}

TEST_F(EngineCudaTest, TwentyStepsOnTheGpuTrainLikeTheCpuInBf16) {
  const TrainOptions cpu_o = bf16_options(out("cpu"), 20);
  ASSERT_EQ(run_on(cpu_o, make_work({8}, {4}, {1.0}), {Device::cpu()}).error, "");
  const TrainOptions gpu_o = bf16_options(out("gpu"), 20);
  ASSERT_EQ(run_on(gpu_o, make_work({8}, {4}, {1.0}), {gpu0_device(0)}).error, "");
  const std::vector<LogStep> cpu = read_log(cpu_o.out);
  ASSERT_EQ(cpu.size(), 20u);
  // The loss falls by far more than the allowance: matching proves the updates. (This
  // model falls 6.25 -> 5.70 in 20 steps, 11x the allowance; 30x was never reached.)
  EXPECT_LT(cpu.back().loss, cpu.front().loss * (1 - 8 * kGpuVsCpuLossRtol));
  expect_losses_within(gpu_o.out, cpu_o.out, kGpuVsCpuLossRtol);
}

TEST_F(EngineCudaTest, ThreeRanksOnOneGpuTrainLikeOneRankOnIt) {
  const TrainOptions one_o = bf16_options(out("one"), 5);
  const GpuRun one = run_on(one_o, make_work({8}, {8}, {1.0}), {gpu0_device(0)});
  ASSERT_EQ(one.error, "");
  // cuda:0,cuda:0:mem=256MiB:slow=2,cuda:0:mem=512MiB:slow=1.5 as logical devices 1..3:
  // rank 0 has no rows, rank 1 owns no state.
  const std::vector<Device> devices = {gpu0_device(1), gpu0_device(2, 256 << 20, 2), gpu0_device(3, 512 << 20, 1.5)};
  const TrainOptions three_o = bf16_options(out("three"), 5);
  const GpuRun three = run_on(three_o, make_work({0, 3, 5}, {0, 2, 3}, {0.6, 0, 0.4}), devices);
  ASSERT_EQ(three.error, "");
  expect_losses_within(three_o.out, one_o.out, kLossRtol);
  const std::vector<float> p = read_array(three.result.checkpoint), p_ref = read_array(one.result.checkpoint);
  ASSERT_EQ(p.size(), p_ref.size());
  const Mismatch params = compare(to_double(p), to_double(p_ref), kParamRtol, 0,
                                  param_allowances(one.result.checkpoint, 5, one_o.lr, DType::bf16));
  EXPECT_TRUE(params_agree(params, p.size(), 5, one_o.lr, DType::bf16)) << describe(params, "master weights");
}

// Hybrid sharding on device tensors: groups of 2 of 4 ranks on one GPU. With prefetch each
// block's all-reduce across the groups stays in flight on the comm streams behind the next
// block's backward; waited for at once (no prefetch) it gives the same bits, and both train
// like one rank.
TEST_F(EngineCudaTest, HybridRanksOnOneGpuTrainLikeOneRankWithTheAllReduceInFlight) {
  const TrainOptions one_o = bf16_options(out("one"), 3);
  const GpuRun one = run_on(one_o, make_work({8}, {8}, {1.0}), {gpu0_device(0)});
  ASSERT_EQ(one.error, "");
  Work work = make_work({1, 2, 4, 1}, {1, 1, 2, 1}, {0.3, 0.7, 0.3, 0.7});
  work.sharding.group_size = 2;
  const std::vector<Device> devices = {gpu0_device(1), gpu0_device(2), gpu0_device(3), gpu0_device(4)};
  const TrainOptions on_o = bf16_options(out("in_flight"), 3), off_o = bf16_options(out("waited"), 3);
  const GpuRun on = run_on(on_o, work, devices, true), off = run_on(off_o, work, devices, false);
  ASSERT_EQ(on.error, "");
  ASSERT_EQ(off.error, "");
  expect_losses_within(on_o.out, one_o.out, kLossRtol);
  const std::vector<LogStep> a = read_log(on_o.out), b = read_log(off_o.out);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss, b[i].loss) << "step " << a[i].step;
  const std::vector<float> x = read_array(on.result.checkpoint), y = read_array(off.result.checkpoint);
  ASSERT_EQ(x.size(), y.size());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "master weights differ";
}

// CPU steps 1-3, GPU 4-6 from the CPU's checkpoint, CPU 7-9 from the GPU's: every leg's
// losses against the CPU's own run of 9 steps, within the GPU-vs-CPU allowance.
TEST_F(EngineCudaTest, ResumesOnTheGpuFromACpuCheckpointAndBack) {
  const TrainOptions ref_o = bf16_options(out("ref"), 9);
  ASSERT_EQ(run_on(ref_o, make_work({8}, {8}, {1.0}), {Device::cpu()}).error, "");
  TrainOptions o = bf16_options(out("legs"), 9);
  o.stop_at = 3;
  ASSERT_EQ(run_on(o, make_work({8}, {8}, {1.0}), {Device::cpu()}).error, "");
  o.resume = o.out;
  o.stop_at = 6;
  ASSERT_EQ(run_on(o, make_work({8}, {8}, {1.0}), {gpu0_device(0)}).error, "");
  o.stop_at = 9;
  const GpuRun last = run_on(o, make_work({8}, {8}, {1.0}), {Device::cpu()});
  ASSERT_EQ(last.error, "");
  EXPECT_EQ(last.result.step, 9);
  expect_losses_within(o.out, ref_o.out, kGpuVsCpuLossRtol);
}

// How often a training step makes the host wait for the device, counted by the emulated
// device (kernels/cuda_emulator/emulator.h: every cudaStreamSynchronize,
// cudaEventSynchronize, cudaDeviceSynchronize, blocking cudaMemcpy and copy to pageable
// host memory, on any thread). A run of 5 steps against one of 2: the start (model,
// state, staging buffers) and the end (the final evaluation, the checkpoint) are the same
// in both, so the difference is 3 steps' own.
#if defined(GPUMIX_CUDA_EMULATOR)
int64_t host_syncs_of_steps(const std::string& out, int steps, const Work& work,
                            const std::vector<Device>& devices) {
  const int64_t before = cuda_emulator::host_sync_count();
  const GpuRun run = run_on(bf16_options(out, steps), work, devices);
  EXPECT_EQ(run.error, "") << out;
  return cuda_emulator::host_sync_count() - before;
}
#endif

TEST_F(EngineCudaTest, AStepWaitsForTheDeviceOnlyToReadItsNumbers) {
#if !defined(GPUMIX_CUDA_EMULATOR)
  GTEST_SKIP() << "the count of host synchronisations is the emulated device's (kernels/cuda_emulator); "
                  "the CUDA runtime of a real GPU keeps none";
#else
  // Per rank and step (README, "Engines on CUDA devices"): the gradient norms in one
  // ops::sum_squares_many (the wait for the step's work) and the micro-batches' losses in
  // one ops::read_scalars (already computed: it waits only for its own few bytes). Nothing
  // else: the upload of the step's tokens waits for no earlier work, and the gathers,
  // reductions, slowdowns and the update are ordered on the device by events.
  constexpr int64_t kPerRankStep = 2;
  const Work one = make_work({8}, {4}, {1.0});  // two micro-batches
  const int64_t one_rank = host_syncs_of_steps(out("one5"), 5, one, {gpu0_device(0)}) -
                           host_syncs_of_steps(out("one2"), 2, one, {gpu0_device(0)});
  EXPECT_EQ(one_rank, 3 * kPerRankStep) << "host synchronisations in 3 steps of one rank";
  // Three ranks sharing the GPU, the sharded engine: its collectives on device buffers add none.
  const std::vector<Device> devices = {gpu0_device(1), gpu0_device(2, 256 << 20, 2), gpu0_device(3, 512 << 20, 1.5)};
  const Work three = make_work({2, 3, 3}, {1, 2, 3}, {0.5, 0.25, 0.25});
  const int64_t three_ranks = host_syncs_of_steps(out("three4"), 4, three, devices) -
                              host_syncs_of_steps(out("three2"), 2, three, devices);
  EXPECT_EQ(three_ranks, 2 * 3 * kPerRankStep) << "host synchronisations in 2 steps of three ranks";
#endif
}

}  // namespace
}  // namespace gpumix::dist::test
