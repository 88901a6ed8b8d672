// A picture of a run, from its log.jsonl (the trainer's JSON lines, README "Train"):
// training and validation loss against step with the unigram baseline as a line (the
// validation on the same first windows at every evaluation, and on all of them, each its
// own series: the two are different samples and must not be joined), tokens/s
// against step, and, on several ranks, each rank's busy share (compute time / step time)
// per step, and, with --eval-choices, the multiple-choice accuracy against step (beside
// chance, 1 / the completions). What the log lacks (no validation yet, no baseline, one rank) is said in the
// picture; a log that cannot be read is an InputError naming the file, the line and the
// field.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gpumix::draw {

struct RunLog {
  struct Step {
    int64_t step = 0;
    double loss = std::numeric_limits<double>::quiet_NaN();  // NaN: not finite (a skipped step)
    double tokens_per_s = std::numeric_limits<double>::quiet_NaN();
    double ms = std::numeric_limits<double>::quiet_NaN();  // the step's wall time (validation not included)
    std::vector<double> busy;  // per rank, fractions of the step; empty on one rank
  };
  // A validation estimate: on the first `windows` validation windows (0: the log does not
  // say), of `total` (0: not said); full when it covers them all.
  struct Eval {
    int64_t step = 0;
    double val_loss = 0;
    int64_t windows = 0, total = 0;
    bool full() const { return total > 0 && windows == total; }
  };
  // A multiple-choice pass (--eval-choices): the accuracy on `examples` examples.
  struct Choices {
    int64_t step = 0;
    double accuracy = 0;
    int64_t examples = 0;
  };
  std::string path;
  std::vector<Step> steps;  // by step; a step logged twice (a resume from an earlier
                            // checkpoint) keeps its last record
  std::vector<Eval> evals;  // by step, likewise: val_loss on val_windows of val_windows_total
  std::vector<Eval> full_evals;  // by step: the estimates on every window (val_full_loss, and
                                 // val_loss where val_windows is all of them)
  std::vector<Choices> choices;  // by step, likewise: choices_acc on choices_examples
  double choices_chance = std::numeric_limits<double>::quiet_NaN();  // 1 / completions; NaN: not said
  double unigram_loss = std::numeric_limits<double>::quiet_NaN();  // NaN: not in the log
  int ranks = 1;
  bool ignored_partial_last_line = false;  // a run killed mid-write leaves one
};

// Reads `path`: a run folder (its log.jsonl) or a log file.
RunLog read_run_log(const std::string& path);

std::string run_plot_svg(const RunLog& log, const std::string& title);

// Several runs in one picture (`gpumix plot RUN RUN... --labels`): each run's validation
// loss (the same first windows at every evaluation) against its training wall time (the
// sum of its steps' ms up to the evaluation: validation and start-up left out) or against
// its step, one colour per run, with the first run's last validation loss as a dashed line
// (the loss the others are timed to). A log without step times (ms) cannot be drawn against
// time: an InputError naming it.
enum class Axis { kStep, kWallTime };
std::string runs_plot_svg(const std::vector<RunLog>& logs, const std::vector<std::string>& labels, Axis x,
                          const std::string& title);

// Training wall time, in seconds, up to and including `step`: the sum of the logged steps'
// ms (a resumed run's earlier steps as last logged). NaN when a step lacks its ms.
double wall_time_s(const RunLog& log, int64_t step);

}  // namespace gpumix::draw
