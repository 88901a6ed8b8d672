#include "draw/run_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "draw/svg.h"

namespace gpumix::draw {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- reading --------------------------------------------------------------------------------

namespace {

// A number field of a log line: absent (false), null (NaN), or a number.
bool number_field(const json& j, const char* name, double* out, const std::string& where) {
  const auto it = j.find(name);
  if (it == j.end()) return false;
  if (it->is_null()) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  GPUMIX_CHECK_INPUT(it->is_number(), where, ": field '", name, "' is ", it->dump(), ", not a number");
  *out = it->get<double>();
  return true;
}

}  // namespace

RunLog read_run_log(const std::string& path) {
  RunLog log;
  log.path = fs::is_directory(path) ? (fs::path(path) / "log.jsonl").string() : path;
  std::ifstream in(log.path, std::ios::binary);
  GPUMIX_CHECK_INPUT(in.good(), "cannot read ", log.path, ": ",
                     fs::exists(log.path) ? "permission denied or not a file"
                                          : "it does not exist (is " + path + " a run folder of `gpumix train`?)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  std::map<int64_t, RunLog::Step> steps;
  std::map<int64_t, RunLog::Eval> evals, full_evals;
  std::map<int64_t, RunLog::Choices> choices;
  size_t begin = 0;
  int64_t line_no = 0, records = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = log.path + " line " + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      if (!terminated && records > 0) {  // the last line of a run killed while writing it
        log.ignored_partial_last_line = true;
        break;
      }
      throw InputError(where + " is not valid JSON (" + e.what() + "); is this a log.jsonl of `gpumix train`?");
    }
    GPUMIX_CHECK_INPUT(j.is_object(), where, " is ", j.dump().substr(0, 40), ", not a JSON object");
    ++records;
    double value = 0;
    const auto final_it = j.find("final");
    if (final_it != j.end() && *final_it == true) {  // the closing line: the baseline
      if (number_field(j, "unigram_loss", &value, where)) log.unigram_loss = value;
      continue;
    }
    const auto step_it = j.find("step");
    GPUMIX_CHECK_INPUT(step_it != j.end() && step_it->is_number_integer() && step_it->get<int64_t>() >= 0, where,
                       ": no step number (field 'step' is ", step_it == j.end() ? "absent" : step_it->dump(),
                       "); is this a log.jsonl of `gpumix train`?");
    RunLog::Step s;
    s.step = step_it->get<int64_t>();
    GPUMIX_CHECK_INPUT(number_field(j, "loss", &s.loss, where), where, ": step ", s.step, " has no field 'loss'");
    number_field(j, "tokens_per_s", &s.tokens_per_s, where);
    number_field(j, "ms", &s.ms, where);
    if (number_field(j, "unigram_loss", &value, where)) log.unigram_loss = value;
    if (j.contains("busy")) {
      const json& b = j["busy"];
      GPUMIX_CHECK_INPUT(b.is_array(), where, ": field 'busy' is ", b.dump().substr(0, 40),
                         ", not an array of per-rank fractions");
      for (const json& f : b) {
        GPUMIX_CHECK_INPUT(f.is_number(), where, ": field 'busy' holds ", f.dump(), ", not a number");
        s.busy.push_back(f.get<double>());
      }
      log.ranks = std::max(log.ranks, (int)s.busy.size());
    }
    if (number_field(j, "val_loss", &value, where) && std::isfinite(value)) {
      RunLog::Eval e;
      e.step = s.step;
      e.val_loss = value;
      double windows = 0, total = 0;
      if (number_field(j, "val_windows", &windows, where) && std::isfinite(windows)) e.windows = (int64_t)windows;
      if (number_field(j, "val_windows_total", &total, where) && std::isfinite(total)) e.total = (int64_t)total;
      if (e.full()) {
        full_evals[s.step] = e;
        evals.erase(s.step);  // a resume that re-logged the step with all windows
      } else {
        evals[s.step] = e;
        full_evals.erase(s.step);
      }
      if (number_field(j, "val_full_loss", &value, where) && std::isfinite(value))
        full_evals[s.step] = {s.step, value, e.total, e.total};
    }
    if (number_field(j, "choices_acc", &value, where) && std::isfinite(value)) {
      RunLog::Choices c{s.step, value, 0};
      double examples = 0;
      if (number_field(j, "choices_examples", &examples, where) && std::isfinite(examples)) c.examples = (int64_t)examples;
      choices[s.step] = c;
      if (number_field(j, "choices_chance", &value, where) && std::isfinite(value)) log.choices_chance = value;
    }
    steps[s.step] = std::move(s);
  }
  GPUMIX_CHECK_INPUT(!steps.empty(), log.path, records > 0 ? " has no step lines" : " is empty",
                     ": the run has not finished a step yet");
  for (auto& [step, s] : steps) log.steps.push_back(std::move(s));
  for (const auto& [step, e] : evals) log.evals.push_back(e);
  for (const auto& [step, e] : full_evals) log.full_evals.push_back(e);
  for (const auto& [step, c] : choices) log.choices.push_back(c);
  return log;
}

