#include "tools/bench.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>

#include "core/allocator.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/slowdown.h"
#include "core/stream.h"
#include "dist/comm/comm.h"
#include "dist/engine/launch.h"
#include "dist/engine/profiler.h"
#include "dist/plan/device_catalog.h"
#include "nn/model_stages.h"
#include "bench_version.h"

namespace gpumix::tools {

using json = nlohmann::json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds that fn's work takes on `device`: the host clock on a CPU; on a GPU, where fn only
// enqueues, events on the compute stream around it, waited for (as the profiler times), plus
// the emulated slowdown's spin for that work where the device has one (served after the
// events: without it only the next op would pay it; the caller settles what came before).
double time_on(Device device, const std::function<void()>& fn) {
  if (!device.is_cuda()) {
    const double t0 = now_s();
    fn();
    return now_s() - t0;
  }
  Event start, end;
  start.record(device, Stream::compute);
  fn();
  end.record(device, Stream::compute);
  end.synchronize();
  return (start.elapsed_ms(end) + settle_slowdown(device)) * 1e-3;
}

double median_of(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.empty() ? 0 : t[t.size() / 2];
}

using dist::random_tensor;  // the profiler's inputs (dist/engine/profiler.h)
using dist::random_tokens;

// A case allocates its buffers (make) and returns the call that is timed.
using Run = std::function<void()>;
struct Case {
  KernelResult k;
  std::function<Run()> make;
};

// The kernels of one step, in step order: the model family's (the embedding, a block, the
// head: nn/model_stages.h step_kernels), then the step's own over every parameter.
std::vector<Case> step_cases(const GPTConfig& m, int64_t B, int64_t T, DType dt, Device dev, int devices) {
  const int64_t L = m.L;
  const double f4 = 4, e = (double)dtype_size(dt);  // bytes of an fp32 element, of a compute one
  const DType f32 = DType::f32;
  std::vector<Case> cases;
  auto add = [&](std::string role, std::string group, std::string what, int per_block, int outside, double flops,
                 double bytes, std::function<Run()> make) {
    KernelResult k;
    k.role = std::move(role);
    k.group = std::move(group);
    k.what = std::move(what);
    k.per_block = per_block;
    k.per_step = per_block * (int)L + outside;
    k.flops = flops;
    k.bytes = bytes;
    cases.push_back({k, std::move(make)});
  };
  for (StepKernel& k : model_stages(m).step_kernels(m, B, T, dt, dev))
    add(std::move(k.role), std::move(k.group), std::move(k.what), k.per_block, k.outside, k.flops, k.bytes,
        std::move(k.make));

  // Once per step, over every parameter (fp32 master weights, gradients, moments).
  const int64_t P = m.total_params();
  add("grad_zero.params", "step", str("fill ", P, " f32 (zero_grad)"), 0, 1, 0, f4 * P, [=] {
    Tensor g = Tensor::empty({P}, f32, dev);
    return Run([=]() mutable { ops::fill(g, 0.0f); });
  });
  add("grad_norm", "step", str("sum_squares_many over ", m.num_units(), " units, ", P, " f32"), 0, 1, 2.0 * P,
      f4 * P, [=] {
        Tensor g = random_tensor({P}, dev, "bench.g", f32);
        std::vector<Tensor> units;
        int64_t at = 0;
        for (int u = 0; u < m.num_units(); ++u) {
          units.push_back(g.flat_slice(at, m.unit_params(u)));
          at += m.unit_params(u);
        }
        return Run([=] { ops::sum_squares_many(units); });
      });
  const bool copy = dt != DType::f32;
  add("adamw", "step", str("adamw_step ", P, " f32", copy ? " + bf16 copy" : ""), 0, 1, 15.0 * P,
      f4 * 7 * P + (copy ? e * P : 0), [=] {
        Tensor p = random_tensor({P}, dev, "bench.p", f32), g = random_tensor({P}, dev, "bench.g", f32),
               mo = Tensor::zeros({P}, f32, dev), v = Tensor::zeros({P}, f32, dev);
        Tensor c = copy ? Tensor::empty({P}, dt, dev) : Tensor();
        auto step = std::make_shared<int>(0);
        return Run([=]() mutable { ops::adamw_step(p, c, g, mo, v, AdamWConfig{}, ++*step); });
      });
  // The sharded engine (several devices) casts each unit's master slice to the compute copy
  // (dist/engine/sharded_engine.cpp); one device's AdamW writes its copy in the same pass.
  if (copy)
    add("cast", "step", str("convert ", P, " f32 -> ", dtype_name(dt)), 0, devices > 1 ? 1 : 0, 1.0 * P,
        (f4 + e) * P, [=] {
          Tensor p = random_tensor({P}, dev, "bench.p", f32), c = Tensor::empty({P}, dt, dev);
          return Run([=]() mutable { ops::convert(c, p); });
        });
  return cases;
}

// A filter names a role ("qkv.fwd"), a family of roles ("qkv", "grad"), or a group ("block",
// "head", "embed", "step", "comm").
bool role_matches(const std::string& role, const std::string& group, const std::vector<std::string>& filters) {
  if (filters.empty()) return true;
  for (const std::string& f : filters)
    if (role == f || group == f || role.rfind(f + ".", 0) == 0 || role.rfind(f + "_", 0) == 0) return true;
  return false;
}

const std::vector<std::string> kCollectiveRoles = {"gather.block", "reduce_scatter.block", "gather.embed",
                                                   "reduce_scatter.embed"};

// Bytes of the last-level cache (what a flush must overwrite), 32 MiB where unknown.
int64_t cpu_cache_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const long c = std::max(l3, l2);
  return c > 0 ? (int64_t)c : (32 << 20);
}

