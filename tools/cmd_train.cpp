// gpumix train: train a GPT on a corpus or token file, on one rank, on N ranks as threads
// of this process (--ranks N, the local backend), or on the ranks of an MPI job
// (mpirun -np N gpumix train ...). See dist/engine/trainer.h.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "dist/engine/launch.h"
#include "dist/plan/plan.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

using gpumix::dist::RankWork;

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

std::vector<RankWork> build_work(int64_t global_batch, int ranks, const std::string& batches,
                                 const std::string& micro, const std::string& shares) {
  std::vector<RankWork> work = gpumix::dist::even_work(global_batch, ranks);
  auto check_size = [&](size_t n, const char* flag) {
    if ((int)n != ranks)
      throw std::invalid_argument(std::string(flag) + " has " + std::to_string(n) + " values but " +
                                  std::to_string(ranks) + " ranks are running; give one per rank");
  };
  if (!batches.empty()) {
    const auto b = parse_list<int64_t>(batches, "--batches");
    check_size(b.size(), "--batches");
    for (int r = 0; r < ranks; ++r) work[r].batch = work[r].micro_batch = b[r];
  }
  if (!micro.empty()) {
    const auto m = parse_list<int64_t>(micro, "--micro-batches");
    check_size(m.size(), "--micro-batches");
    for (int r = 0; r < ranks; ++r) work[r].micro_batch = m[r];
  }
  if (!shares.empty()) {
    const auto s = parse_list<double>(shares, "--shares");
    check_size(s.size(), "--shares");
    for (int r = 0; r < ranks; ++r) work[r].share = s[r];
  }
  // No clamping of micro-batches: an explicit 0 for a positive batch is a bad plan that
  // validate_work reports (the defaults above are already at least 1 for positive batches).
  return work;
}

bool is_planner_name(const std::string& plan) {
  for (const char* name : {"auto", "gpumix", "even", "proportional", "cephalo", "given"})
    if (plan == name) return true;
  return false;
}

// The per-rank work of a plan file (`gpumix plan --out`); its ranks and global batch must
// be the run's.
std::vector<RankWork> work_from_plan_file(const std::string& path, int64_t global_batch, int ranks) {
  const gpumix::dist::Plan plan = gpumix::dist::read_plan(path);
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
  std::vector<RankWork> work;
  for (const auto& r : plan.ranks) work.push_back({r.batch, r.micro_batch, r.share});
  gpumix::dist::validate_work(work, global_batch, ranks);
  return work;
}

