// The run report: what a training run says, worded in one place. The step loop
// (dist/engine/trainer.cpp) measures; this file shows what it measured, on rank 0's console
// and in the run's log.jsonl (docs/design.md "What a person sees"): the settings table with
// the plan, one line per step (and a re-plan's), the predicted-vs-measured tables and the
// final summary. Every rank calls it alike; only rank 0 ("lead") prints and writes.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/dtype.h"
#include "dist/comm/comm.h"
#include "dist/engine/profiler.h"
#include "dist/plan/plan.h"
#include "dist/plan/planner_local.h"
#include "dist/plan/work.h"
#include "nn/eval.h"
#include "nn/optim.h"
#include "nn/run_data.h"
#include "nn/train_options.h"

namespace gpumix::dist {

// What a step computed, on every rank: the global loss and gradient norm, the learning
// rate, and why the optimizer step was skipped ("" when it was applied).
struct StepOutcome {
  double loss = 0, norm = 0;
  float lr = 0;
  std::string nonfinite;
};

// How long a step took: the slowest rank's time and each rank's compute time; and the time
// the run has left (EtaClock).
struct StepTime {
  double step_s = 0, ms = 0, tokens_per_s = 0;
  std::vector<double> busy_s;  // per rank: the step without its waits for collectives
  double eta_s = 0;
};

// The peak that MFU is measured against: the sum over the ranks of each rank's, which is
// a GPU's datasheet figure (dist/plan/device_catalog.h, dense 16-bit) over its emulated
// slowdown; else the planner's profiled GEMM (DeviceProfile::peak_flops); else, in a run
// without a profile, a GEMM measured at start-up (measure_gemm_peak, a few 512^3 products).
// The emulated GPU (-Demulated_cuda) has none: MFU n/a.
struct PeakFlops {
  double flops = 0;    // per second over all ranks; 0: unknown, MFU n/a
  std::string source;  // "datasheet H200 (989 TFLOP/s dense bf16)", "profiled GEMM", ...
};
// Collective: every rank passes its own device and the run's profile (null: none). A GPU's
// peak is its datasheet's, else the profile's, else a GEMM timed at start-up (every rank
// times one when any rank needs it).
PeakFlops run_peak_flops(Device device, DType dtype, const Profile* profile, Comm& comm, int repeats);

// Model FLOPs of a step, llm.c's count: 3 x the forward's (the backward twice the forward)
// = 6 x the matmul parameters + 6 L T C (causal attention) per token (GPTConfig::
// forward_flops_per_token), without recompute's extra forward.
double model_flops_per_step(const GPTConfig& config, int64_t seq, int64_t batch);
// flops / (step_s x peak), or -1 when the peak is unknown.
double mfu(double flops_per_step, double step_s, const PeakFlops& peak);

// The time a run has left: the mean wall time per step since the end of its first step
// (validation and checkpoints included; the first, which warms up, only until there is
// another), times the steps left.
class EtaClock {
 public:
  // After each step: how many this call has done and has left, the step's time, now.
  double seconds_left(int done, int left, double step_s, double now_s);