int64_t free_bytes(Device d) {
  const AllocatorStats s = allocator(d).stats();
  return s.capacity - s.in_use;
}

// The device's roofs: a streaming copy (ops::scale by 1 in fp32 through the same dispatch,
// every core of a CPU) and the library GEMM (ops::gemm) at square sizes in the run's dtype,
// the best of each.
Roofs measure_roofs(Device dev, DType dt, int repeat) {
  Roofs r;
  const bool gpu = dev.is_cuda();
#ifdef GPUMIX_CUDA_EMULATOR
  const bool emulated_gpu = gpu;
#else
  const bool emulated_gpu = false;
#endif
  {
    int64_t bytes = std::min<int64_t>(emulated_gpu ? (32 << 20) : (256 << 20), free_bytes(dev) / 8);
    bytes = std::max<int64_t>(bytes / 4 * 4, 4096);
    Tensor a = Tensor::zeros({bytes / 4}, DType::f32, dev), b = Tensor::empty({bytes / 4}, DType::f32, dev);
    auto run = [&] { ops::scale(b, a, 1.0f); };
    time_on(dev, run);
    double best = 1e300;
    for (int i = 0; i < std::max(3, repeat); ++i) best = std::min(best, time_on(dev, run));
    r.bandwidth_Bps = 2.0 * bytes / best;
  }
  std::vector<int64_t> sizes = gpu ? std::vector<int64_t>{2048, 4096, 8192} : std::vector<int64_t>{1024, 2048};
  if (emulated_gpu) sizes = {128, 256};
  const double e = (double)dtype_size(dt);
  for (int64_t n : sizes) {
    if (3.0 * n * n * e > free_bytes(dev) / 4.0) break;
    Tensor a = random_tensor({n, n}, dev, "bench.a", dt), b = random_tensor({n, n}, dev, "bench.b", dt),
           c = Tensor::empty({n, n}, dt, dev);
    auto run = [&] { ops::gemm(c, a, b, false, false); };
    time_on(dev, run);
    double best = 1e300;
    for (int i = 0; i < std::max(3, repeat); ++i) best = std::min(best, time_on(dev, run));
    const double f = 2.0 * n * n * n / best;
    if (f > r.peak_flops) {
      r.peak_flops = f;
      r.gemm_shape = str(n, "^3");
    }
  }
  GPUMIX_CHECK_INPUT(r.peak_flops > 0, "bench: not even a 128^3 GEMM fits the device's ",
                     format_bytes(free_bytes(dev)), " free; give it more memory");
  return r;
}