// ---- drawing --------------------------------------------------------------------------------

namespace {

using Points = std::vector<std::pair<double, double>>;

// About `target` round values (1, 2 or 5 times a power of ten apart) covering [lo, hi];
// *lo and *hi widen to the outer ticks.
std::vector<double> nice_ticks(double* lo, double* hi, int target) {
  if (!(*hi > *lo)) {
    const double pad = std::max(std::abs(*lo) * 0.05, 0.5);
    *lo -= pad;
    *hi += pad;
  }
  const double raw = (*hi - *lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  *lo = std::floor(*lo / step + 1e-9) * step;
  *hi = std::ceil(*hi / step - 1e-9) * step;
  std::vector<double> ticks;
  const double n = std::round((*hi - *lo) / step);
  for (int i = 0; i <= n && i <= 4 * target; ++i) {  // by index: lo + step may round to lo
    const double t = *lo + i * step;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

// A tick label with as many decimals as the spacing needs.
std::string tick_label(double v, double spacing, bool as_count) {
  if (as_count && std::abs(v) >= 1000) return human_count(v);
  const int decimals = std::max(0, (int)std::ceil(-std::log10(spacing) - 1e-9));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 6), v);
  return buf;
}

struct Series {
  std::string name;
  const char* color;
  const char* css_class;  // names the series in the SVG (tests, stylesheets)
  Points points;          // (step, value)
  bool markers = false;   // a small square at each point
  bool dashed = false;
  std::string missing;    // shown in the legend when `points` is empty
};

constexpr double kWidth = 940, kPlotLeft = 80, kPlotRight = 700, kPanelHeight = 250, kPlotHeight = 180;

// One chart: axes with ticks and labels, the series, and a legend to its right. Returns the
// height used. y_lo/y_hi: NaN for "fit the data".
double draw_panel(std::string& o, double top, const std::string& title, const std::string& y_label,
                  double x_lo, double x_hi, double y_lo, double y_hi, const std::vector<Series>& series,
                  bool y_counts = false, bool y_percent = false, const std::string& x_label = "step") {
  const double plot_top = top + 30, plot_bottom = plot_top + kPlotHeight;
  double lo = y_lo, hi = y_hi;
  if (std::isnan(lo) || std::isnan(hi)) {
    double data_lo = INFINITY, data_hi = -INFINITY;
    for (const Series& s : series)
      for (const auto& p : s.points) {
        data_lo = std::min(data_lo, p.second);
        data_hi = std::max(data_hi, p.second);
      }
    if (!std::isfinite(data_lo)) data_lo = 0, data_hi = 1;
    if (std::isnan(lo)) lo = data_lo;
    if (std::isnan(hi)) hi = data_hi;
  }
  const std::vector<double> yt = nice_ticks(&lo, &hi, 5);
  double xl = x_lo, xh = x_hi;
  const std::vector<double> xt = nice_ticks(&xl, &xh, 8);
  auto px = [&](double x) { return kPlotLeft + (x - xl) / (xh - xl) * (kPlotRight - kPlotLeft); };
  auto py = [&](double y) { return plot_bottom - (y - lo) / (hi - lo) * kPlotHeight; };

  svg_text(o, kPlotLeft, top + 18, title, " font-size='13' font-weight='bold'");
  // Grid, ticks and their labels.
  const double y_spacing = yt.size() > 1 ? yt[1] - yt[0] : 1, x_spacing = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double t : yt) {
    svg_line(o, kPlotLeft, py(t), kPlotRight, py(t), "#e6e6e6");
    svg_line(o, kPlotLeft - 4, py(t), kPlotLeft, py(t), "black");
    const std::string label = y_percent ? tick_label(100 * t, 100 * y_spacing, false) + "%"
                                        : tick_label(t, y_spacing, y_counts);
    svg_text(o, kPlotLeft - 7, py(t) + 4, label, " text-anchor='end'");
  }
  for (double t : xt) {
    svg_line(o, px(t), plot_bottom, px(t), plot_bottom + 4, "black");
    svg_text(o, px(t), plot_bottom + 16, tick_label(t, x_spacing, true), " text-anchor='middle'");
  }
  svg_rect(o, kPlotLeft, plot_top, kPlotRight - kPlotLeft, kPlotHeight, "none", " stroke='black'");
  svg_text(o, (kPlotLeft + kPlotRight) / 2, plot_bottom + 32, x_label, " text-anchor='middle'");
  char rotate[96];
  std::snprintf(rotate, sizeof rotate, " text-anchor='middle' transform='rotate(-90 %.1f %.1f)'", kPlotLeft - 55,
                (plot_top + plot_bottom) / 2);
  svg_text(o, kPlotLeft - 55, (plot_top + plot_bottom) / 2, y_label, rotate);

  // The series: one point per pixel column at most (the mean of the steps it covers).
  for (const Series& s : series) {
    Points pts;
    std::map<long, std::pair<double, int>> columns;
    for (const auto& [x, y] : s.points) {
      auto& c = columns[std::lround(px(x))];
      c.first += y;
      c.second += 1;
    }
    for (const auto& [col, sum] : columns) pts.emplace_back((double)col, py(sum.first / sum.second));
    if (s.points.size() <= columns.size()) {  // no two points share a column: exact positions
      pts.clear();
      for (const auto& [x, y] : s.points) pts.emplace_back(px(x), py(y));
    }
    std::string extra = std::string(" stroke-width='1.6' class='") + s.css_class + "'";
    if (s.dashed) extra += " stroke-dasharray='6,4'";
    if (pts.size() == 1 && !s.markers) pts.emplace_back(pts[0].first + 1, pts[0].second);  // a visible dot
    svg_polyline(o, pts, s.color, extra.c_str());
    if (s.markers)
      for (const auto& [x, y] : pts) svg_rect(o, x - 2.5, y - 2.5, 5, 5, s.color);
  }
  // Legend, as many entries as fit beside the plot.
  const size_t fit = (size_t)(kPlotHeight / 16);
  double ly = plot_top + 8;
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    if (series.size() > fit && i + 1 == fit) {
      svg_text(o, kPlotRight + 20, ly + 4, "... and " + std::to_string(series.size() - i) + " more");
      break;
    }
    if (s.points.empty()) {
      svg_text(o, kPlotRight + 20, ly + 4, s.missing, " fill='#888' font-style='italic'");
    } else {
      svg_line(o, kPlotRight + 20, ly, kPlotRight + 42, ly, s.color,
               s.dashed ? " stroke-width='2' stroke-dasharray='6,4'" : " stroke-width='2'");
      svg_text(o, kPlotRight + 48, ly + 4, s.name);
    }
    ly += 16;
  }
  return kPanelHeight;
}

