#include "dist/engine/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/log.h"
#include "dist/engine/replan.h"
#include "dist/engine/stop.h"
#include "dist/plan/device_catalog.h"
#include "dist/plan/simulator.h"

namespace gpumix::dist {

using json = nlohmann::json;

namespace {

std::vector<double> ms_of(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double x : seconds) ms.push_back(x * 1e3);
  return ms;
}

// "predicted vs measured, per collective kind", one row per kind.
std::string collectives_text(const json& collectives) {
  std::string text = "predicted vs measured, per collective kind (one block; the embedding once a step; " +
                     collectives["over"].get<std::string>() + ")\n";
  auto rows = [&](const json& of, const std::string& prefix) {
    for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"}) {
      if (!of.contains(kind)) continue;
      const json& c = of[kind];
      char row[240];
      std::snprintf(row, sizeof row, "%-25s %8.2f ms predicted %8.2f ms measured  ratio %.2f%s\n",
                    (prefix + kind).c_str(), c["predicted_ms"].get<double>(), c["measured_ms"].get<double>(),
                    c["ratio"].get<double>(), c.contains("form") ? (" (" + c["form"].get<std::string>() + ")").c_str() : "");
      text += row;
    }
  };
  rows(collectives, "");
  if (collectives.contains("embedding")) rows(collectives["embedding"], "embedding ");
  return text;
}