// The catalog's entry for a GPU whose name holds it (dist::find_gpu_spec).
void attach_datasheet(Roofs& r, const std::string& name) {
  const dist::DeviceSpec* best = dist::find_gpu_spec(name);
  if (!best) return;
  r.datasheet = best->name;
  r.datasheet_flops = best->peak_tflops * 1e12;
  r.datasheet_Bps = best->memory_bandwidth_GBps * 1e9;
}

json kernel_json(const KernelResult& k) {
  json j = {{"role", k.role},         {"group", k.group},     {"what", k.what},   {"per_block", k.per_block},
            {"per_step", k.per_step}, {"flops", k.flops},     {"bytes", k.bytes}, {"median_s", k.median_s},
            {"min_s", k.min_s},       {"max_s", k.max_s},     {"times_s", k.times_s}};
  if (!k.skipped.empty()) j["skipped"] = k.skipped;
  return j;
}

json roofs_json(const Roofs& r) {
  json j = {{"bandwidth_Bps", r.bandwidth_Bps}, {"peak_flops", r.peak_flops}, {"gemm_shape", r.gemm_shape}};
  if (!r.datasheet.empty())
    j["datasheet"] = {{"name", r.datasheet}, {"peak_flops", r.datasheet_flops}, {"bandwidth_Bps", r.datasheet_Bps}};
  return j;
}

std::string fmt_eta(double s) {
  if (s < 60) return str((int)(s + 0.5), " s");
  return str((int)(s / 60), " min ", (int)s % 60, " s");
}

// Times every case on `dev`: one warm-up, then `repeat` runs, each after a cache flush (a
// fill of twice the last-level cache on a CPU, of 128 MiB on a GPU, whose L2 is smaller), so
// no repeat finds its inputs where the previous one left them.
std::vector<KernelResult> time_cases(std::vector<Case>& cases, Device dev, const Roofs& roofs, int repeat,
                                     bool progress, const std::string& label) {
  const int64_t flush_bytes =
      std::min<int64_t>(dev.is_cuda() ? (128 << 20) : 2 * cpu_cache_bytes(), free_bytes(dev) / 8) / 4 * 4;
  Tensor flush = Tensor::empty({std::max<int64_t>(flush_bytes / 4, 1)}, DType::f32, dev);
  double weight_total = 0, weight_done = 0;
  for (const Case& c : cases) weight_total += roof_seconds(c.k, roofs) + 1e-4;
  const double start = now_s();
  std::vector<KernelResult> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    KernelResult k = cases[i].k;
    if (progress) {
      const double elapsed = now_s() - start;
      const std::string eta =
          weight_done > 0 ? ", ETA " + fmt_eta(elapsed / weight_done * (weight_total - weight_done)) : "";
      std::fprintf(stderr, "bench %s: kernel %zu of %zu, %s%s\n", label.c_str(), i + 1, cases.size(),
                   k.role.c_str(), eta.c_str());
    }
    try {
      Run run = cases[i].make();
      time_on(dev, run);  // warm-up
      for (int r = 0; r < repeat; ++r) {
        ops::fill(flush, (float)r);
        settle_slowdown(dev);  // the flush's emulated slowdown, if any, served before the timing
        k.times_s.push_back(time_on(dev, run));
      }
      k.median_s = median_of(k.times_s);
      k.min_s = *std::min_element(k.times_s.begin(), k.times_s.end());
      k.max_s = *std::max_element(k.times_s.begin(), k.times_s.end());
    } catch (const OutOfMemory& e) {
      k.skipped = str("out of memory: ", e.what());
      k.times_s.clear();
    }
    weight_done += roof_seconds(k, roofs) + 1e-4;
    out.push_back(k);
  }
  return out;
}

