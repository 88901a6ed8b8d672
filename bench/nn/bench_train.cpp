// End-to-end training throughput of GPUMix on one rank: the step of `gpumix train`
// (dist/engine/whole_model_engine.cpp + the step loop of dist/engine/trainer.cpp) on random tokens, without data
// loading, evaluation or logging:
//
//   zero_grad; loss = GPT::loss(tokens, targets, 1 / (B T)); backward(loss);
//   norm = sqrt(sum_squares(grads)); clip to --clip; AdamW over the flat buffer (in bf16
//   also rewriting the model's bf16 compute copy).
//
// Prints ms/step and tokens/s for each timed step, their medians, the allocator's peak
// bytes and its system allocations per steady-state step (should be 0: the caching pool
// serves every tensor of a step after the first).
//
//   bench_train --L 4 --NH 4 --C 256 --T 256 --V 8192 --B 8 --threads 2 --steps 10
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/ops.h"
#include "core/precision.h"
#include "nn/gpt.h"
#include "nn/optim.h"

using namespace gpumix;

namespace {

struct Args {
  int L = 4, NH = 4, C = 256, T = 256, V = 8192, B = 8;
  int threads = 0;  // 0: OpenMP's default
  int steps = 10, warmup = 2;
  uint64_t seed = 1337;
  float lr = 1e-3f, weight_decay = 0.1f, clip = 1.0f;
  bool recompute = false, quiet = false;
  std::string dtype = "fp32";  // the compute dtype: fp32 or bf16 (issue 12)
};

void usage() {
  std::printf(
      "bench_train: GPUMix one-rank training step (forward, backward, clip, AdamW) on random tokens\n"
      "  --L N --NH N --C N --T N --V N --B N   model and batch shape (default 4 4 256 256 8192 8)\n"
      "  --threads K    OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
      "  --steps N      timed steps (default 10)   --warmup N  untimed steps first (default 2)\n"
      "  --dtype fp32|bf16   compute dtype (default fp32; bf16: fp32 master weights, bf16 compute)\n"
      "  --lr X --wd X --clip X --seed S --recompute --quiet\n");
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_train: %s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--L") a.L = std::atoi(next());
    else if (f == "--NH") a.NH = std::atoi(next());
    else if (f == "--C") a.C = std::atoi(next());
    else if (f == "--T") a.T = std::atoi(next());
    else if (f == "--V") a.V = std::atoi(next());
    else if (f == "--B") a.B = std::atoi(next());
    else if (f == "--threads") a.threads = std::atoi(next());
    else if (f == "--steps") a.steps = std::atoi(next());
    else if (f == "--warmup") a.warmup = std::atoi(next());
    else if (f == "--seed") a.seed = std::strtoull(next(), nullptr, 10);
    else if (f == "--lr") a.lr = std::strtof(next(), nullptr);
    else if (f == "--wd") a.weight_decay = std::strtof(next(), nullptr);
    else if (f == "--clip") a.clip = std::strtof(next(), nullptr);
    else if (f == "--dtype") a.dtype = next();
    else if (f == "--recompute") a.recompute = true;
    else if (f == "--quiet") a.quiet = true;
    else if (f == "--help" || f == "-h") { usage(); std::exit(0); }
    else {
      std::fprintf(stderr, "bench_train: unknown flag %s\n", f.c_str());
      usage();
      std::exit(2);
    }
  }
  if (a.steps < 1 || a.warmup < 0) {
    std::fprintf(stderr, "bench_train: --steps must be >= 1 and --warmup >= 0\n");
    std::exit(2);
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.threads > 0) omp_set_num_threads(a.threads);
  DType dtype;
  try {
    dtype = compute_dtype_from_name(a.dtype, "bench_train: --dtype");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  GPTConfig config;
  config.name = "custom";
  config.L = a.L;
  config.NH = a.NH;
  config.C = a.C;
  config.V = a.V;
  config.T = a.T;
  const Device device = Device::cpu();
  GPT model(config, device, a.seed, dtype);
  AdamWConfig adam;  // betas 0.9, 0.95, eps 1e-8, as gpumix train
  adam.lr = a.lr;
  adam.weight_decay = a.weight_decay;
  AdamW opt(model.layout(), 0, model.num_params(), device, adam);

  // Random tokens, fixed for the run (the same batch every step: the data does not change
  // the cost of a step).
  std::mt19937 gen((uint32_t)a.seed);
  std::uniform_int_distribution<int32_t> pick(0, a.V - 1);
  Tensor tokens = Tensor::empty({a.B, a.T}, DType::i32, device);
  Tensor targets = Tensor::empty({a.B, a.T}, DType::i32, device);
  for (int64_t i = 0; i < (int64_t)a.B * a.T; ++i) {
    tokens.data<int32_t>()[i] = pick(gen);
    targets.data<int32_t>()[i] = pick(gen);
  }
  const int64_t tokens_per_step = (int64_t)a.B * a.T;
  const float scale = 1.0f / (float)tokens_per_step;

  std::printf("bench_train: L=%d NH=%d C=%d T=%d V=%d B=%d, %.2fM parameters, %d threads, "
              "%d warmup + %d timed steps%s, dtype %s\n",
              a.L, a.NH, a.C, a.T, a.V, a.B, model.num_params() / 1e6, omp_get_max_threads(),
              a.warmup, a.steps, a.recompute ? ", recompute" : "", a.dtype.c_str());

  Allocator& alloc = allocator(device);
  std::vector<double> ms, rates;
  int64_t allocs_before_timed = 0;
  double last_loss = 0, last_norm = 0;
  for (int step = 1; step <= a.warmup + a.steps; ++step) {
    if (step == a.warmup + 1) {
      alloc.reset_peak();
      allocs_before_timed = alloc.stats().system_allocs;
    }
    const auto t0 = std::chrono::steady_clock::now();
    // The one-rank step of dist/engine/trainer.cpp (WholeModelEngine::forward_backward, then
    // the global-norm clip and the optimizer step of the step loop).
    model.zero_grad();
    Var l = model.loss(tokens, targets, scale, a.recompute);
    backward(l);
    const double loss = l.value().item();
    const double norm = std::sqrt(ops::sum_squares(model.grads()));
    const float clip = clip_factor(norm, a.clip);
    if (clip < 1) ops::scale(model.grads(), model.grads(), clip);
    opt.step(model.params(), model.grads(), a.lr, step, model.compute_params());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_loss = loss;
    last_norm = norm;
    if (step > a.warmup) {
      ms.push_back(s * 1e3);
      rates.push_back(tokens_per_step / s);
    }
    if (!a.quiet)
      std::printf("step %d%s | loss %.4f | norm %.3f | %.1f ms | %.0f tok/s\n", step,
                  step <= a.warmup ? " (warmup)" : "", loss, norm, s * 1e3, tokens_per_step / s);
  }
  const AllocatorStats st = alloc.stats();
  const double allocs_per_step = (double)(st.system_allocs - allocs_before_timed) / a.steps;
  std::printf("loss %.4f norm %.3f (last step)\n", last_loss, last_norm);
  // fp32 master, gradients and moments; in bf16 also the compute copy.
  const int64_t state_bytes = model.num_params() * (dtype == DType::bf16 ? 18 : 16);
  std::printf("peak %.1f MiB (allocator, timed steps; parameters + grads + AdamW %.1f MiB), "
              "system allocs per timed step %.2f\n",
              mib(st.peak), mib(state_bytes), allocs_per_step);
  std::printf("RESULT gpumix-%s ms_per_step %.2f tokens_per_s %.1f peak_mib %.1f threads %d\n",
              a.dtype.c_str(), median(ms), median(rates), mib(st.peak), omp_get_max_threads());
  return 0;
}
