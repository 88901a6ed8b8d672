// Emulated slowdown: an op on a device with slowdown f takes f x its own time (it waits after
// it runs). A functional check with loose bounds, not a benchmark.
#include <gtest/gtest.h>

#include <chrono>

#include "core/ops.h"
#include "test_util.h"

namespace gpumix {
namespace {

DeviceProps emulated(double slowdown) {
  DeviceProps p;
  p.name = "cpu (emulated)";
  p.capacity = 1ll << 30;
  p.slowdown = slowdown;
  p.emulated = true;
  return p;
}

// A GEMM lasting a millisecond or more on one device.
struct Gemm {
  explicit Gemm(Device dev)
      : a(Tensor::empty({kN, kN}, DType::f32, dev)), b(Tensor::empty({kN, kN}, DType::f32, dev)),
        c(Tensor::zeros({kN, kN}, DType::f32, dev)) {
    ops::uniform_(a, 1, 0, -1.0f, 1.0f);
    ops::uniform_(b, 2, 0, -1.0f, 1.0f);
  }
  // Time of kOps ops in a row, right after another on the same device, so that the worker
  // threads are awake (after the slow device's waits they would have gone to sleep). A
  // block, not one op: the slow device's waits even out from op to op, and one that
  // overslept (by milliseconds, on a loaded machine) leaves the next op up to 2 ms of
  // credit (core/ops.cpp), so a single op can take as little as its own time; a block takes
  // at least slowdown x its ops' own time - 2 ms.
  double seconds() {
    ops::gemm(c, a, b, false, true);
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kOps; ++k) ops::gemm(c, a, b, false, true);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static constexpr int kN = 512, kOps = 5;
  Tensor a, b, c;
};

TEST(Emulation, SlowdownMakesOpsSlower) {
  const Device fast = Device::cpu(300), slow = Device::cpu(301);
  configure_device(fast, emulated(1));
  configure_device(slow, emulated(3));
  Gemm on_fast(fast), on_slow(slow);
  on_fast.seconds();  // warm-up: BLAS threads, pools
  // Interleaved runs, the fastest of each: a busy machine slows both alike. The slow
  // device's ops wait 2x their own time after them, so the expected ratio is 3 (at least
  // 3 - 2 ms / the block's time).
  double t_fast = 1e9, t_slow = 1e9;
  for (int r = 0; r < 10; ++r) {
    t_fast = std::min(t_fast, on_fast.seconds());
    t_slow = std::min(t_slow, on_slow.seconds());
  }
  EXPECT_GE(t_slow, 1.5 * t_fast) << "fast " << t_fast * 1e3 << " ms, slow " << t_slow * 1e3
                                  << " ms";
  EXPECT_GT(t_fast, 1e-3 * Gemm::kOps) << "the op is too short to measure a slowdown";
  // The slowdown changes time, never values.
  EXPECT_TRUE(test::bitwise_equal("gemm on the slow device", on_slow.c.to_vector(),
                                  on_fast.c.to_vector()));
}

}  // namespace
}  // namespace gpumix
