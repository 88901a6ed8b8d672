// gpumix train: train a GPT on a corpus or token file, on one rank, on N ranks as threads
// of this process (--ranks N, the local backend), or on the ranks of an MPI job
// (mpirun -np N gpumix train ...). See dist/engine/trainer.h.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "dist/engine/launch.h"
#include "dist/engine/peer_watch.h"
#include "dist/engine/stop.h"
#include "dist/plan/plan.h"
#include "nn/run_folder.h"
#include "nn/run_model.h"
#include "core/log.h"
#include "core/precision.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

// --trace-steps "A:B" (1 <= A <= B) -> {A, B}.
std::pair<int, int> parse_trace_steps(const std::string& text) {
  int first = 0, last = 0;
  char colon = 0, rest = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &first, &colon, &last, &rest) != 3 || colon != ':' || first < 1 ||
      last < first)
    throw std::invalid_argument("--trace-steps: cannot read '" + text +
                                "' as A:B, the first and last step to trace (1 <= A <= B), e.g. 2:4");
  return {first, last};
}

// Every value the flags give, checked before the run folder is made or locked, so that a
// refused run leaves nothing behind (issue 30). 0 and -1 in TrainOptions mean "not given"
// (the model's context, the preset's shape, the default warmup); given on the command line
// they are refused like any other value out of range, saying what leaving the flag out does.
void check_flags(const CLI::App& app, const gpumix::TrainOptions& o) {
  // "--lr must be positive and finite, got nan; e.g. --lr 1e-3".
  auto require = [](bool ok, const std::string& flag, const auto& value, const std::string& rule,
                    const std::string& fix = "") {
    if (ok) return;
    std::ostringstream message;
    message << flag << " must be " << rule << ", got " << value << (fix.empty() ? "" : "; ") << fix;
    throw std::invalid_argument(message.str());
  };
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  gpumix::tools::check_seq_flag(given("--seq"), o.seq, "the model's context");
  require(o.steps >= 1, "--steps", o.steps, "at least 1");
  require(o.batch >= 1, "--batch", o.batch, "at least 1");
  require(std::isfinite(o.lr) && o.lr > 0, "--lr", o.lr, "positive and finite", "e.g. --lr 1e-3");
  if (given("--warmup"))
    require(o.warmup >= 0, "--warmup", o.warmup, "at least 0", "leave --warmup out for min(100, steps / 10)");
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "--weight-decay", o.weight_decay,
          "finite and at least 0", "0 for none");
  require(std::isfinite(o.grad_clip) && o.grad_clip >= 0, "--grad-clip", o.grad_clip, "finite and at least 0",
          "0 for no clipping");
  require(o.eval_interval >= 0, "--eval-interval", o.eval_interval, "at least 0", "0 to validate at the end only");
  require(o.eval_windows >= 0, "--eval-windows", o.eval_windows, "at least 0", "0 for all windows");
  require(o.ckpt_interval >= 0, "--ckpt-interval", o.ckpt_interval, "at least 0", "0 to save at the end only");
  require(o.keep_checkpoints >= 0, "--keep-checkpoints", o.keep_checkpoints, "at least 0", "0 keeps all");
  require(o.threads >= 0, "--threads", o.threads, "at least 0", "0 for all cores");
  require(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction", o.val_fraction, "in (0, 1)");
  const std::pair<const char*, int> shape[] = {{"--layers", o.layers}, {"--heads", o.heads}, {"--channels", o.channels}};
  for (const auto& [flag, value] : shape)
    if (given(flag)) require(value >= 1, flag, value, "at least 1", std::string("leave ") + flag + " out for the preset's");
  for (const auto& [flag, where] : {std::pair<const char*, std::string>{"--data", o.data}, {"--resume", o.resume}})
    if (!where.empty() && !std::filesystem::exists(where))
      throw std::invalid_argument(std::string(flag) + " " + where + " does not exist");
  // The model's shape as the flags give it (the heads dividing the channels, ...); a resumed
  // run takes its checkpoint's, and --init-from's folder is read (and checked) at the start.
  if (o.resume.empty() && o.init_from.empty())
    gpumix::resolve_model(o, gpumix::gpt_preset(o.model).V, gpumix::resolve_seq(o));
}