const char* const kPalette[] = {"#3b6fb6", "#e8a33d", "#4c9a2a", "#c0392b", "#8e5fb5", "#2aa198", "#b5a06a", "#555555"};

}  // namespace

std::string run_plot_svg(const RunLog& log, const std::string& title) {
  const double x_lo = (double)log.steps.front().step, x_hi = (double)log.steps.back().step;

  Series train{"training loss", kPalette[0], "train-loss", {}, false, false, "no finite training loss"};
  Series tokens{"tokens/s", kPalette[2], "tokens-per-s", {}, false, false, "no tokens/s in the log"};
  for (const RunLog::Step& s : log.steps) {
    if (std::isfinite(s.loss)) train.points.emplace_back((double)s.step, s.loss);
    if (std::isfinite(s.tokens_per_s)) tokens.points.emplace_back((double)s.step, s.tokens_per_s);
  }
  // The sampled estimates (the same first N windows each time) and the full ones: two series.
  Series val{"validation loss", kPalette[1], "val-loss", {}, true, false,
             "validation loss: none in the log yet"};
  std::set<int64_t> sampled_windows;
  for (const RunLog::Eval& e : log.evals) {
    val.points.emplace_back((double)e.step, e.val_loss);
    sampled_windows.insert(e.windows);
  }
  if (sampled_windows.size() == 1 && *sampled_windows.begin() > 0)
    val.name = str("validation, first ", *sampled_windows.begin(), " windows");
  else if (sampled_windows.size() > 1)
    val.name = "validation, first windows (N varies)";
  Series full_val{"full validation", kPalette[3], "val-full-loss", {}, true, false, ""};
  for (const RunLog::Eval& e : log.full_evals) full_val.points.emplace_back((double)e.step, e.val_loss);
  if (!log.full_evals.empty()) full_val.name = str("full validation (", log.full_evals.back().total, " windows)");
  std::vector<Series> loss_series = {train};
  if (!log.evals.empty() || log.full_evals.empty()) loss_series.push_back(val);
  if (!log.full_evals.empty()) loss_series.push_back(full_val);
  Series unigram{"unigram baseline", "#777777", "unigram", {}, false, true,
                 "unigram baseline: not in the log"};
  if (std::isfinite(log.unigram_loss)) {
    char name[64];
    std::snprintf(name, sizeof name, "unigram baseline %.3f", log.unigram_loss);
    unigram.name = name;
    unigram.points = {{x_lo, log.unigram_loss}, {x_hi, log.unigram_loss}};
  }

  const bool busy_panel = log.ranks > 1, choices_panel = !log.choices.empty();
  const double height = 60 + 2 * kPanelHeight + (busy_panel ? kPanelHeight : 0) + (choices_panel ? kPanelHeight : 0) + 10;
  std::string o;
  svg_begin(o, kWidth, height);
  // The newest estimate; the full one where it is as new.
  const RunLog::Eval* last_eval = log.evals.empty() ? nullptr : &log.evals.back();
  if (!log.full_evals.empty() && (!last_eval || log.full_evals.back().step >= last_eval->step))
    last_eval = &log.full_evals.back();
  const std::string last_text =
      !last_eval ? ""
                 : str(", last validation loss ", tick_label(last_eval->val_loss, 0.001, false),
                       last_eval->full() ? " (all windows)" : "");
  char sub[256];
  std::snprintf(sub, sizeof sub, "steps %lld-%lld, %d rank%s%s", (long long)log.steps.front().step,
                (long long)log.steps.back().step, log.ranks, log.ranks == 1 ? " (no busy shares)" : "s",
                last_text.c_str());
  svg_text(o, kPlotLeft, 24, title, " font-size='15' font-weight='bold'");
  svg_text(o, kPlotLeft, 42,
           std::string(sub) + (log.ignored_partial_last_line ? "; an incomplete last line was ignored" : ""),
           " fill='#555'");
  double top = 50;
  loss_series.push_back(unigram);
  top += draw_panel(o, top, "loss", "nats/token", x_lo, x_hi, NAN, NAN, loss_series);
  top += draw_panel(o, top, "throughput", "tokens/s", x_lo, x_hi, 0.0, NAN, {tokens}, true);
  if (busy_panel) {
    std::vector<Series> ranks;
    for (int r = 0; r < log.ranks; ++r) {
      Series s{"rank " + std::to_string(r), kPalette[r % std::size(kPalette)], "busy-rank", {}, false, false, ""};
      for (const RunLog::Step& st : log.steps)
        if ((int)st.busy.size() > r && std::isfinite(st.busy[r])) s.points.emplace_back((double)st.step, st.busy[r]);
      s.missing = "rank " + std::to_string(r) + ": no busy share";
      ranks.push_back(std::move(s));
    }
    top += draw_panel(o, top, "busy share of each rank (compute / step time)", "busy", x_lo, x_hi, 0.0, 1.0, ranks,
                      false, true);
  }
  if (choices_panel) {
    const int64_t examples = log.choices.back().examples;
    Series acc{examples > 0 ? str("accuracy (", examples, " examples)") : std::string("accuracy"), kPalette[4],
               "choices-acc", {}, true, false, ""};
    for (const RunLog::Choices& c : log.choices) acc.points.emplace_back((double)c.step, c.accuracy);
    std::vector<Series> panel = {acc};
    if (std::isfinite(log.choices_chance)) {
      Series chance{str("chance ", tick_label(100 * log.choices_chance, 1, false), "%"), "#777777", "choices-chance",
                    {{x_lo, log.choices_chance}, {x_hi, log.choices_chance}}, false, true, ""};
      panel.push_back(chance);
    }
    draw_panel(o, top, "multiple choice (lowest mean loss per completion token)", "accuracy", x_lo, x_hi, 0.0, 1.0,
               panel, false, true);
  }
  svg_end(o);
  return o;
}

