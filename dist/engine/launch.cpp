#include "dist/engine/launch.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/precision.h"
#include "core/runtime.h"
#include "dist/plan/plan.h"
#include "dist/plan/planner_local.h"

namespace gpumix::dist {

namespace fs = std::filesystem;

namespace {

// "1,2,5" -> {1, 2, 5}.
template <class T>
std::vector<T> parse_list(const std::string& text, const char* flag) {
  std::vector<T> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::stringstream one(item);
    T v{};
    if (!(one >> v) || !one.eof())
      throw std::invalid_argument(std::string(flag) + ": cannot read '" + item + "' in '" + text +
                                  "' (expected a comma-separated list, one value per rank)");
    values.push_back(v);
  }
  return values;
}

Work build_work(int64_t global_batch, int ranks, const std::string& batches, const std::string& micro,
                const std::string& shares) {
  Work work = even_work(global_batch, ranks);
  auto check_size = [&](size_t n, const char* flag) {
    if ((int)n != ranks)
      throw std::invalid_argument(std::string(flag) + " has " + std::to_string(n) + " values but " +
                                  std::to_string(ranks) + " ranks are running; give one per rank");
  };
  if (!batches.empty()) {
    const auto b = parse_list<int64_t>(batches, "--batches");
    check_size(b.size(), "--batches");
    for (int r = 0; r < ranks; ++r) work.ranks[r].batch = work.ranks[r].micro_batch = b[r];
  }
  if (!micro.empty()) {
    const auto m = parse_list<int64_t>(micro, "--micro-batches");
    check_size(m.size(), "--micro-batches");
    for (int r = 0; r < ranks; ++r) work.ranks[r].micro_batch = m[r];
  }
  if (!shares.empty()) {
    const auto s = parse_list<double>(shares, "--shares");
    check_size(s.size(), "--shares");
    for (int r = 0; r < ranks; ++r) work.ranks[r].share = s[r];
  }
  // No clamping of micro-batches: an explicit 0 for a positive batch is a bad plan that
  // validate_work reports (the defaults above are already at least 1 for positive batches).
  return work;
}

bool given_lists(const PlanRequest& request) {
  return !request.batches.empty() || !request.micro_batches.empty() || !request.shares.empty();
}

bool is_planner_name(const std::string& plan) {
  for (const char* name : {"auto", "gpumix", "even", "proportional", "cephalo", "given"})
    if (plan == name) return true;
  return false;
}

// The per-rank work of a plan file (`gpumix plan --out`); its ranks and global batch must
// be the run's. The run computes in the plan's dtype unless --dtype says otherwise
// (engine.file_plan's dtype; choose_compute_dtype).
Work work_from_plan_file(const std::string& path, int64_t global_batch, int ranks, EngineOptions& engine) {
  engine.file_plan = std::make_shared<const gpumix::dist::Plan>(gpumix::dist::read_plan(path));
  engine.plan_file = path;
  const gpumix::dist::Plan& plan = *engine.file_plan;
  if ((int)plan.ranks.size() != ranks)
    throw std::invalid_argument("plan " + path + " is for " + std::to_string(plan.ranks.size()) +
                                " ranks but " + std::to_string(ranks) + " are running; make the plan for "
                                "this cluster or run as many ranks");
  for (const auto& r : plan.ranks)
    if (r.left_out())
      throw std::invalid_argument("plan " + path + " leaves rank " + std::to_string(r.rank) + " (" + r.device +
                                  ") out, but this trainer keeps every rank in every collective, where that "
                                  "rank would hold gathered units its plan does not count; make the plan "
                                  "with `gpumix plan --no-leave-out`, or run without that device");
  if (plan.global_batch != global_batch)
    throw std::invalid_argument("plan " + path + " has global batch " + std::to_string(plan.global_batch) +
                                " but --batch is " + std::to_string(global_batch) + "; pass --batch " +
                                std::to_string(plan.global_batch));
  const Work work = plan.work();
  validate_work(work, global_batch, ranks);
  return work;
}

}  // namespace