// "predicted vs measured, per group of local mode", one row per group.
std::string local_groups_text(const json& j) {
  const json& l = j["local"];
  auto pm = [](const json& x, const char* f) {  // "predicted / measured", "-" for a missing prediction
    char a[64], b[64];
    std::snprintf(a, sizeof a, f, x.contains("predicted") ? x["predicted"].get<double>() : 0.0);
    std::snprintf(b, sizeof b, f, x["measured"].get<double>());
    return (x.contains("predicted") ? std::string(a) : std::string("-")) + " / " + b;
  };
  std::string text = str("predicted vs measured, per group of local mode (--sync local:", l["every"].get<int>(),
                         "; predicted / measured): outer step ", pm(l["outer_ms"], "%.2f"), " ms, period ",
                         pm(l["period_ms"], "%.1f"), " ms\n");
  char row[256];
  std::snprintf(row, sizeof row, "%5s %-12s %6s %22s %22s %18s\n", "group", "ranks", "rows", "inner step ms",
                "wait ms per period", "wait % of period");
  text += row;
  for (const json& g : j["groups"]) {
    const std::vector<int> members = g["ranks"].get<std::vector<int>>();
    std::string ranks;  // "0-3" for consecutive ranks, as the plan's table
    if (members.size() > 1 && members.back() - members.front() + 1 == (int)members.size())
      ranks = str(members.front(), "-", members.back());
    else
      for (size_t i = 0; i < members.size(); ++i) ranks += str(i ? "," : "", members[i]);
    std::snprintf(row, sizeof row, "%5d %-12s %6lld %22s %22s %18s\n", g["group"].get<int>(), ranks.c_str(),
                  (long long)g["rows"].get<int64_t>(), pm(g["inner_ms"], "%.2f").c_str(),
                  pm(g["wait_ms"], "%.1f").c_str(), pm(g["wait_pct"], "%.1f").c_str());
    text += row;
  }
  return text;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

json local_groups_vs_plan(const LocalRunSummary& local, const std::vector<std::vector<double>>& busy_history) {
  const std::vector<int>& group_of = local.group_of_rank;
  const int G = *std::max_element(group_of.begin(), group_of.end()) + 1;
  const int H = local.every;
  std::vector<double> inner(G, 0);
  std::vector<int64_t> rows(G, 0);
  std::vector<std::vector<int>> ranks(G);
  for (size_t r = 0; r < group_of.size(); ++r) {
    ranks[group_of[r]].push_back((int)r);
    rows[group_of[r]] += local.rows[r];
  }
  for (int g = 0; g < G; ++g) {
    std::vector<double> per_step;
    for (const std::vector<double>& step : busy_history) {
      double longest = 0;
      for (int r : ranks[g]) longest = std::max(longest, step[r]);
      per_step.push_back(longest);
    }
    inner[g] = median_after_warm_up(per_step);
  }
  const double slowest = *std::max_element(inner.begin(), inner.end());
  const double outer = median(local.outer_s), period = H * slowest + outer;
  const LocalPlan* plan = local.plan;
  auto pair = [](double measured, const double* predicted) {
    json x = {{"measured", measured}};
    if (predicted) x["predicted"] = *predicted;
    return x;
  };
  json groups = json::array();
  for (int g = 0; g < G; ++g) {
    const SyncGroupPrediction* p = nullptr;  // the plan's group g (plan_local keeps sync_groups' numbers)
    if (plan)
      for (const SyncGroupPrediction& q : plan->groups)
        if (q.group == g) p = &q;
    const double wait = H * (slowest - inner[g]);
    const double p_inner = p ? 1e3 * p->inner_s : 0, p_wait = p ? 1e3 * p->wait_s : 0;
    const double p_pct = p && plan->period_s > 0 ? 100 * p->wait_s / plan->period_s : 0;
    json j = {{"group", g}, {"ranks", ranks[g]}, {"rows", rows[g]},
              {"inner_ms", pair(1e3 * inner[g], p ? &p_inner : nullptr)},
              {"wait_ms", pair(1e3 * wait, p ? &p_wait : nullptr)},
              {"wait_pct", pair(period > 0 ? 100 * wait / period : 0.0, p ? &p_pct : nullptr)}};
    if (p) j["outer_comm_ms"] = {{"predicted", 1e3 * (p->exchange_s + plan->cross_s)}};
    groups.push_back(j);
  }
  const double p_outer = plan ? 1e3 * plan->outer_s : 0, p_period = plan ? 1e3 * plan->period_s : 0;
  return {{"local", {{"every", H}, {"outer_steps", local.outer_s.size()},
                     {"outer_ms", pair(1e3 * outer, plan ? &p_outer : nullptr)},
                     {"period_ms", pair(1e3 * period, plan ? &p_period : nullptr)}}},
          {"groups", groups}};
}

PeakFlops run_peak_flops(Device device, DType dtype, const Profile* profile, Comm& comm, int repeats) {
  const DeviceProps props = device_props(device);
#ifdef GPUMIX_CUDA_EMULATOR
  // The emulated GPU has an H200's name, not its speed (nor any speed worth a peak).
  const bool emulated_gpu = device.is_cuda();
#else
  const bool emulated_gpu = false;
#endif
  const DeviceSpec* spec = device.is_cuda() && !emulated_gpu ? find_gpu_spec(props.name) : nullptr;
  // A GEMM is timed only where neither a datasheet nor the profile gives the peak (a CPU
  // without a profile): the timing is collective, so every rank joins when any needs it.
  const bool need = !spec && !profile && !emulated_gpu;
  GemmPeak measured;
  if (comm.size() > 1 ? comm.all_reduce_max(need ? 1.0 : 0.0) > 0 : need)
    measured = measure_gemm_peak(device, dtype, comm, repeats);
  double mine = 0;
  std::string source;
  if (emulated_gpu) {
    source = "the emulated GPU (no speed to compare)";
  } else if (spec) {
    mine = spec->peak_tflops * 1e12 / std::max(1.0, props.slowdown);
    source = str("datasheet ", spec->name, " (", spec->peak_tflops, " TFLOP/s dense 16-bit",
                 props.slowdown > 1 ? str(" / slowdown ", props.slowdown) : std::string(), ")");
  } else if (profile && comm.rank() < profile->num_ranks()) {
    mine = profile->rank_device(comm.rank()).peak_flops;
    source = "profiled GEMM";
  } else if (!profile) {
    mine = measured.flops;
    source = "GEMM " + measured.shape + " measured at start-up";
  }
  PeakFlops peak;
  // Unknown on any rank: unknown for the run.
  const double unknown = comm.size() > 1 ? comm.all_reduce_max(mine > 0 ? 0.0 : 1.0) : (mine > 0 ? 0.0 : 1.0);
  const double total = comm.size() > 1 ? comm.all_reduce_sum(mine) : mine;
  peak.flops = unknown > 0 ? 0 : total;
  peak.source = comm.size() > 1 ? str("over ", comm.size(), " ranks; rank 0: ", source) : source;
  return peak;
}

double model_flops_per_step(const GPTConfig& config, int64_t seq, int64_t batch) {
  return 3.0 * config.forward_flops_per_token((int)seq) * (double)seq * (double)batch;
}

double mfu(double flops_per_step, double step_s, const PeakFlops& peak) {
  return peak.flops > 0 && step_s > 0 ? flops_per_step / (step_s * peak.flops) : -1;
}

double EtaClock::seconds_left(int done, int left, double step_s, double now_s) {
  if (done <= 1) {
    first_end_s_ = now_s;
    first_step_s_ = step_s;
    return left * step_s;
  }
  return left * (now_s - first_end_s_) / (done - 1);
}

std::string duration_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%lds", s);
  return text;
}

