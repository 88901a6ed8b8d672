// Emulated slowdown: an op on a device with slowdown f takes f x its own time (it waits after
// it runs). Its time is measured in bench/core/bench_slowdown.cpp; here, its values.
#include <gtest/gtest.h>

#include <omp.h>
#include <time.h>

#include <chrono>
#include <cstdio>

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

// The calling thread's CPU time, in seconds.
double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// A block of GEMMs lasting milliseconds on one device.
struct Gemm {
  explicit Gemm(Device dev)
      : a(Tensor::empty({kN, kN}, DType::f32, dev)), b(Tensor::empty({kN, kN}, DType::f32, dev)),
        c(Tensor::zeros({kN, kN}, DType::f32, dev)) {
    ops::uniform_(a, 1, 0, -1.0f, 1.0f);
    ops::uniform_(b, 2, 0, -1.0f, 1.0f);
  }
  struct Times {
    double wall = 0, cpu = 0;  // seconds
  };
  // Wall and CPU time of kOps ops in a row, right after another on the same device. A
  // block, not one op: the slow device's waits even out from op to op, and one that
  // overslept leaves the next op up to 2 ms of credit (core/ops.cpp), so a single op can
  // take as little as its own time; a block takes at least slowdown x its ops' own time
  // - 2 ms.
  Times run() {
    ops::gemm(c, a, b, false, true);
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_seconds();
    for (int k = 0; k < kOps; ++k) ops::gemm(c, a, b, false, true);
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            thread_cpu_seconds() - cpu0};
  }
  static constexpr int kN = 512, kOps = 5;
  Tensor a, b, c;
};

TEST(Emulation, SlowdownChangesTimeNeverValues) {
  // How much longer a slow device's ops take is measured in bench/core/bench_slowdown.cpp,
  // not bounded here: under load an op's wait for a core counts toward its slowdown by
  // design, so no bound on its wall time holds at every load. What holds at any load: the
  // slowdown changes time, never values.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Device fast = Device::cpu(300), slow = Device::cpu(301);
  configure_device(fast, emulated(1));
  configure_device(slow, emulated(3));
  Gemm on_fast(fast), on_slow(slow);
  for (int r = 0; r < 2; ++r) {
    const Gemm::Times f = on_fast.run(), s = on_slow.run();
    if (r == 0) std::printf("fast block %.2f ms wall, %.2f ms CPU; slow %.2f ms wall, %.2f ms CPU\n",
                            f.wall * 1e3, f.cpu * 1e3, s.wall * 1e3, s.cpu * 1e3);
  }
  omp_set_num_threads(threads);
  EXPECT_TRUE(test::bitwise_equal("gemm on the slow device", on_slow.c.to_vector(),
                                  on_fast.c.to_vector()));
}

}  // namespace
}  // namespace gpumix
