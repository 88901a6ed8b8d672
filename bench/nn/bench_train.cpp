// End-to-end training throughput of GPUMix on one rank: the step of `gpumix train`
// (dist/engine/whole_model_engine.cpp + the step loop of dist/engine/trainer.cpp) on random tokens, without data
// loading, evaluation or logging:
//
//   zero_grad; loss = GPT::loss(tokens, targets, 1 / (B T)); backward(loss);
//   norm = sqrt(sum_squares(grads)); clip to --clip; AdamW over the flat buffer (in bf16
//   also rewriting the model's bf16 compute copy).
//
// Prints ms/step and tokens/s for each timed step, their medians, the model FLOPs
// utilisation (MFU), the allocator's peak bytes and its system allocations per
// steady-state step (should be 0: the caching pool serves every tensor of a step after the
// first).
//
// --device cuda:N runs the step on GPU N (bf16: the CUDA backend's compute dtype). Each
// step is timed on the host clock from its start to a device synchronise at its end, so
// a step's time includes all of its GPU work; the median is over the timed steps after
// the warm-up. MFU is against the datasheet dense bf16 peak of the device found
// (dist/plan/device_catalog.cpp; the line "MFU basis" names it), or --peak-tflops.
//
//   bench_train --L 4 --NH 4 --C 256 --T 256 --V 8192 --B 8 --threads 2 --steps 10
//   bench_train --L 12 --NH 12 --C 768 --T 1024 --V 50257 --B 16 --device cuda:0 --dtype bf16
#include <omp.h>

#include <algorithm>
#include <cctype>
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
#include "core/runtime.h"
#include "core/stream.h"
#include "dist/plan/device_catalog.h"
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
  std::string dtype;  // the compute dtype, fp32 or bf16 (issue 12); empty: fp32 on cpu, bf16 on cuda
  std::string device = "cpu";  // cpu or cuda:N
  double peak_tflops = 0;      // 0: the datasheet peak of the device, where known
};