std::string validation_vs_baseline(double val_loss, int64_t windows, double unigram_loss) {
  const double gap = unigram_loss - val_loss;
  char line[256];
  std::snprintf(line, sizeof line, "validation loss %.4f nats/token (%lld windows) vs unigram baseline %.4f (%.2f %s)",
                val_loss, (long long)windows, unigram_loss, std::fabs(gap), gap >= 0 ? "below" : "above");
  return line;
}

std::string work_text(const Work& work) {
  std::string text;
  for (size_t r = 0; r < work.ranks.size(); ++r)
    text += str(r ? ", " : "", work.ranks[r].batch, "/", work.ranks[r].micro_batch, "/", work.ranks[r].share);
  if (work.sharding.hybrid())  // the shares are then of each group's state
    text += str(", hybrid: ", work.ranks.size() / work.sharding.group_size, " groups of ", work.sharding.group_size);
  return text;
}

void RunReport::open_log(const std::string& path) {
  if (!lead_) return;
  log_.open(path, std::ios::app);
  GPUMIX_CHECK_INPUT(log_.good(), "cannot write ", path);
}

void RunReport::log_line(const json& j) {
  if (!lead_) return;
  log_ << j.dump() << "\n";
  log_.flush();
}

void RunReport::settings(const RunSettings& s, const Plan* predicting, const json& collectives) const {
  const RankWork& mine = s.work.ranks[s.rank];
  const std::string capacity = format_bytes(device_props(s.device).capacity);
  // Each rank's own work, for a log of every rank (debug).
  log_debug("rank ", s.rank, " of ", s.ranks, ": ", s.device.str(), " (", capacity, "), batch ", mine.batch,
            ", micro-batch ", mine.micro_batch, ", state share ", mine.share);
  if (!lead_) return;
  const GPTConfig& config = s.model;
  const bool resuming = !o_.resume.empty();
  const std::string peak_text = peak_.flops > 0 ? format_si(peak_.flops, "FLOP/s") + " (" + peak_.source + ")"
                                                : "n/a (no peak known), MFU not shown";
  const int every = o_.eval_choices_interval;
  const std::string choices_text =
      o_.eval_choices.empty() ? "none"
                              : str(o_.eval_choices, ", ", s.choices, " examples, ",
                                    every == 0 ? std::string("at the end")
                                               : every > 0 ? str("every ", every, " steps") : "at each validation");
  char epochs_text[160];
  std::snprintf(epochs_text, sizeof epochs_text, "%lld windows an epoch, each read once in shuffled order; %d steps read %.2f epochs",
                (long long)s.epoch_windows, o_.steps, (double)o_.steps * o_.batch / (double)std::max<int64_t>(s.epoch_windows, 1));
  gpumix::print_settings({
      {"data", o_.data + " (" + human_count((double)s.data->tokens.size()) + " tokens)"},
      {"format", s.data->format},
      {"split", human_count((double)s.train_tokens) + " train / " + human_count((double)s.val_tokens) + " validation"},
      {"epochs", epochs_text},
      {"tokenizer", s.data->tokenizer_path + " (vocab " + std::to_string(s.data->vocab) + ")"},
      {"model", config.name + " L=" + std::to_string(config.L) + " NH=" + std::to_string(config.NH) +
                    " C=" + std::to_string(config.C) + " T=" + std::to_string(config.T)},
      {"parameters", human_count((double)config.saved_params())},
      {"dtype", s.dtype},
      {"batch x seq", std::to_string(o_.batch) + " x " + std::to_string(s.seq) + " = " +
                          std::to_string(o_.batch * s.seq) + " tokens/step"},
      {"steps", std::to_string(o_.steps) + (resuming ? " (from step " + std::to_string(s.start) + ")" : "")},
      {"init from", o_.init_from.empty() ? "(random, seed " + std::to_string(o_.seed) + ")" : o_.init_from},
      {"lr", str(o_.lr, " warmup ", s.schedule.warmup, " cosine to ", s.schedule.min_lr)},
      {"weight decay / clip", str(o_.weight_decay, " / ", o_.grad_clip)},
      {"ranks", str(s.ranks, " (", s.backend, ")")},
      {"plan b/m/r per rank", work_text(s.work)},
      // What the planner's profile measured (or its cache held): its bounds.
      {"profile", s.profiled ? str("micro-batches <= ", s.profiled->max_micro_batch, ", ", s.profiled->repeats,
                                   s.profiled->repeats == 1 ? " repeat" : " repeats")
                             : std::string("none (no planner)")},
      {"recompute", s.ranks > 1 || o_.recompute ? "on" : "off"},
      {"device (rank 0)", s.device.str() + " (" + capacity + ")"},
      {"MFU peak", peak_text},
      {"eval choices", choices_text},
      {"threads per rank", std::to_string(s.threads)},
      {"seed", std::to_string(o_.seed)},
      {"out", o_.out},
  });
  if (predicting) log_info(plan_table(*predicting));
  if (s.local) log_info(local_plan_table(*s.local));
  if (!collectives.is_null()) log_info(collectives_text(collectives));
  shown_collectives_ = collectives;
}