// The GPUs this process can use, or an input error naming what is missing and the fix.
int usable_gpus(const std::string& what) {
  std::string why;
  const int count = cuda_device_count(&why);
  GPUMIX_CHECK_INPUT(count > 0, what, " names a CUDA GPU, but none can be used here: ", why, "; ",
                     backend_supports(Device::cuda(), DType::bf16)
                         ? "run on a machine with an NVIDIA GPU and its driver"
                         : "rebuild GPUMix with CUDA (meson setup -Dcuda=enabled) and run where a GPU is",
                     ", or use cpu devices (e.g. --devices cpu,cpu:slow=2)");
  return count;
}

// The node-local rank that the launcher gives this process (mpirun, srun), else `fallback`.
int node_local_rank(int fallback) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return fallback;
}

std::vector<ClusterDevice> parse_devices(const std::string& text) {
  std::vector<ClusterDevice> devices;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const ClusterDevice d = parse_device_spec(item, "--devices");
    GPUMIX_CHECK_INPUT(d.kind == "cpu" || d.is_cuda(), "--devices: '", item, "' is a device type for plans and "
                       "simulation; a run computes on cpu devices (e.g. cpu:mem=2GiB:slow=3) or on this "
                       "machine's GPUs (cuda:0, cuda:0:mem=8GiB:slow=2)");
    for (int i = 0; i < d.count; ++i) devices.push_back(d);
  }
  GPUMIX_CHECK_INPUT(!devices.empty(), "--devices is empty; e.g. --devices cpu,cpu:slow=2");
  const auto cuda = std::find_if(devices.begin(), devices.end(), [](const ClusterDevice& d) { return d.is_cuda(); });
  if (cuda == devices.end()) return devices;
  const auto cpu = std::find_if(devices.begin(), devices.end(), [](const ClusterDevice& d) { return !d.is_cuda(); });
  // The ranks of a run exchange parameters and gradients on their devices' memory: one kind.
  GPUMIX_CHECK_INPUT(cpu == devices.end(), "--devices mixes cpu and cuda devices ('", cpu->label(), "', '",
                     cuda->label(), "'); the ranks of one run compute on one kind of device: list only cpu or "
                     "only cuda devices");
  usable_gpus("--devices " + cuda->label());
  return devices;
}

void configure_rank_device(EngineOptions& engine, Device device, const ClusterDevice& spec) {
  const bool emulated = spec.memory_bytes > 0 || spec.slowdown != 1.0;
  DeviceProps props;
  if (spec.is_cuda()) {
    // Rank r's logical device cuda:r is its view of GPU `ordinal`, which it may share.
    device = Device::cuda(device.index);
    const int count = usable_gpus("--devices " + spec.label());
    const int ordinal = spec.gpu >= 0 ? spec.gpu : node_local_rank(device.index);
    GPUMIX_CHECK_INPUT(ordinal < count, "--devices ", spec.label(), ": rank ", device.index, " would use GPU ",
                       ordinal, ", but this machine has ", count, " (cuda:0 to cuda:", count - 1,
                       "); name one of them");
    props = gpu_props(ordinal);
    if (emulated) props.name += " (emulated " + spec.label().substr(spec.label().find(':') + 1) + ")";
  } else {
    props = device_props(device);
    if (emulated) props.name = "cpu (emulated " + spec.label() + ")";
  }
  if (spec.memory_bytes > 0) props.capacity = (int64_t)spec.memory_bytes;
  props.slowdown = spec.slowdown;
  props.emulated = emulated;
  configure_device(device, props);
  engine.device = device;
  engine.device_set = true;
  engine.device_label = spec.label();
}

std::vector<std::vector<int>> place_ranks(const std::vector<double>& slowdowns, int threads_per_rank, int cpus) {
  const int ranks = (int)slowdowns.size();
  std::vector<std::vector<int>> placed(ranks);
  if ((int64_t)ranks * threads_per_rank <= cpus) {
    for (int r = 0; r < ranks; ++r)
      for (int t = 0; t < threads_per_rank; ++t) placed[r].push_back(r * threads_per_rank + t);
    return placed;
  }
  if (threads_per_rank > 1 || cpus < 1) return placed;
  std::vector<int> order(ranks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return slowdowns[a] < slowdowns[b]; });
  std::vector<double> load(cpus, 0.0);
  for (int r : order) {
    const int cpu = (int)(std::min_element(load.begin(), load.end()) - load.begin());
    load[cpu] += 1.0 / slowdowns[r];
    placed[r].push_back(cpu);
  }
  return placed;
}