// The collectives of the sharded engine among the devices, one rank per device as threads of
// this process (the local backend): a unit's gather in the compute dtype, its gradients'
// reduce-scatter in fp32, even shares. Rates are bus bytes ((n-1)/n of the unit) per second.
std::vector<KernelResult> time_collectives(const std::vector<Device>& devs, const GPTConfig& m, DType dt, int repeat,
                                           const std::vector<std::string>& filters) {
  const int n = (int)devs.size();
  std::vector<KernelResult> result;
  for (const std::string& role : kCollectiveRoles) {
    if (!role_matches(role, "comm", filters)) continue;
    const bool gather = role.rfind("gather", 0) == 0, block = role.find("block") != std::string::npos;
    const int64_t total = m.unit_params(block ? 1 : 0);
    const DType t = gather ? dt : DType::f32;
    KernelResult k;
    k.role = role;
    k.group = "comm";
    k.what = str(gather ? "all_gather_v " : "reduce_scatter_v ", total, " ", dtype_name(t), " among ", n, " ranks");
    k.per_block = block ? 1 : 0;
    k.per_step = block ? m.L : 1;
    k.bytes = (double)(n - 1) / n * total * (double)dtype_size(t);
    std::vector<int64_t> counts(n, total / n);
    counts[n - 1] += total - total / n * n;
    const int threads = omp_get_max_threads();
    std::vector<double> times;
    dist::run_local(n, [&](dist::Comm& comm) {
      omp_set_num_threads(std::max(1, threads / n));  // the ranks share the run's threads
      const Device d = devs[comm.rank()];
      Tensor full = Tensor::zeros({total}, t, d), mine = Tensor::zeros({counts[comm.rank()]}, t, d);
      auto run = [&] {
        if (gather)
          comm.all_gather_v(mine, full, counts);
        else
          comm.reduce_scatter_v(full, mine, counts);
      };
      time_on(d, run);
      for (int r = 0; r < repeat; ++r) {
        comm.barrier();
        const double slowest = comm.all_reduce_max(time_on(d, run));
        if (comm.rank() == 0) times.push_back(slowest);
      }
    });
    k.times_s = times;
    k.median_s = median_of(times);
    k.min_s = *std::min_element(times.begin(), times.end());
    k.max_s = *std::max_element(times.begin(), times.end());
    result.push_back(k);
  }
  return result;
}

std::string read_first_line_with(const char* path, const char* key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "";
}

json load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) < 0) return nullptr;
  const auto hundredths = [](double x) { return std::round(x * 100) / 100; };  // as uptime prints it
  return {hundredths(l[0]), hundredths(l[1]), hundredths(l[2])};
}

json machine_json() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {{"hostname", host},
          {"cpu_model", read_first_line_with("/proc/cpuinfo", "model name")},
          {"cores", (int)std::thread::hardware_concurrency()}};
}

json build_json() {
  json j = {{"git_describe", GPUMIX_GIT_DESCRIBE}, {"compiler", __VERSION__}};
#ifdef GPUMIX_CUDA_EMULATOR
  j["cuda"] = "emulated";
#elif defined(GPUMIX_CORE_CUDA)
  j["cuda"] = "nvcc";
#else
  j["cuda"] = "none";
#endif
  return j;
}

struct Listed {
  std::string label;
  dist::ClusterDevice spec;
};

// --devices: comma-separated entries, each as `gpumix train --devices` reads one
// (dist::parse_devices); cpu and cuda entries may mix here, as each device is measured alone.
std::vector<Listed> parse_bench_devices(const std::vector<std::string>& entries) {
  if (entries.empty()) throw std::invalid_argument("--devices is empty; name at least one device, e.g. --devices cpu");
  std::vector<Listed> out;
  for (const std::string& e : entries) {
    std::vector<dist::ClusterDevice> one;
    try {
      one = dist::parse_devices(e);
    } catch (const std::exception& ex) {
      throw std::invalid_argument(str("--devices entry '", e, "': ", ex.what()));
    }
    for (const dist::ClusterDevice& d : one)
      for (int c = 0; c < d.count; ++c) {
        dist::ClusterDevice single = d;
        single.count = 1;
        out.push_back({single.label(), single});
      }
  }
  return out;
}

}  // namespace