 private:
  double first_end_s_ = 0, first_step_s_ = 0;
};
// "1h02m", "3m05s", "42s".
std::string duration_text(double seconds);

// A validation pass: the loss on the first `windows` of the `total` windows and, at the last
// step when those are fewer than all, on all of them.
struct Validation {
  double loss = 0;
  int64_t windows = 0, total = 0;
  std::optional<double> full_loss;
};

// The run as the settings table shows it.
struct RunSettings {
  const RunData* data = nullptr;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t epoch_windows = 0;  // training windows in an epoch (BatchLoader::windows_per_epoch)
  GPTConfig model;
  std::string dtype;  // ComputeDtype::why
  int64_t seq = 0;
  int start = 0;      // the step the run starts after (the checkpoint's when resuming)
  LRSchedule schedule;
  int rank = 0, ranks = 1;
  std::string backend;  // the communicator's
  Work work;
  const ProfilerOptions* profiled = nullptr;  // the planner's start-up profile; null: no planner
  Device device;
  int threads = 1;  // OpenMP's, per rank
  int64_t choices = 0;  // --eval-choices: the examples each pass scores
  const LocalPlan* local = nullptr;  // --sync local:H with a planner: the groups' plan (its table follows the plan's)
};

// What the whole run shares, in the log line of its first step.
struct RunStart {
  Work work;
  DType dtype = DType::f32;
  double unigram_loss = 0;
};

// One step's report as the step assembles it: its log.jsonl record and its console text.
struct StepLine {
  nlohmann::json record;
  std::string text;                // the step's line (not shown with --quiet)
  std::vector<std::string> notes;  // shown even with --quiet: a re-plan and the new plan's table
};

// Local mode's groups as a run measured them (--sync local:H, dist/engine/outer_step.h).
struct LocalRunSummary {
  int every = 0;                    // H
  std::vector<int> group_of_rank;
  std::vector<int64_t> rows;        // per rank: its rows of every global batch
  std::vector<double> outer_s;      // each outer step's seconds on rank 0
  const LocalPlan* plan = nullptr;  // the groups' plan, whose predictions they are measured against (null: none)
};

// The end of the run as the step loop measured it.
struct RunSummary {
  TrainResult result;
  int last = 0;                          // the last step this call was to train
  std::vector<double> peak_bytes;        // per rank, since the running plan started
  const Plan* plan = nullptr;            // the plan whose predictions the run is measured against
  std::vector<std::vector<double>> busy_history;  // per step since the plan started: per rank
  double step_s = 0;                     // the median measured step since the plan started
  nlohmann::json collectives;            // the planned collectives against the timed (null: not measured)
  std::optional<LocalRunSummary> local;  // local mode with several groups
};

// Local mode, per group: its rows, its inner step (each step its ranks' longest busy time;
// the median after warm-up) and its wait per outer period, H x (the slowest group's inner
// step - its own), also as a share of the period (H x the slowest inner step + the outer
// step's median), measured and, with a local plan, predicted; the outer step and the
// period likewise. The groups meet only at the outer step (dist/engine/local_mode.h): a
// faster group's wait is spent there. The final log line's "groups" and "local".
nlohmann::json local_groups_vs_plan(const LocalRunSummary& local, const std::vector<std::vector<double>>& busy_history);

// The final validation line: "... vs unigram baseline 6.9114 (1.48 below)", or "(0.21
// above)" when the loss has not reached the baseline.
std::string validation_vs_baseline(double val_loss, int64_t windows, double unigram_loss);

// "5/1/0.73, 4/1/0.11": each rank's batch / micro-batch / state share (hybrid: and the groups).
std::string work_text(const Work& work);

class RunReport {
 public:
  RunReport(const TrainOptions& o, bool lead) : o_(o), lead_(lead) {}

  // log.jsonl, appended to (a resumed run continues its log).
  void open_log(const std::string& path);
  // What the step lines' MFU is measured with (before settings(), which names the peak).
  void set_mfu_basis(double flops_per_step, const PeakFlops& peak) {
    flops_per_step_ = flops_per_step;
    peak_ = peak;
  }
  // The settings table, then the predicting plan's table and its collectives (when measured).
  void settings(const RunSettings& s, const Plan* predicting, const nlohmann::json& collectives) const;

  // A step's line: its numbers (every rank's busy share when there are several), the first
  // step's RunStart, the plan's predictions.
  StepLine step(int step, const StepOutcome& s, const StepTime& t, const RunStart* first,
                const Plan* predicting) const;
  void add_validation(StepLine& line, const Validation& v) const;
  // --eval-choices: the accuracy (choices_acc, by the lowest mean loss per completion token),
  // choices_acc_sum (by the summed loss), the examples and chance.
  void add_choices(StepLine& line, const ChoicesScore& c) const;
  // A confirmed drift: Replanner::Change's record and message, the new plan when adopted.
  void add_replan(StepLine& line, int step, const nlohmann::json& record, const std::string& message,
                  const Plan* adopted) const;
  void write(const StepLine& line);

  // The final log line and, on the console, predicted vs measured (per rank, the step, the
  // collectives), the validation loss against the unigram baseline, the last checkpoint.
  void finish(const RunSummary& s);

 private:
  void log_line(const nlohmann::json& j);

  const TrainOptions& o_;
  const bool lead_;
  std::ofstream log_;
  double flops_per_step_ = 0;
  PeakFlops peak_;
  mutable nlohmann::json shown_collectives_;  // the collectives table settings() showed (null: none)
};

}  // namespace gpumix::dist