int cmd_train(int argc, char** argv) {
  gpumix::TrainOptions o;
  std::string device_memory, batches, micro, shares, devices_text, plan = "";
  int ranks = 0;
  bool no_prefetch = false;
  CLI::App app{"Train a GPT on a text corpus or token file, on one or several ranks"};
  app.add_option("--data", o.data, "text corpus, folder of fortune files, or token file")->required();
  app.add_option("--tokenizer", o.tokenizer, "tokenizer file (default: <out>/tokenizer.bpe, trained if absent)");
  app.add_option("--model", o.model, "model preset (gpt-nano, gpt-micro, gpt-mini, gpt2, ...)");
  app.add_option("--layers", o.layers, "override the preset's number of layers");
  app.add_option("--heads", o.heads, "override the preset's number of heads");
  app.add_option("--channels", o.channels, "override the preset's channels");
  app.add_option("--out", o.out, "run folder (log.jsonl, tokenizer, checkpoints)");
  app.add_option("--resume", o.resume, "continue from a run folder or checkpoint folder");
  app.add_option("--batch,--global-batch", o.batch, "sequences per step, over all ranks");
  app.add_option("--seq", o.seq, "sequence length (default: the model's context)");
  app.add_option("--steps", o.steps, "total steps");
  app.add_option("--lr", o.lr, "peak learning rate");
  app.add_option("--warmup", o.warmup, "warmup steps (default: min(100, steps/10))");
  app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay");
  app.add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0: off)");
  app.add_option("--eval-interval", o.eval_interval, "steps between validation passes (0: end only)");
  app.add_option("--eval-windows", o.eval_windows, "validation windows of the evaluations during training (the last uses all; 0: all)");
  app.add_option("--ckpt-interval", o.ckpt_interval, "steps between checkpoints (0: end only)");
  app.add_option("--seed", o.seed, "random seed (initialisation and batch order)");
  app.add_option("--threads", o.threads, "CPU threads in all (default: all cores)");
  app.add_flag("--recompute", o.recompute, "recompute block activations in backward (one rank)");
  app.add_option("--val-fraction", o.val_fraction, "fraction of tokens held out for validation");
  app.add_option("--device-memory", device_memory, "emulated device memory per rank, e.g. 512MiB");
  app.add_flag("--quiet", o.quiet, "no per-step lines (log.jsonl still gets them)");
  app.add_flag("--skip-nonfinite", o.skip_nonfinite,
               "skip a step whose loss or gradient is NaN/Inf (default: stop with an error naming the unit and rank)");
  app.add_option("--ranks", ranks, "ranks as threads of this process (local backend)");
  app.add_option("--devices", devices_text,
                 "one device per rank, e.g. cpu:mem=2GiB,cpu:mem=512MiB:slow=3 (emulated: memory "
                 "capacity enforced by the allocator, every kernel slowed down by the factor)");
  app.add_option("--plan", plan,
                 "auto (profile the devices, then plan: the default with --devices), even, "
                 "proportional, cephalo, given (the --batches/--micro-batches/--shares), or a "
                 "plan file from `gpumix plan --out`");
  app.add_option("--batches", batches, "per-rank batches, e.g. 1,2,5 (default: even)");
  app.add_option("--micro-batches", micro, "per-rank micro-batch sizes, e.g. 1,1,2 (default: the batch)");
  app.add_option("--shares", shares, "per-rank state shares, e.g. 0,0.3,0.7 (default: even)");
  app.add_flag("--no-prefetch", no_prefetch, "do not overlap the next unit's gather with compute");
  gpumix::dist::EngineOptions engine;
  app.add_option("--drift-threshold", engine.drift.threshold,
                 "re-plan when a rank's compute time, relative to the others', is off the plan's "
                 "prediction by more than this fraction (0: never)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--drift-steps", engine.drift.steps, "consecutive drifting steps before re-planning")
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  if (!device_memory.empty()) o.device_memory = gpumix::tools::parse_bytes(device_memory);
  std::vector<gpumix::dist::ClusterDevice> devices;
  if (!devices_text.empty()) {
    devices = gpumix::dist::parse_devices(devices_text);
    if (ranks && ranks != (int)devices.size())
      throw std::invalid_argument("--ranks " + std::to_string(ranks) + " but --devices lists " +
                                  std::to_string(devices.size()) + " devices; give one device per rank");
    ranks = (int)devices.size();
  }
  if (ranks == 0) ranks = 1;
  if (ranks < 1) throw std::invalid_argument("--ranks must be at least 1, got " + std::to_string(ranks));
  // Thread ranks share this machine's cores; past a few hundred they only contend.
  if (ranks > 1024)
    throw std::invalid_argument("--ranks " + std::to_string(ranks) + " is more than 1024 thread ranks; run "
                                "several processes under mpirun instead");
  const bool explicit_plan = !batches.empty() || !micro.empty() || !shares.empty();
  if (plan.empty()) plan = explicit_plan ? "given" : !devices.empty() ? "auto" : "even";
  if (explicit_plan && plan != "given")
    throw std::invalid_argument("--plan " + plan + " contradicts --batches/--micro-batches/--shares; "
                                "drop one of them (or say --plan given)");
  engine.prefetch = !no_prefetch;
  const bool plan_file = !is_planner_name(plan);
  if (plan_file && explicit_plan)
    throw std::invalid_argument("--plan FILE contradicts --batches/--micro-batches/--shares; drop one");
  if (!plan_file && plan != "given" && !(plan == "even" && devices.empty())) engine.planner = plan;
  auto make_work = [&](int n) {
    return plan_file ? work_from_plan_file(plan, o.batch, n) : build_work(o.batch, n, batches, micro, shares);
  };
  const int cores = o.threads > 0 ? o.threads : (int)std::max(1u, std::thread::hardware_concurrency());

  if (gpumix::dist::launched_by_mpi()) {
    if (ranks != 1) throw std::invalid_argument("--ranks is for the local backend; under mpirun use -np");
    gpumix::dist::MpiSession mpi(nullptr, nullptr);
    auto comm = gpumix::dist::make_mpi_comm();
    if (!devices.empty()) {
      if ((int)devices.size() != comm->size())
        throw std::invalid_argument("--devices lists " + std::to_string(devices.size()) + " devices but mpirun started " +
                                    std::to_string(comm->size()) + " ranks");
      gpumix::dist::configure_rank_device(engine, gpumix::Device::cpu(), devices[comm->rank()]);
    }
    const auto work = make_work(comm->size());
    // Processes on one node share its cores.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int per_node = local ? std::max(1, std::atoi(local)) : 1;
    omp_set_num_threads(o.threads > 0 ? o.threads : std::max(1, cores / per_node));
    try {
      gpumix::dist::train(o, work, *comm, engine);
    } catch (const std::exception& e) {
      comm->abort(std::string("rank ") + std::to_string(comm->rank()) + ": " + e.what());
    }
    return 0;
  }
  const auto work = make_work(ranks);
  if (engine.planner.empty()) gpumix::dist::validate_work(work, o.batch, ranks);
  gpumix::dist::train_local(o, ranks, devices, work, engine, cores);
  return 0;
}

}  // namespace

GPUMIX_COMMAND("train", "train a GPT on one or several ranks", cmd_train);