double roof_seconds(const KernelResult& k, const Roofs& r) {
  const double compute = r.peak_flops > 0 ? k.flops / r.peak_flops : 0;
  const double memory = r.bandwidth_Bps > 0 ? k.bytes / r.bandwidth_Bps : 0;
  return std::max(compute, memory);
}

namespace {
// (role, group) of every kernel of the step (the cases are only described, never made).
std::vector<std::pair<std::string, std::string>> roles_and_groups(bool multi_device, DType dtype) {
  GPTConfig tiny{"tiny", 1, 1, 8, 16, 8};
  std::vector<std::pair<std::string, std::string>> out;
  for (const Case& c : step_cases(tiny, 1, 8, dtype, Device::cpu(), multi_device ? 2 : 1))
    out.push_back({c.k.role, c.k.group});
  if (multi_device)
    for (const std::string& r : kCollectiveRoles) out.push_back({r, "comm"});
  return out;
}
}  // namespace

std::vector<std::string> bench_roles(bool multi_device, DType dtype) {
  std::vector<std::string> roles;
  for (const auto& [role, group] : roles_and_groups(multi_device, dtype)) roles.push_back(role);
  return roles;
}

void check_filters(const std::vector<std::string>& filters, bool multi_device, DType dtype) {
  const auto all = roles_and_groups(multi_device, dtype);
  for (const std::string& f : filters) {
    bool any = false;
    for (const auto& [role, group] : all) any = any || role_matches(role, group, {f});
    if (any) continue;
    std::string known;
    for (const auto& [role, group] : all) known += (known.empty() ? "" : ", ") + role;
    throw std::invalid_argument(str("--filter '", f, "' names no kernel role of this step", multi_device ? "" :
                                    " (collectives need two --devices)", "; give a role, a family (qkv, attn, ln, "
                                    "grad_zero) or a group (embed, block, head, step", multi_device ? ", comm" : "",
                                    "); the roles: ", known));
  }
}