double wall_time_s(const RunLog& log, int64_t step) {
  double ms = 0;
  for (const RunLog::Step& s : log.steps) {
    if (s.step > step) break;
    ms += s.ms;
  }
  return ms / 1e3;
}

std::string runs_plot_svg(const std::vector<RunLog>& logs, const std::vector<std::string>& labels, Axis x,
                          const std::string& title) {
  GPUMIX_CHECK_INPUT(!logs.empty(), "no runs to draw");
  GPUMIX_CHECK_INPUT(labels.size() == logs.size(), logs.size(), " runs but ", labels.size(),
                     " labels; give one label per run");
  std::vector<Series> series;
  double x_lo = INFINITY, x_hi = -INFINITY;
  for (size_t i = 0; i < logs.size(); ++i) {
    const RunLog& log = logs[i];
    Series s{labels[i], kPalette[i % std::size(kPalette)], "run-val-loss", {}, true, false,
             labels[i] + ": no validation loss"};
    // The training wall time up to each step, summed once (evaluations come in step order).
    auto step = log.steps.begin();
    double ms = 0;
    for (const RunLog::Eval& e : log.evals) {
      double at = (double)e.step;
      if (x == Axis::kWallTime) {
        for (; step != log.steps.end() && step->step <= e.step; ++step) ms += step->ms;
        at = ms / 1e3;
        GPUMIX_CHECK_INPUT(std::isfinite(at), log.path, ": a step up to ", e.step, " has no 'ms' field, so its "
                           "validation cannot be placed in time; draw it against the step instead");
      }
      s.points.emplace_back(at, e.val_loss);
    }
    const double end = x == Axis::kWallTime ? wall_time_s(log, log.steps.back().step) : (double)log.steps.back().step;
    if (std::isfinite(end)) x_hi = std::max(x_hi, end);
    x_lo = std::min(x_lo, x == Axis::kWallTime ? 0.0 : (double)log.steps.front().step);
    series.push_back(std::move(s));
  }
  if (!logs[0].evals.empty()) {  // the loss every other run is timed to
    const double target = logs[0].evals.back().val_loss;
    series.push_back(Series{str(labels[0], "'s last, ", tick_label(target, 0.001, false)), "#777777", "target",
                            {{x_lo, target}, {x_hi, target}}, false, true, ""});
  }
  std::set<int64_t> windows;
  for (const RunLog& log : logs)
    for (const RunLog::Eval& e : log.evals) windows.insert(e.windows);
  const std::string panel =
      windows.size() == 1 && *windows.begin() > 0 ? str("validation loss, first ", *windows.begin(), " windows")
                                                  : "validation loss";
  std::string o;
  svg_begin(o, kWidth, 60 + kPanelHeight + 10);
  svg_text(o, kPlotLeft, 24, title, " font-size='15' font-weight='bold'");
  svg_text(o, kPlotLeft, 42, str(logs.size(), " runs; ", x == Axis::kWallTime ? "training wall time: the sum of "
                                 "the steps' ms, validation and start-up left out" : "by step"), " fill='#555'");
  draw_panel(o, 50, panel, "nats/token", x_lo, x_hi, NAN, NAN, series, false, false,
             x == Axis::kWallTime ? "training wall time, s" : "step");
  svg_end(o);
  return o;
}

}  // namespace gpumix::draw