std::string resolved_plan(const PlanRequest& request, bool have_devices) {
  return !request.plan.empty() ? request.plan : given_lists(request) ? "given" : have_devices ? "auto" : "even";
}

Work plan_work(const PlanRequest& request, bool have_devices, int64_t global_batch, int ranks, EngineOptions& engine) {
  const bool lists = given_lists(request);
  const std::string plan = resolved_plan(request, have_devices);
  const bool plan_file = !is_planner_name(plan);
  if (lists && plan != "given")
    throw std::invalid_argument("--plan " + plan + " contradicts --batches/--micro-batches/--shares; drop one of "
                                "them (or say --plan given)");
  if (plan_file && !std::filesystem::exists(plan))
    throw std::invalid_argument("--plan " + plan + " is neither a planner (auto, gpumix, even, proportional, cephalo, "
                                "given) nor a plan file: cannot open " + plan);
  if (plan_file) return work_from_plan_file(plan, global_batch, ranks, engine);
  if (plan != "given" && !(plan == "even" && !have_devices)) engine.planner = plan;
  Work work = build_work(global_batch, ranks, request.batches, request.micro_batches, request.shares);
  if (engine.planner.empty()) validate_work(work, global_batch, ranks);
  return work;
}

RunLock claim_run_folder(const std::string& dir, bool resuming, const std::string& fix, Comm* comm) {
  RunLock lock;
  std::string error;
  if (!comm || comm->rank() == 0) {
    try {
      lock = RunLock(dir);
      const fs::path log = fs::path(dir) / "log.jsonl";
      // An empty log is a run that failed before its first step: nothing to keep.
      GPUMIX_CHECK_INPUT(resuming || !fs::exists(log) || fs::file_size(log) == 0, "run folder ", dir,
                         " already holds a run (", log.string(), "); ", fix);
    } catch (const std::exception& e) {
      if (!comm) throw;
      error = local_error_of(e, true);
    }
  }
  if (comm) comm->agree("run folder", {}, error);
  return lock;
}

int threads_per_rank(int threads, int process_ranks, int node_ranks) {
  if (threads > 0) return std::max(1, threads / process_ranks);
  const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, node_ranks));
}

void start_local_rank(Comm& comm, const std::vector<ClusterDevice>& devices, int threads, EngineOptions& engine) {
  const int ranks = comm.size(), per_rank = threads_per_rank(threads, ranks, ranks);
  if (!devices.empty()) configure_rank_device(engine, Device::cpu(comm.rank()), devices[comm.rank()]);
  // Pinned before the first parallel region: OpenMP's threads inherit this thread's CPUs.
  cpu_set_t usable;
  if (sched_getaffinity(0, sizeof usable, &usable) == 0) {
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &usable)) cpus.push_back(c);
    std::vector<double> slowdowns(ranks, 1.0);
    for (int r = 0; r < (int)devices.size() && r < ranks; ++r) slowdowns[r] = devices[r].slowdown;
    const std::vector<int> mine = place_ranks(slowdowns, per_rank, (int)cpus.size())[comm.rank()];
    if (!mine.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : mine) CPU_SET(cpus[c], &set);
      sched_setaffinity(0, sizeof set, &set);  // best effort: unpinned ranks still run
    }
  }
  omp_set_num_threads(per_rank);
}

TrainResult train_local(const TrainOptions& o, int ranks, const std::vector<ClusterDevice>& devices,
                        const Work& work, const EngineOptions& engine, int threads) {
  GPUMIX_CHECK_INPUT(devices.empty() || (int)devices.size() == ranks, devices.size(), " devices for ", ranks,
                     " ranks; give one device per rank");
  TrainResult result;
  run_local(ranks, [&](Comm& comm) {
    EngineOptions mine = engine;
    start_local_rank(comm, devices, threads, mine);
    TrainResult r = train(o, work, comm, mine);
    if (comm.rank() == 0) result = r;
  });
  return result;
}