nlohmann::json run_bench(const BenchOptions& o) {
  GPUMIX_CHECK_INPUT(o.repeat >= 1, "--repeat must be at least 1, got ", o.repeat);
  GPUMIX_CHECK_INPUT(o.seq >= 1 && o.batch >= 1, "--seq and --batch must be at least 1, got --seq ", o.seq,
                     " and --batch ", o.batch);
  GPUMIX_CHECK_INPUT(o.seq <= o.model.T, "--seq ", o.seq, " is longer than ", o.model.name, "'s context of ",
                     o.model.T, "; give --seq ", o.model.T, " or less");
  GPUMIX_CHECK_INPUT(o.model.C % o.model.NH == 0, "the model's C ", o.model.C, " is not a multiple of NH ", o.model.NH);
  const std::vector<Listed> listed = parse_bench_devices(o.devices);
  const bool multi = listed.size() > 1;
  check_filters(o.filters, multi, o.dtype);

  json out;
  out["gpumix_bench"] = 1;
  out["model"] = config_to_json(o.model);
  out["seq"] = o.seq;
  out["batch"] = o.batch;
  out["dtype"] = dtype_name(o.dtype);
  out["repeat"] = o.repeat;
  out["filters"] = o.filters;
  out["machine"] = machine_json();
  out["build"] = build_json();
  out["load_average_start"] = load_average();
  const int threads = omp_get_max_threads();  // OMP_NUM_THREADS, else every core

  std::vector<Device> devs;
  bool same_kind = true;
  for (size_t i = 0; i < listed.size(); ++i) {
    const Listed& l = listed[i];
    dist::EngineOptions engine;
    dist::configure_rank_device(engine, l.spec.is_cuda() ? Device::cuda((int)i) : Device::cpu((int)i), l.spec);
    const Device dev = engine.device;
    devs.push_back(dev);
    same_kind = same_kind && dev.kind == devs[0].kind;
    check_backend_supports(dev, o.dtype, "--dtype");
    omp_set_num_threads(threads);  // a CPU device is measured alone, with all the run's threads

    const DeviceProps props = device_props(dev);
    json d;
    d["label"] = l.label;
    d["name"] = props.name;
    d["emulated"] = props.emulated;
    d["slowdown"] = props.slowdown;
#ifdef GPUMIX_CUDA_EMULATOR
    d["emulated_gpu"] = dev.is_cuda();
#else
    d["emulated_gpu"] = false;
#endif
    d["threads"] = dev.is_cuda() ? 0 : threads;
    if (o.progress) std::fprintf(stderr, "bench %s: measuring the roofs\n", l.label.c_str());
    Roofs roofs = measure_roofs(dev, o.dtype, o.repeat);
    if (dev.is_cuda()) attach_datasheet(roofs, props.name);
    std::vector<Case> cases;
    for (Case& c : step_cases(o.model, o.batch, o.seq, o.dtype, dev, (int)listed.size()))
      if (role_matches(c.k.role, c.k.group, o.filters)) cases.push_back(std::move(c));
    d["kernels"] = json::array();
    for (const KernelResult& k : time_cases(cases, dev, roofs, o.repeat, o.progress, l.label))
      d["kernels"].push_back(kernel_json(k));
    // The roofs again after the kernels, the best of both kept: a roof is a best case, and on
    // a shared machine a burst of other work during one measurement would lower it.
    const Roofs again = measure_roofs(dev, o.dtype, o.repeat);
    if (again.bandwidth_Bps > roofs.bandwidth_Bps) roofs.bandwidth_Bps = again.bandwidth_Bps;
    if (again.peak_flops > roofs.peak_flops) {
      roofs.peak_flops = again.peak_flops;
      roofs.gemm_shape = again.gemm_shape;
    }
    d["roofs"] = roofs_json(roofs);
    out["devices"].push_back(d);
  }

  out["collectives"] = json::array();
  if (!multi) {
    out["collectives_note"] = "one device: no collectives";
  } else if (!same_kind) {
    out["collectives_note"] = "cpu and cuda devices do not share a communication backend: no collectives";
  } else {
    if (o.progress) std::fprintf(stderr, "bench: collectives among %zu devices\n", devs.size());
    for (const KernelResult& k : time_collectives(devs, o.model, o.dtype, o.repeat, o.filters))
      out["collectives"].push_back(kernel_json(k));
  }
  out["load_average_end"] = load_average();
  return out;
}

KernelResult kernel_from_json(const json& j) {
  KernelResult k;
  k.role = j.at("role").get<std::string>();
  k.group = j.at("group").get<std::string>();
  k.what = j.value("what", "");
  k.per_block = j.at("per_block").get<int>();
  k.per_step = j.at("per_step").get<int>();
  k.flops = j.at("flops").get<double>();
  k.bytes = j.at("bytes").get<double>();
  k.median_s = j.at("median_s").get<double>();
  k.min_s = j.value("min_s", 0.0);
  k.max_s = j.value("max_s", 0.0);
  if (j.contains("times_s")) k.times_s = j.at("times_s").get<std::vector<double>>();
  k.skipped = j.value("skipped", "");
  return k;
}

Roofs roofs_from_json(const json& j) {
  Roofs r;
  r.bandwidth_Bps = j.at("bandwidth_Bps").get<double>();
  r.peak_flops = j.at("peak_flops").get<double>();
  r.gemm_shape = j.value("gemm_shape", "");
  if (j.contains("datasheet")) {
    r.datasheet = j["datasheet"].at("name").get<std::string>();
    r.datasheet_flops = j["datasheet"].at("peak_flops").get<double>();
    r.datasheet_Bps = j["datasheet"].at("bandwidth_Bps").get<double>();
  }
  return r;
}

}  // namespace gpumix::tools
