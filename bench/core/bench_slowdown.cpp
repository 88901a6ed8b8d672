// The emulated slowdown (core/slowdown.h) measured: a block of GEMMs on one OpenMP thread, on
// a device of slowdown 1 and one of slowdown 3, side by side. It reports each block's wall
// time per op and its ratio to the block's own CPU time (wall_per_cpu: ~1 for slowdown 1,
// ~3 for slowdown 3 on a quiet machine). On a loaded machine an op's wait for a core counts
// toward its slowdown by design, so the ratio says nothing there: run it quiet. (This was
// a test's bound until it failed under load; timing belongs here.)
#include <benchmark/benchmark.h>

#include <omp.h>
#include <time.h>

#include <chrono>

#include "core/ops.h"

namespace gpumix {
namespace {

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void bm_slowdown(benchmark::State& st) {
  const double slowdown = (double)st.range(0);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);  // an op's own time is then its CPU time (core/slowdown.h)
  const Device dev = Device::cpu(400 + (int)st.range(0));
  DeviceProps props;
  props.name = "cpu (emulated)";
  props.capacity = 1ll << 30;
  props.slowdown = slowdown;
  props.emulated = true;
  configure_device(dev, props);
  constexpr int kN = 512;
  Tensor a = Tensor::empty({kN, kN}, DType::f32, dev), b = Tensor::empty({kN, kN}, DType::f32, dev),
         c = Tensor::zeros({kN, kN}, DType::f32, dev);
  ops::uniform_(a, 1, 0, -1.0f, 1.0f);
  ops::uniform_(b, 2, 0, -1.0f, 1.0f);
  ops::gemm(c, a, b, false, true);  // warm-up: pools, primitives
  double wall = 0, cpu = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_seconds();
    ops::gemm(c, a, b, false, true);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu += thread_cpu_seconds() - cpu0;
  }
  omp_set_num_threads(threads);
  st.counters["wall_per_cpu"] = wall / cpu;
}
BENCHMARK(bm_slowdown)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace
}  // namespace gpumix

BENCHMARK_MAIN();