Launch prepare_launch(const LaunchRequest& request, Comm* comm, int node_ranks) {
  Launch launch;
  launch.options = request.options;
  launch.engine = request.engine;
  const TrainOptions& o = launch.options;
  check_train_options(o);
  if (!request.devices.empty()) launch.devices = parse_devices(request.devices);
  const int devices = (int)launch.devices.size();
  if (comm) {
    launch.ranks = comm->size();
    if (devices > 0 && devices != launch.ranks)
      throw std::invalid_argument("--devices lists " + std::to_string(devices) + " devices but mpirun started " +
                                  std::to_string(launch.ranks) + " ranks; give one device per rank");
  } else {
    if (request.ranks && devices && request.ranks != devices)
      throw std::invalid_argument("--ranks " + std::to_string(request.ranks) + " but --devices lists " +
                                  std::to_string(devices) + " devices; give one device per rank");
    launch.ranks = devices ? devices : request.ranks ? request.ranks : 1;
    if (launch.ranks < 1) throw std::invalid_argument("--ranks must be at least 1, got " + std::to_string(launch.ranks));
    // Thread ranks share this machine's cores; past a few hundred they only contend.
    if (launch.ranks > 1024)
      throw std::invalid_argument("--ranks " + std::to_string(launch.ranks) + " is more than 1024 thread ranks; "
                                  "run several processes under mpirun instead");
  }
  // One kind of device per run (parse_devices); the CUDA backend computes in bf16 only.
  if (o.dtype && devices && launch.devices[0].is_cuda())
    check_backend_supports(Device::cuda(), *o.dtype, "--dtype");
  const PlanRequest& plan = request.plan;
  const std::string plan_name = resolved_plan(plan, devices > 0);
  if (request.sharding_given && plan_name != "auto" && plan_name != "gpumix") {
    const int g = launch.engine.sharding;
    const std::string sharding = g < 0 ? "auto" : g == 0 ? "full" : std::to_string(g);
    throw std::invalid_argument("--sharding is the gpumix planner's (--plan auto, the default with --devices); "
                                "--plan " + plan_name + " decides its own sharding: drop --sharding, or plan with "
                                "`gpumix plan --sharding " + sharding + "` and pass the file");
  }
  launch.work = plan_work(plan, devices > 0, o.batch, launch.ranks, launch.engine);
  // Local mode's rules that need no nodes (train() checks the groups with them).
  check_local_sync(launch.engine.sync, o, launch.engine.planner.empty() ? &launch.work : nullptr, launch.ranks, {});
  check_local_sharding(launch.engine.sync, launch.engine.sharding);
  // A bound of a profile that is never measured would be silently ignored.
  if (launch.engine.planner.empty() && !request.profile_bounds_given.empty()) {
    const std::string& flag = request.profile_bounds_given[0];
    const std::string plan_is = !launch.engine.plan_file.empty() ? "it runs the plan file " + launch.engine.plan_file
                                : plan_name == "even" && !devices
                                    ? std::string("without --devices, --plan even splits the batch evenly unmeasured")
                                    : std::string("its plan is given: --batches/--micro-batches/--shares");
    throw std::invalid_argument(flag + " bounds the profile that a planner measures at start-up, but this run "
                                "profiles nothing (" + plan_is + "); drop " + flag + ", or plan with --devices "
                                "and --plan auto|gpumix|even|proportional|cephalo");
  }
  if (comm) {
    if (devices) configure_rank_device(launch.engine, Device::cpu(), launch.devices[comm->rank()]);
    launch.threads = threads_per_rank(o.threads, 1, node_ranks);
  } else {
    launch.threads = threads_per_rank(o.threads, launch.ranks, launch.ranks);
  }
  return launch;
}

TrainResult run_launch(const Launch& launch, Comm* comm) {
  if (!comm)
    return train_local(launch.options, launch.ranks, launch.devices, launch.work, launch.engine, launch.options.threads);
  const int saved = omp_get_max_threads();  // the caller's setting back after the call (the C API's host)
  omp_set_num_threads(launch.threads);
  try {
    TrainResult result = train(launch.options, launch.work, *comm, launch.engine);
    omp_set_num_threads(saved);
    return result;
  } catch (...) {
    omp_set_num_threads(saved);
    throw;
  }
}

}  // namespace gpumix::dist