void usage() {
  std::printf(
      "bench_train: GPUMix one-rank training step (forward, backward, clip, AdamW) on random tokens\n"
      "  --L N --NH N --C N --T N --V N --B N   model and batch shape (default 4 4 256 256 8192 8)\n"
      "  --threads K    OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
      "  --steps N      timed steps (default 10)   --warmup N  untimed steps first (default 2)\n"
      "  --dtype fp32|bf16   compute dtype (default fp32 on cpu, bf16 on cuda; bf16: fp32 master\n"
      "                      weights, bf16 compute)\n"
      "  --device cpu|cuda:N  where the step runs (default cpu; cuda computes in bf16)\n"
      "  --peak-tflops X      the peak for MFU (default: the device's datasheet dense peak)\n"
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
    else if (f == "--device") a.device = next();
    else if (f == "--peak-tflops") a.peak_tflops = std::strtod(next(), nullptr);
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

// "cpu" (or "cpu:0") or "cuda:N", N a GPU this process sees; otherwise an Error that says
// what was asked, what exists and the fix.
Device parse_device(const std::string& text) {
  if (text == "cpu" || text == "cpu:0") return Device::cpu();
  const std::string prefix = "cuda:";
  const std::string number = text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : "";
  GPUMIX_CHECK_INPUT(!number.empty() && number.find_first_not_of("0123456789") == std::string::npos,
                     "bench_train: --device '", text, "' is not cpu or cuda:N (e.g. cuda:0)");
  const int index = std::atoi(number.c_str());
  std::string why;
  const int count = cuda_device_count(&why);
  GPUMIX_CHECK_INPUT(index < count, "bench_train: --device ", text, ": no CUDA device ", index, " (",
                     count, " found", count == 0 ? ": " + why : std::string(),
                     "); run on a machine with that GPU, or use --device cpu");
  return Device::cuda(index);
}

// Model FLOPs per token of a training step, PaLM's convention as in bench/nn/compare.sh:
// 6 (12 L C^2 + V C) for the weights (the tied head included) + 12 L C T for attention
// (the causal mask not discounted).
double flops_per_token(const Args& a) {
  return 6.0 * (12.0 * a.L * (double)a.C * a.C + (double)a.V * a.C) + 12.0 * a.L * (double)a.C * a.T;
}

// The dense 16-bit peak of a GPU, TFLOP/s, from the datasheet catalog of the simulator:
// the longest catalog name whose model (the part before '-', e.g. "A100" of "A100-80GB")
// appears in the device's name, spaces ignored ("NVIDIA H200" -> H200, "NVIDIA GeForce RTX
// 3090" -> RTX3090). 0 for a GPU the catalog lacks, and for the PCIe and NVL parts of the
// H100, H200 and A100, whose catalog figures are the SXM parts'. `which` gets the entry used.
double datasheet_peak_tflops(const std::string& device_name, std::string* which) {
  std::string name;
  for (char c : device_name)
    if (c != ' ') name += (char)std::toupper((unsigned char)c);
  const bool not_sxm = name.find("PCIE") != std::string::npos || name.find("NVL") != std::string::npos;
  const dist::DeviceSpec* best = nullptr;
  size_t best_len = 0;
  for (const dist::DeviceSpec& d : dist::device_catalog()) {
    if (d.kind != "gpu") continue;
    std::string model = d.name.substr(0, d.name.find('-'));
    for (char& c : model) c = (char)std::toupper((unsigned char)c);
    if (model.size() > best_len && name.find(model) != std::string::npos) {
      best = &d;
      best_len = model.size();
    }
  }
  if (!best) return 0;
  const std::string model = best->name.substr(0, best->name.find('-'));
  if (not_sxm && (model == "H100" || model == "H200" || model == "A100")) return 0;
  *which = best->name;
  return best->peak_tflops;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.threads > 0) omp_set_num_threads(a.threads);
  DType dtype;
  Device device;
  try {
    device = parse_device(a.device);
    if (a.dtype.empty()) a.dtype = device.is_cuda() ? "bf16" : "fp32";
    dtype = compute_dtype_from_name(a.dtype, "bench_train: --dtype");
    check_backend_supports(device, dtype, "bench_train: --dtype");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const std::string device_name = device_props(device).name;
  std::string peak_source = "--peak-tflops";
  double peak_tflops = a.peak_tflops;
  if (peak_tflops <= 0 && device.is_cuda()) {
    std::string entry;
    peak_tflops = datasheet_peak_tflops(device_name, &entry);
    peak_source = "datasheet dense bf16 peak of " + entry + " (dist/plan/device_catalog.cpp)";
  }
  // Printed before the model is built, so that a failed run still gives the basis on
  // which bench/gpu/check.sh states PyTorch's MFU.
  std::printf("MFU basis: %.1f MFLOP/token (6 (12 L C^2 + V C) + 12 L C T), device %s (%s), ",
              flops_per_token(a) / 1e6, device.str().c_str(), device_name.c_str());
  if (peak_tflops > 0)
    std::printf("peak %.1f TFLOP/s: %s\n", peak_tflops, peak_source.c_str());
  else
    std::printf("no peak known (%s): MFU n/a; give --peak-tflops\n",
                device.is_cuda() ? "dist/plan/device_catalog.cpp has no such GPU, or only its SXM part"
                                 : "a CPU has no datasheet bf16 peak; bench/nn/compare.sh measures one");
  std::fflush(stdout);

  GPTConfig config;
  config.name = "custom";
  config.L = a.L;
  config.NH = a.NH;
  config.C = a.C;
  config.V = a.V;
  config.T = a.T;
  GPT model(config, device, a.seed, dtype);
  AdamWConfig adam;  // betas 0.9, 0.95, eps 1e-8, as gpumix train
  adam.lr = a.lr;
  adam.weight_decay = a.weight_decay;
  AdamW opt(model.layout(), 0, model.num_params(), device, adam);

  // Random tokens, fixed for the run and copied to the device once (the same batch every
  // step: the data does not change the cost of a step).
  std::mt19937 gen((uint32_t)a.seed);
  std::uniform_int_distribution<int32_t> pick(0, a.V - 1);
  std::vector<int32_t> host_tokens((size_t)a.B * a.T), host_targets((size_t)a.B * a.T);
  for (size_t i = 0; i < host_tokens.size(); ++i) {
    host_tokens[i] = pick(gen);
    host_targets[i] = pick(gen);
  }
  const Tensor tokens = Tensor::from_vector(host_tokens, {a.B, a.T}).to(device);    // (B, T)
  const Tensor targets = Tensor::from_vector(host_targets, {a.B, a.T}).to(device);  // (B, T)
  const int64_t tokens_per_step = (int64_t)a.B * a.T;
  const float scale = 1.0f / (float)tokens_per_step;

  std::printf("bench_train: L=%d NH=%d C=%d T=%d V=%d B=%d, %.2fM parameters, %s, %d threads, "
              "%d warmup + %d timed steps%s, dtype %s\n",
              a.L, a.NH, a.C, a.T, a.V, a.B, model.num_params() / 1e6, device.str().c_str(),
              omp_get_max_threads(), a.warmup, a.steps, a.recompute ? ", recompute" : "",
              a.dtype.c_str());

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
    // The norm is read first: on a GPU that read waits for the backward, after which the
    // loss is ready too.
    const double norm = std::sqrt(ops::sum_squares(model.grads()));
    const double loss = l.value().item();
    const float clip = clip_factor(norm, a.clip);
    if (clip < 1) ops::scale(model.grads(), model.grads(), clip);
    opt.step(model.params(), model.grads(), a.lr, step, model.compute_params());
    synchronize(device);  // the step ends when its GPU work does (a no-op on the CPU)
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
  // fp32 master weights, gradients and two moments, plus the compute copy in any other dtype.
  const int64_t state_bytes = model.num_params() * (16 + (dtype == DType::f32 ? 0 : (int64_t)dtype_size(dtype)));
  std::printf("peak %.1f MiB (allocator, timed steps; parameters + grads + AdamW %.1f MiB), "
              "system allocs per timed step %.2f\n",
              mib(st.peak), mib(state_bytes), allocs_per_step);
  const double rate = median(rates);
  const double mfu = peak_tflops > 0 ? rate * flops_per_token(a) / (peak_tflops * 1e12) : 0;
  if (mfu > 0)
    std::printf("MFU %.1f%% (%.1f TFLOP/s of model FLOPs against a %.1f TFLOP/s peak)\n", 100 * mfu,
                rate * flops_per_token(a) / 1e12, peak_tflops);
  char mfu_pct[32] = "n/a";
  if (mfu > 0) std::snprintf(mfu_pct, sizeof mfu_pct, "%.2f", 100 * mfu);
  std::printf("RESULT gpumix-%s ms_per_step %.2f tokens_per_s %.1f peak_mib %.1f threads %d "
              "device %s mfu_pct %s\n",
              a.dtype.c_str(), median(ms), rate, mib(st.peak), omp_get_max_threads(),
              device.str().c_str(), mfu_pct);
  return 0;
}