StepLine RunReport::step(int step, const StepOutcome& s, const StepTime& t, const RunStart* first,
                         const Plan* predicting) const {
  StepLine line;
  json& record = line.record;
  record = {{"step", step}, {"loss", s.loss}, {"norm", s.norm}, {"lr", s.lr}, {"ms", t.ms},
            {"tokens_per_s", t.tokens_per_s}, {"eta_s", t.eta_s}};
  const double step_mfu = mfu(flops_per_step_, t.step_s, peak_);
  if (step_mfu >= 0) record["mfu"] = step_mfu;
  if (!s.nonfinite.empty()) {  // JSON has no NaN: the numbers become null, with the reason
    record["loss"] = std::isfinite(s.loss) ? json(s.loss) : json(nullptr);
    record["norm"] = std::isfinite(s.norm) ? json(s.norm) : json(nullptr);
    record["skipped"] = s.nonfinite;
  }
  char text[256];
  std::snprintf(text, sizeof text, "step %d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s tok/s", step,
                o_.steps, s.loss, s.norm, s.lr, t.ms, human_count(t.tokens_per_s).c_str());
  line.text = text;
  if (step_mfu >= 0) {
    std::snprintf(text, sizeof text, " | MFU %.1f%%", 100 * step_mfu);
    line.text += text;
  } else {
    line.text += " | MFU n/a";
  }
  line.text += " | ETA " + duration_text(t.eta_s);
  if (t.busy_s.size() > 1) {
    std::vector<double> fraction;
    line.text += " | busy";
    for (double b : t.busy_s) {
      fraction.push_back(b / t.step_s);
      line.text += str(" ", (int)std::lround(100 * b / t.step_s), "%");
    }
    record["busy"] = fraction;
    record["busy_ms"] = ms_of(t.busy_s);
  }
  if (first) {  // what the whole run shares: the plan, the compute dtype, the baseline to beat
    record["plan"] = work_text(first->work);  // b/m/r per rank, as in the settings
    record["dtype"] = dtype_name(first->dtype);
    record["unigram_loss"] = first->unigram_loss;
    record["flops_per_step"] = flops_per_step_;  // what mfu is: flops_per_step / (ms / 1e3 x peak_flops)
    record["peak_flops"] = peak_.flops > 0 ? json(peak_.flops) : json(nullptr);
    record["peak"] = peak_.source;
  }
  if (predicting) {
    record["predicted_ms"] = predicting->predicted.step_s * 1e3;
    record["predicted_busy_ms"] = ms_of(predicted_busy_s(*predicting));
  }
  return line;
}

void RunReport::add_validation(StepLine& line, const Validation& v) const {
  line.record["val_loss"] = v.loss;
  line.record["val_windows"] = v.windows;
  line.record["val_windows_total"] = v.total;
  line.text += str(" | val ", v.loss, " (", v.windows, v.windows == v.total ? " windows, all)" : " windows)");
  if (v.full_loss) {
    line.record["val_full_loss"] = *v.full_loss;
    line.text += str(" | full val ", *v.full_loss, " (", v.total, " windows)");
  }
}

