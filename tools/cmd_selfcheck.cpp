// gpumix selfcheck: prints the devices this process can use and checks, on each, that a
// small computation through the whole stack (ops, autograd, kernels) gives the right
// gradients. Quick: meant as the first thing a user runs after building.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <thread>

#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "core/ops.h"
#include "core/rng.h"
#include "tools/command.h"

namespace {

using namespace gpumix;

bool check_device(Device device) {
  // A residual MLP-like chain: layernorm -> linear -> gelu -> linear + x.
  const int N = 6, C = 8;
  auto param = [&](Shape shape, const char* name, float scale) {
    Tensor t = Tensor::empty(shape, DType::f32, device);
    ops::normal_(t, rng_key(7, name), 0, 0.0f, scale);
    return Var(t, true, name);
  };
  std::vector<Var> inputs = {param({N, C}, "x", 1.0f), param({C}, "ln.w", 1.0f),
                             param({C}, "ln.b", 0.1f), param({C, C}, "fc.w", 0.3f),
                             param({C}, "fc.b", 0.1f)};
  auto f = [](const std::vector<Var>& v) {
    Var h = layernorm(v[0], v[1], v[2]);
    h = gelu(linear(h, v[3], v[4]));
    return add(linear(h, v[3], Var()), v[0]);
  };
  const GradCheckResult r = check_gradients(f, inputs);
  std::printf("  %-8s gradient check %s (worst error %.2f of its allowance)\n", device.str().c_str(),
              r.ok ? "passed" : "FAILED", r.worst_excess);
  if (!r.ok) std::printf("%s", r.report.c_str());
  return r.ok;
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
      std::printf("  %-8s %s, %s memory\n", d.str().c_str(), p.name.c_str(),
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
