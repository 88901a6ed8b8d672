// gpumix selfcheck: prints the devices this process can use (every GPU with its summary)
// and checks, on each, that a small computation through the whole stack (ops, autograd,
// kernels) gives the right gradients, in the device's default compute dtype. Quick: meant as the first thing a user runs after building.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <thread>

#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/rng.h"
#include "dist/plan/compute_dtype.h"
#include "tools/command.h"
#ifdef GPUMIX_CORE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace {

using namespace gpumix;

// In the device's default compute dtype (bf16 on a GPU: the checker's bf16 mode, with the
// bf16 roundings of the path in its allowance).
bool check_device(Device device) {
  // A residual MLP-like chain: layernorm -> linear -> gelu -> linear + x.
  const int N = 6, C = 8;
  const DType dtype = dist::compute_dtype_on(device);
  auto value = [&](Shape shape, const char* name, float scale) {
    Tensor t = Tensor::empty(shape, DType::f32, device);
    ops::normal_(t, rng_key(7, name), 0, 0.0f, scale);
    return dtype == DType::f32 ? t : t.to(dtype);
  };
  std::vector<Var> inputs = {Var(value({N, C}, "x", 1.0f), true, "x"),
                             Var::parameter(value({C}, "ln.w", 1.0f), "ln.w"),
                             Var::parameter(value({C}, "ln.b", 0.1f), "ln.b"),
                             Var::parameter(value({C, C}, "fc.w", 0.3f), "fc.w"),
                             Var::parameter(value({C}, "fc.b", 0.1f), "fc.b")};
  auto f = [](const std::vector<Var>& v) {
    Var h = layernorm(v[0], v[1], v[2]);
    h = gelu(linear(h, v[3], v[4]));
    return add(linear(h, v[3], Var()), v[0]);
  };
  GradCheckOptions options;
  options.bf16_roundings = 2 * 5;  // 2 per op (its output and its input gradient), 5 ops
  const GradCheckResult r = check_gradients(f, inputs, options);
  std::printf("  %-8s gradient check in %s %s (worst error %.2f of its allowance)\n", device.str().c_str(),
              dtype_name(dtype), r.ok ? "passed" : "FAILED", r.worst_excess);
  if (!r.ok) std::printf("%s", r.report.c_str());
  return r.ok;
}

// "NVIDIA H200 (cc 9.0, 132 SMs, 139.8 GiB, L2 60 MiB)".
std::string gpu_summary(int ordinal) {
#ifdef GPUMIX_CORE_CUDA
  return kernels::cuda::cuda_device_summary(ordinal);
#else
  return device_props(Device::cuda(ordinal)).name;
#endif
}

int cmd_selfcheck(int argc, char** argv) {
  CLI::App app{"Print the devices found and check each with a small gradient test"};
  CLI11_PARSE(app, argc, argv);

  std::string why_no_cuda;
  const std::vector<Device> devices = available_devices(&why_no_cuda);
  std::printf("GPUMix self-check\n\ndevices:\n");
  for (Device d : devices) {
    const DeviceProps p = device_props(d);
    if (d.is_cpu())
      std::printf("  %-8s %s, %u hardware threads, %d OpenMP threads, %s memory\n",
                  d.str().c_str(), p.name.c_str(), std::thread::hardware_concurrency(),
                  omp_get_max_threads(), format_bytes(p.capacity).c_str());
    else
      std::printf("  %-8s %s, %s free\n", d.str().c_str(), gpu_summary(d.index).c_str(),
                  format_bytes(p.capacity).c_str());
  }
  if (devices.size() == 1) std::printf("  (no CUDA GPU: %s)\n", why_no_cuda.c_str());

  std::printf("\nchecks:\n");
  bool ok = true;
  for (Device d : devices) ok = check_device(d) && ok;
  std::printf("\n%s\n", ok ? "self-check passed" : "self-check FAILED");
  return ok ? 0 : 1;
}

}  // namespace

GPUMIX_COMMAND("selfcheck", "print the devices found and check each one", cmd_selfcheck);