void RunReport::add_choices(StepLine& line, const ChoicesScore& c) const {
  line.record["choices_acc"] = c.accuracy();
  line.record["choices_acc_sum"] = c.accuracy_sum();
  line.record["choices_examples"] = c.examples;
  line.record["choices_chance"] = c.chance();
  if (c.truncated > 0) line.record["choices_truncated"] = c.truncated;
  char text[96];
  std::snprintf(text, sizeof text, " | choices %.1f%% of %lld (chance %.0f%%)", 100 * c.accuracy(),
                (long long)c.examples, 100 * c.chance());
  line.text += text;
}

void RunReport::add_replan(StepLine& line, int step, const json& record, const std::string& message,
                           const Plan* adopted) const {
  line.record["replan"] = record;
  line.notes.push_back(str("step ", step, ": ", message));
  if (adopted) line.notes.push_back(plan_table(*adopted));
}

void RunReport::write(const StepLine& line) {
  log_line(line.record);
  if (!lead_) return;
  if (!o_.quiet && log_enabled(LogLevel::info)) log_info(line.text);
  for (const std::string& note : line.notes) log_info(note);
}

void RunReport::finish(const RunSummary& s) {
  const TrainResult& result = s.result;
  json final_line = {{"final", true}, {"step", result.step}, {"val_loss", result.val_loss},
                     {"val_windows", result.val_windows}, {"unigram_loss", result.unigram_loss},
                     {"tokens_per_s", result.tokens_per_s}};
  // Memory: every rank's allocator peak since the running plan started, next to its
  // prediction.
  final_line["peak_bytes"] = s.peak_bytes;
  const Plan* plan = s.plan;
  if (plan) final_line["predicted_bytes"] = predicted_bytes(*plan);
  if (plan && !s.busy_history.empty()) {  // compute per step, per rank: as prediction_table prints it
    std::vector<double> measured;
    for (size_t r = 0; r < s.peak_bytes.size(); ++r) {
      std::vector<double> b;
      for (const std::vector<double>& step : s.busy_history) b.push_back(step[r]);
      measured.push_back(median_after_warm_up(b) * 1e3);
    }
    final_line["busy_ms"] = {{"predicted", ms_of(predicted_busy_s(*plan))}, {"measured", measured}};
  }
  if (!s.collectives.is_null()) final_line["collectives"] = s.collectives;
  json groups;  // local mode: per group, predicted vs measured
  if (s.local && !s.busy_history.empty()) {
    groups = local_groups_vs_plan(*s.local, s.busy_history);
    final_line["local"] = groups["local"];
    final_line["groups"] = groups["groups"];
  }
  // The step: the plan's prediction against the median measured since it started.
  if (plan && s.step_s > 0)
    final_line["step_ms"] = {{"predicted", plan->predicted.step_s * 1e3}, {"measured", s.step_s * 1e3},
                             {"ratio", s.step_s / plan->predicted.step_s}};
  // A stopped run was not validated at its end.
  const bool validated = !result.stop_signal || result.step == s.last;
  if (result.stop_signal) {
    final_line["stopped"] = signal_name(result.stop_signal);
    if (!validated) final_line.erase("val_loss");
  }
  log_line(final_line);
  if (!lead_) return;
  if (plan && !s.busy_history.empty()) log_info(prediction_table(*plan, s.busy_history, s.peak_bytes));
  if (final_line.contains("step_ms")) {
    char row[200];
    std::snprintf(row, sizeof row, "predicted vs measured, the step: %.1f ms predicted, %.1f ms measured (median), "
                  "ratio %.2f", final_line["step_ms"]["predicted"].get<double>(),
                  final_line["step_ms"]["measured"].get<double>(), final_line["step_ms"]["ratio"].get<double>());
    log_info(row);
  }
  // Shown again only when a re-plan measured them anew (the settings showed the start's).
  if (!s.collectives.is_null() && s.collectives != shown_collectives_) log_info(collectives_text(s.collectives));
  if (!groups.is_null()) log_info(local_groups_text(groups));
  if (validated) {
    log_info(validation_vs_baseline(result.val_loss, result.val_windows, result.unigram_loss));
  }
  if (!result.checkpoint.empty()) log_info("checkpoint: ", result.checkpoint);
}

}  // namespace gpumix::dist
