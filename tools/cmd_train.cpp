// gpumix train: train a GPT on a corpus or token file, on one rank, on N ranks as threads
// of this process (--ranks N, the local backend), or on the ranks of an MPI job
// (mpirun -np N gpumix train ...). See dist/engine/trainer.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "dist/engine/launch.h"
#include "dist/engine/peer_watch.h"
#include "dist/engine/stop.h"
#include "dist/plan/plan.h"
#include "dist/plan/sync.h"
#include "nn/run_folder.h"
#include "nn/run_model.h"
#include "core/log.h"
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

// The values that "not given" shares with a value one can type: 0 and -1 in TrainOptions
// mean the model's context, the preset's shape, the default warmup; given on the command
// line they are refused like any other value out of range, saying what leaving the flag out
// does. Every other value is the launcher's to check (dist::check_train_options), before
// the run folder is made or locked, so that a refused run leaves nothing behind.
void check_given_flags(const CLI::App& app, const gpumix::TrainOptions& o) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  gpumix::tools::check_seq_flag(given("--seq"), o.seq, "the model's context");
  if (given("--warmup") && o.warmup < 0)
    throw std::invalid_argument("--warmup must be at least 0, got " + std::to_string(o.warmup) +
                                "; leave --warmup out for min(100, steps / 10)");
  if (given("--eval-choices-interval") && o.eval_choices_interval < 0)
    throw std::invalid_argument("--eval-choices-interval must be at least 0, got " +
                                std::to_string(o.eval_choices_interval) +
                                "; leave it out to score the choices at each validation (--eval-interval)");
  const std::pair<const char*, int> shape[] = {{"--layers", o.layers}, {"--heads", o.heads}, {"--channels", o.channels}};
  for (const auto& [flag, value] : shape)
    if (given(flag) && value < 1)
      throw std::invalid_argument(std::string(flag) + " must be at least 1, got " + std::to_string(value) +
                                  "; leave " + flag + " out for the preset's");
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
  app.add_option("--data", o.data,
                 "text corpus, folder of fortune files, or token data: a token file, llm.c shard or nanoGPT .bin, "
                 "a folder of them or a quoted glob ('fineweb_train_*.bin')")->required();
  app.add_option("--val-data", o.val_data,
                 "token data for validation, as --data (default: the last --val-fraction of --data)");
  std::string format = "auto";
  app.add_option("--format", format,
                 std::string("how --data is read: token files and llm.c shards by their header; text by ") +
                     gpumix::data::kTextFormatsHelp + "; or nanogpt (nanoGPT's headerless uint16 train.bin / val.bin)");
  app.add_option("--text-field", o.text_field, "the field of a JSONL line that holds its text")->capture_default_str();
  app.add_option("--vocab-size", o.vocab_size,
                 "the model's vocabulary for llm.c / nanoGPT token data, every token below it (default: the "
                 "tokenizer's, else the preset's; 50257 for GPT-2's)");
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
  // Multiple-choice evaluation (llm.c's eval files).
  auto* choices = app.add_option("--eval-choices", o.eval_choices,
                                 "an llm.c multiple-choice eval file (HellaSwag, MMLU: magic 20240522), scored as "
                                 "accuracy (choices_acc in log.jsonl) at each validation and at the end");
  app.add_option("--eval-choices-interval", o.eval_choices_interval,
                 "with --eval-choices: steps between its passes (default: --eval-interval's; 0: at the end only)")
      ->needs(choices);
  app.add_option("--eval-choices-examples", o.eval_choices_examples,
                 "with --eval-choices: its first N examples at each pass (0: all)")
      ->needs(choices);
  app.add_option("--ckpt-interval", o.ckpt_interval,
                 "steps between checkpoints (0: end only; with --sync local:H a multiple of H)");
  app.add_option("--keep-checkpoints", o.keep_checkpoints,
                 "keep the newest N checkpoints, deleting older ones once a newer one is complete (0: all)");
  app.add_option("--seed", o.seed, "random seed (initialisation and batch order)");
  app.add_option("--threads", o.threads, "CPU threads in all (default: all cores)");
  app.add_flag("--recompute", o.recompute, "recompute block activations in backward (one rank)");
  app.add_option("--val-fraction", o.val_fraction, "fraction of tokens held out for validation");
  app.add_option("--device-memory", device_memory, "emulated device memory per rank, e.g. 512MiB");
  app.add_option("--dtype", dtype, gpumix::dist::compute_dtype_help());
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
  std::string sync = "every-step";
  app.add_option("--sync", sync,
                 "every-step (default: every gradient synchronised every step), or local:H: the ranks train "
                 "in groups that exchange their parameter change every H steps through an outer optimizer "
                 "(DiLoCo-style; checkpoints right after an outer step)");
  app.add_option("--groups", engine.sync.groups,
                 "with --sync local:H: N groups of consecutive ranks (default: one group per node)");
  app.add_option("--outer-lr", engine.sync.outer_lr, "with --sync local:H: the outer optimizer's learning rate (default 0.7)");
  app.add_option("--outer-momentum", engine.sync.outer_momentum,
                 "with --sync local:H: the outer optimizer's momentum (default 0.9)");
  bool outer_plain = false;
  app.add_flag("--outer-no-nesterov", outer_plain, "with --sync local:H: plain momentum instead of Nesterov's");
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
  check_given_flags(app, o);
  o.format = gpumix::data::parse_corpus_format(format);
  if (!device_memory.empty()) o.device_memory = gpumix::tools::parse_bytes(device_memory);
  if (!trace_steps.empty()) {
    if (engine.trace.empty()) throw std::invalid_argument("--trace-steps needs --trace FILE, the file to write");
    std::tie(engine.trace_first, engine.trace_last) = parse_trace_steps(trace_steps);
  }
  o.dtype = gpumix::tools::parse_dtype_flag(dtype);
  gpumix::tools::check_profile_flags(engine.profiler.repeats, engine.profiler.max_micro_batch, "--profile-repeats",
                                     "--profile-max-micro-batch");
  engine.prefetch = !no_prefetch;
  {
    gpumix::dist::LocalSync parsed = gpumix::dist::parse_sync(sync);
    std::vector<std::string> local_flags;
    for (const char* flag : {"--groups", "--outer-lr", "--outer-momentum", "--outer-no-nesterov"})
      if (app.count(flag) > 0) local_flags.push_back(flag);
    gpumix::dist::check_local_only_flags(parsed, local_flags);
    parsed.groups = engine.sync.groups;
    parsed.outer_lr = engine.sync.outer_lr;
    parsed.outer_momentum = engine.sync.outer_momentum;
    parsed.nesterov = !outer_plain;
    engine.sync = parsed;
  }
  if (!sharding.empty()) engine.sharding = gpumix::tools::parse_sharding_flag(sharding);
  gpumix::dist::LaunchRequest request{o, devices_text, ranks, plan, engine, !sharding.empty(), {}};
  for (const char* flag : {"--profile-repeats", "--profile-max-micro-batch"})
    if (app.count(flag) > 0) request.profile_bounds_given.push_back(flag);
  const std::string fix = "continue it with --resume " + o.out + ", or pass another --out";

  gpumix::dist::announce_stop_signals(true);  // on the console, at once: a step may be long
  if (!gpumix::dist::launched_by_mpi()) {
    const gpumix::dist::Launch launch = gpumix::dist::prepare_launch(request);
    // One run per folder, for the whole run.
    const gpumix::RunLock lock = gpumix::dist::claim_run_folder(o.out, !o.resume.empty(), fix);
    return exit_code(gpumix::dist::run_launch(launch));
  }
  // Only a --ranks the user gave is wrong here.
  if (app.count("--ranks") > 0) throw std::invalid_argument("--ranks is for the local backend; under mpirun use -np");
  gpumix::dist::MpiSession mpi(nullptr, nullptr, true, false);  // a second thread where the library allows (TopologyComm)
  auto comm = gpumix::dist::make_mpi_comm();
  const gpumix::LogScope log_scope(nullptr, comm->rank());  // the console, rank 0's lines
  // A lost node or rank ends every survivor at once, naming what was lost (peer_watch.h).
  gpumix::dist::PeerWatch watch(*comm, "resume from the last checkpoint on the nodes left: mpirun -np N gpumix train "
                                       "--resume " + o.out + " (re-planned for the ranks there)");
  // Processes on one node share its cores.
  const gpumix::dist::Launch launch =
      gpumix::dist::prepare_launch(request, comm.get(), (int)comm->ranks_of_node(comm->node()).size());
  gpumix::TrainResult result;
  try {
    // One run per folder: rank 0 holds the lock for the job (every rank fails alike).
    const gpumix::RunLock lock = gpumix::dist::claim_run_folder(o.out, !o.resume.empty(), fix, comm.get());
    result = gpumix::dist::run_launch(launch, comm.get());
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

}  // namespace

GPUMIX_COMMAND("train", "train a GPT on one or several ranks", cmd_train);