// A run stopped by SIGTERM / SIGINT (after its checkpoint) exits as a killed program
// would, 128 + the signal's number, so that job scripts and schedulers see why it ended.
int exit_code(const gpumix::TrainResult& result) { return result.stop_signal ? 128 + result.stop_signal : 0; }

int cmd_train(int argc, char** argv) {
  gpumix::TrainOptions o;
  std::string device_memory, devices_text, dtype;
  gpumix::dist::PlanRequest plan;
  int ranks = 0;
  bool no_prefetch = false;
  CLI::App app{"Train a GPT on a text corpus or token file, on one or several ranks"};
  app.add_option("--data", o.data, "text corpus, folder of fortune files, or token file")->required();
  std::string format = "auto";
  app.add_option("--format", format,
                 "how a text corpus is read: auto (fortune records where a file has a .dat twin or reads as "
                 "%-separated short records, else text), text (every file one document), fortunes");
  app.add_option("--tokenizer", o.tokenizer, "tokenizer file (default: <out>/tokenizer.bpe, trained if absent)");
  auto* model = app.add_option("--model", o.model, "model preset (gpt-nano, gpt-micro, gpt-mini, gpt2, ...)");
  app.add_option("--init-from", o.init_from,
                 "start from a Hugging Face GPT-2 folder (model.safetensors, config.json, vocab.json, "
                 "merges.txt): its shape, weights and tokenizer")
      ->excludes(model);
  app.add_option("--layers", o.layers, "override the preset's number of layers");
  app.add_option("--heads", o.heads, "override the preset's number of heads");
  app.add_option("--channels", o.channels, "override the preset's channels");
  app.add_option("--out", o.out, "run folder (log.jsonl, tokenizer, checkpoints; default runs/gpt, "
                 "with --resume the resumed run's folder)");
  app.add_option("--resume", o.resume, "continue from a run folder or checkpoint folder");
  app.add_option("--batch,--global-batch", o.batch, "sequences per step, over all ranks");
  app.add_option("--seq", o.seq, "sequence length (default: the model's context)");
  app.add_option("--steps", o.steps, "total steps");
  app.add_option("--lr", o.lr, "peak learning rate");
  app.add_option("--warmup", o.warmup, "warmup steps (default: min(100, steps/10))");
  app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay");
  app.add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0: off)");
  app.add_option("--eval-interval", o.eval_interval, "steps between validation passes (0: end only)");
  app.add_option("--eval-windows", o.eval_windows, "validation windows of every evaluation, the same first N each time (0: all); the last step "
                 "also measures all of them (logged as val_full_loss)");
  app.add_option("--ckpt-interval", o.ckpt_interval, "steps between checkpoints (0: end only)");
  app.add_option("--keep-checkpoints", o.keep_checkpoints,
                 "keep the newest N checkpoints, deleting older ones once a newer one is complete (0: all)");
  app.add_option("--seed", o.seed, "random seed (initialisation and batch order)");
  app.add_option("--threads", o.threads, "CPU threads in all (default: all cores)");
  app.add_flag("--recompute", o.recompute, "recompute block activations in backward (one rank)");
  app.add_option("--val-fraction", o.val_fraction, "fraction of tokens held out for validation");
  app.add_option("--device-memory", device_memory, "emulated device memory per rank, e.g. 512MiB");
  app.add_option("--dtype", dtype,
                 "compute dtype: bf16 or fp32 (f32); default: the plan file's, else the resumed checkpoint's, "
                 "else bf16 where every device computes it natively (avx512_bf16, AMX), fp32 elsewhere");
  app.add_flag("--quiet", o.quiet, "no per-step lines (log.jsonl still gets them)");
  app.add_flag("--skip-nonfinite", o.skip_nonfinite,
               "skip a step whose loss or gradient is NaN/Inf (default: stop with an error naming the unit and rank)");
  app.add_option("--ranks", ranks, "ranks as threads of this process (local backend)");
  app.add_option("--devices", devices_text,
                 "one device per rank, e.g. cpu:mem=2GiB,cpu:mem=512MiB:slow=3 or cuda:0,cuda:0:mem=6GiB:slow=3 "
                 "(emulated: memory capacity enforced by the allocator, every kernel slowed down by the "
                 "factor; cuda:N is GPU N, several ranks may share one; plain cuda: the node-local rank's)");
  app.add_option("--plan", plan.plan,
                 "auto (profile the devices, then plan: the default with --devices), even, "
                 "proportional, cephalo, given (the --batches/--micro-batches/--shares), or a "
                 "plan file from `gpumix plan --out`");
  app.add_option("--batches", plan.batches, "per-rank batches, e.g. 1,2,5 (default: even)");
  app.add_option("--micro-batches", plan.micro_batches, "per-rank micro-batch sizes, e.g. 1,1,2 (default: the batch)");
  app.add_option("--shares", plan.shares, "per-rank state shares, e.g. 0,0.3,0.7 (default: even)");
  app.add_flag("--no-prefetch", no_prefetch, "do not overlap the next unit's gather with compute");
  gpumix::dist::EngineOptions engine;
  // The start-up profile of a planner (as `gpumix profile --repeats --max-micro-batch`): a
  // slow device (a large model, an emulated GPU) may want it shorter; cached apart per bound.
  app.add_option("--profile-repeats", engine.profiler.repeats,
                 "timed repeats per measurement of the devices' start-up profile (median; default " +
                     std::to_string(engine.profiler.repeats) + "); fewer: a quicker, noisier profile");
  app.add_option("--profile-max-micro-batch", engine.profiler.max_micro_batch,
                 "largest micro-batch size the start-up profile measures (1, 2, 4, ... up to it; default " +
                     std::to_string(engine.profiler.max_micro_batch) +
                     "); the planner extrapolates beyond it");
  std::string sharding;
  app.add_option("--sharding", sharding,
                 "with --plan auto (gpumix): auto (full or hybrid, whichever the cost model predicts faster), "
                 "full, or G (hybrid in groups of G ranks)");
  std::string trace_steps;
  app.add_option("--trace", engine.trace,
                 "write a trace of --trace-steps to this file (Trace Event Format: ui.perfetto.dev, chrome://tracing)");
  app.add_option("--trace-steps", trace_steps, "the steps to trace, A:B (default 2:4)");
  app.add_option("--drift-threshold", engine.drift.threshold,
                 "re-plan when a rank's compute time, relative to the others', is off the plan's "
                 "prediction by more than this fraction (0: never)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--drift-steps", engine.drift.steps, "consecutive drifting steps before re-planning")
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  if (!o.resume.empty() && app.count("--out") == 0) o.out = gpumix::run_folder_of(o.resume);
  check_flags(app, o);
  o.format = gpumix::data::parse_corpus_format(format);
  if (!device_memory.empty()) o.device_memory = gpumix::tools::parse_bytes(device_memory);
  if (!trace_steps.empty()) {
    if (engine.trace.empty()) throw std::invalid_argument("--trace-steps needs --trace FILE, the file to write");
    std::tie(engine.trace_first, engine.trace_last) = parse_trace_steps(trace_steps);
  }
  o.dtype = gpumix::tools::parse_dtype_flag(dtype);
  gpumix::tools::check_profile_flags(engine.profiler.repeats, engine.profiler.max_micro_batch, "--profile-repeats",
                                     "--profile-max-micro-batch");
  std::vector<gpumix::dist::ClusterDevice> devices;
  if (!devices_text.empty()) {
    devices = gpumix::dist::parse_devices(devices_text);
    if (ranks && ranks != (int)devices.size())
      throw std::invalid_argument("--ranks " + std::to_string(ranks) + " but --devices lists " +
                                  std::to_string(devices.size()) + " devices; give one device per rank");
    ranks = (int)devices.size();
    // One kind of device per run (parse_devices); the CUDA backend computes in bf16 only.
    if (o.dtype && devices[0].is_cuda()) gpumix::check_backend_supports(gpumix::Device::cuda(), *o.dtype, "--dtype");
  }
  if (ranks == 0) ranks = 1;
  if (ranks < 1) throw std::invalid_argument("--ranks must be at least 1, got " + std::to_string(ranks));
  // Thread ranks share this machine's cores; past a few hundred they only contend.
  if (ranks > 1024)
    throw std::invalid_argument("--ranks " + std::to_string(ranks) + " is more than 1024 thread ranks; run "
                                "several processes under mpirun instead");
  engine.prefetch = !no_prefetch;
  if (!sharding.empty()) {
    engine.sharding = gpumix::tools::parse_sharding_flag(sharding);
    const bool lists = !plan.batches.empty() || !plan.micro_batches.empty() || !plan.shares.empty();
    const std::string p = !plan.plan.empty() ? plan.plan : lists ? "given" : devices.empty() ? "even" : "auto";
    if (p != "auto" && p != "gpumix")
      throw std::invalid_argument("--sharding is the gpumix planner's (--plan auto, the default with --devices); "
                                  "--plan " + p + " decides its own sharding: drop --sharding, or plan with "
                                  "`gpumix plan --sharding " + sharding + "` and pass the file");
  }
  auto make_work = [&](int n) {
    auto work = gpumix::dist::plan_work(plan, !devices.empty(), o.batch, n, engine);
    // A bound of a profile that is never measured would be silently ignored.
    const std::string plan_is =
        !engine.plan_file.empty() ? "it runs the plan file " + engine.plan_file
        : devices.empty() && plan.batches.empty() && plan.micro_batches.empty() && plan.shares.empty() &&
                (plan.plan.empty() || plan.plan == "even")
            ? std::string("without --devices, --plan even splits the batch evenly unmeasured")
            : std::string("its plan is given: --batches/--micro-batches/--shares");
    for (const char* flag : {"--profile-repeats", "--profile-max-micro-batch"})
      if (engine.planner.empty() && app.count(flag) > 0)
        throw std::invalid_argument(std::string(flag) + " bounds the profile that a planner measures at start-up, "
                                    "but this run profiles nothing (" + plan_is + "); drop " + flag +
                                    ", or plan with --devices and --plan auto|gpumix|even|proportional|cephalo");
    return work;
  };
  const int cores = o.threads > 0 ? o.threads : (int)std::max(1u, std::thread::hardware_concurrency());

  gpumix::dist::announce_stop_signals(true);  // on the console, at once: a step may be long
  if (gpumix::dist::launched_by_mpi()) {
    // Only a --ranks the user gave is wrong here: --devices alone sets `ranks` above.
    if (app.count("--ranks") > 0)
      throw std::invalid_argument("--ranks is for the local backend; under mpirun use -np");
    gpumix::dist::MpiSession mpi(nullptr, nullptr, true, false);  // a second thread where the library allows (TopologyComm)
    auto comm = gpumix::dist::make_mpi_comm();
    const gpumix::LogScope log_scope(nullptr, comm->rank());  // the console, rank 0's lines
    // A lost node or rank ends every survivor at once, naming what was lost (peer_watch.h).
    gpumix::dist::PeerWatch watch(*comm, "resume from the last checkpoint on the nodes left: mpirun -np N gpumix train "
                                         "--resume " + o.out + " (re-planned for the ranks there)");
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
    gpumix::TrainResult result;
    try {
      // One run per folder: rank 0 holds the lock for the job (every rank fails alike).
      const gpumix::RunLock lock = gpumix::dist::lock_run_folder(o.out, *comm);
      result = gpumix::dist::train(o, work, *comm, engine);
    } catch (const gpumix::dist::CollectiveError& e) {
      // Every rank failed together with the same message: said once, and no rank is left
      // waiting, so the job ends without MPI_Abort.
      if (comm->rank() == 0) std::fprintf(stderr, "gpumix train: error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      // This rank's own failure, which its peers may not know of: end the job.
      watch.stand_down();
      comm->abort(std::string("rank ") + std::to_string(comm->rank()) + ": " + e.what());
    }
    return exit_code(result);
  }
  const auto work = make_work(ranks);
  const gpumix::RunLock lock(o.out);  // one run per folder, for the whole run
  return exit_code(gpumix::dist::train_local(o, ranks, devices, work, engine, cores));
}

}  // namespace

GPUMIX_COMMAND("train", "train a GPT on one or several ranks", cmd_train);
