// The picture of a run (draw/run_plot.h): reading log.jsonl (resumed steps, skipped
// steps, the closing line), the SVG's structure and series, what it says when parts are
// missing, and the errors of unreadable logs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "draw/run_plot.h"

namespace gpumix::draw {
namespace {

namespace fs = std::filesystem;

class TempFolder {
 public:
  TempFolder() : path_(fs::temp_directory_path() / ("gpumix_run_plot_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempFolder() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// Each element opened is closed, in order, below one <svg> root; attribute values are
// quoted; '&' only starts an entity. Returns "" or what is wrong.
std::string xml_problem(const std::string& svg) {
  std::vector<std::string> open;
  size_t i = 0;
  int roots = 0;
  while (i < svg.size()) {
    if (svg[i] != '<') {
      if (svg[i] == '&' && !std::regex_search(svg.substr(i, 6), std::regex("^&(lt|gt|amp|apos|quot);")))
        return "bare & at " + std::to_string(i);
      ++i;
      continue;
    }
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = svg.substr(i + 1, end - i - 1);
    i = end + 1;
    if (std::count(tag.begin(), tag.end(), '\'') % 2 != 0) return "unbalanced quotes in <" + tag + ">";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (open.empty()) {
      if (name != "svg" || ++roots > 1) return "<" + name + "> outside the <svg> root";
    }
    if (tag.back() != '/') open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  return roots == 1 ? "" : "no <svg> root";
}

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

// The points of the polyline of class `css_class`.
int polyline_points(const std::string& svg, const std::string& css_class) {
  const size_t at = svg.find("class='" + css_class + "'");
  if (at == std::string::npos) return -1;
  const size_t begin = svg.find("points='", at) + 8, end = svg.find('\'', begin);
  const std::string pts = svg.substr(begin, end - begin);
  return (int)std::count(pts.begin(), pts.end(), ',');
}

std::string expect_input_error(const std::string& path) {
  try {
    read_run_log(path);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << path;
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "lacks: " << (part) << "\n" << (text)

// A 3-rank run of 20 steps evaluated every 5, resumed from step 10 (steps 11-13 logged
// twice, the second time with other losses), step 7 skipped (its loss null), then closed.
std::string three_rank_log() {
  std::string s;
  auto step_line = [&](int step, const std::string& loss) {
    s += "{\"step\":" + std::to_string(step) + ",\"loss\":" + loss + ",\"tokens_per_s\":" +
         std::to_string(1000 + 10 * step) + ",\"busy\":[0.3,0.5,0.9]";
    if (step == 1) s += ",\"unigram_loss\":5.25";
    if (step % 5 == 0) s += ",\"val_loss\":" + std::to_string(7.0 - 0.1 * step);
    s += "}\n";
  };
  for (int step = 1; step <= 13; ++step) step_line(step, step == 7 ? "null" : std::to_string(8.0 - 0.1 * step));
  for (int step = 11; step <= 20; ++step) step_line(step, std::to_string(6.0 - 0.01 * step));  // the resume
  s += "{\"final\":true,\"step\":20,\"val_loss\":5.0,\"unigram_loss\":5.25,\"tokens_per_s\":1100}\n";
  return s;
}

TEST(RunPlot, ReadsStepsEvaluationsAndTheBaseline) {
  TempFolder t;
  const RunLog log = read_run_log(t.write("log.jsonl", three_rank_log()));
  ASSERT_EQ(log.steps.size(), 20u);
  EXPECT_EQ(log.steps.front().step, 1);
  EXPECT_EQ(log.steps.back().step, 20);
  EXPECT_TRUE(std::isnan(log.steps[6].loss));               // step 7, skipped
  EXPECT_DOUBLE_EQ(log.steps[11].loss, 6.0 - 0.01 * 12);    // the resumed record of step 12
  EXPECT_DOUBLE_EQ(log.steps[11].tokens_per_s, 1120);
  EXPECT_EQ(log.ranks, 3);
  EXPECT_EQ(log.steps[3].busy, (std::vector<double>{0.3, 0.5, 0.9}));
  ASSERT_EQ(log.evals.size(), 4u);  // steps 5, 10, 15, 20
  EXPECT_EQ(log.evals[2].step, 15);
  EXPECT_DOUBLE_EQ(log.evals[2].val_loss, 7.0 - 0.1 * 15);
  EXPECT_DOUBLE_EQ(log.unigram_loss, 5.25);
  EXPECT_FALSE(log.ignored_partial_last_line);
  // A run folder stands for its log.jsonl.
  EXPECT_EQ(read_run_log(t.path()).steps.size(), 20u);
}

TEST(RunPlot, TheSvgIsWellFormedAndHasEverySeries) {
  TempFolder t;
  const std::string svg = run_plot_svg(read_run_log(t.write("log.jsonl", three_rank_log())), "run <3 ranks> & co");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_HAS(svg, "run &lt;3 ranks&gt; &amp; co");
  EXPECT_EQ(polyline_points(svg, "train-loss"), 19);  // 20 steps, one without a finite loss
  EXPECT_EQ(polyline_points(svg, "val-loss"), 4);
  EXPECT_EQ(polyline_points(svg, "unigram"), 2);      // a horizontal line across
  EXPECT_EQ(polyline_points(svg, "tokens-per-s"), 20);
  EXPECT_EQ(count(svg, "class='busy-rank'"), 3);
  EXPECT_EQ(polyline_points(svg, "busy-rank"), 20);
  // The unigram line is horizontal: both points share their y.
  const size_t u = svg.find("class='unigram'");
  const std::string pts = svg.substr(svg.find("points='", u) + 8, 40);
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(pts, r, std::regex("^[0-9.]+,([0-9.]+) [0-9.]+,([0-9.]+)'"));
    return r;
  }();
  ASSERT_EQ(m.size(), 3u) << pts;
  EXPECT_EQ(m[1], m[2]);
  // Legends, axis labels and ticks.
  for (const char* part : {">training loss<", ">validation loss<", ">unigram baseline 5.250<", ">tokens/s<",
                           ">rank 0<", ">rank 2<", ">step<", ">nats/token<", ">100%<", ">0%<", ">20<", "3 ranks"})
    EXPECT_HAS(svg, part);
}

// A run evaluated every 2 steps on its first 4 of 30 validation windows, and at the last
// step on all 30 too (as `gpumix train --eval-windows 4` logs it).
std::string sampled_and_full_log() {
  std::string s;
  for (int step = 1; step <= 8; ++step) {
    s += "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(6.0 - 0.2 * step);
    if (step % 2 == 0)
      s += ",\"val_loss\":" + std::to_string(6.5 - 0.2 * step) + ",\"val_windows\":4,\"val_windows_total\":30";
    if (step == 8) s += ",\"val_full_loss\":5.3";
    s += "}\n";
  }
  return s + "{\"final\":true,\"step\":8,\"val_loss\":5.3,\"val_windows\":30,\"unigram_loss\":6.1}\n";
}

TEST(RunPlot, SampledAndFullValidationAreTwoSeries) {
  TempFolder t;
  const RunLog log = read_run_log(t.write("log.jsonl", sampled_and_full_log()));
  ASSERT_EQ(log.evals.size(), 4u);  // steps 2, 4, 6, 8 on 4 windows
  EXPECT_EQ(log.evals[3].step, 8);
  EXPECT_EQ(log.evals[3].windows, 4);
  EXPECT_EQ(log.evals[3].total, 30);
  EXPECT_FALSE(log.evals[3].full());
  ASSERT_EQ(log.full_evals.size(), 1u);
  EXPECT_EQ(log.full_evals[0].step, 8);
  EXPECT_DOUBLE_EQ(log.full_evals[0].val_loss, 5.3);
  EXPECT_TRUE(log.full_evals[0].full());
  const std::string svg = run_plot_svg(log, "sampled and full");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polyline_points(svg, "val-loss"), 4);       // never joined to the full point
  EXPECT_EQ(polyline_points(svg, "val-full-loss"), 1);  // its own series, with a marker
  EXPECT_HAS(svg, ">validation, first 4 windows<");
  EXPECT_HAS(svg, ">full validation (30 windows)<");
  EXPECT_HAS(svg, "last validation loss 5.300 (all windows)");

  // --eval-windows 0: every estimate is on all windows, so there is only the full series.
  std::string all = sampled_and_full_log();
  const std::string four = "\"val_windows\":4,";
  for (size_t p; (p = all.find(four)) != std::string::npos;) all.replace(p, four.size(), "\"val_windows\":30,");
  const RunLog all_log = read_run_log(t.write("all.jsonl", all));
  EXPECT_TRUE(all_log.evals.empty());
  EXPECT_EQ(all_log.full_evals.size(), 4u);
  const std::string all_svg = run_plot_svg(all_log, "all windows");
  EXPECT_EQ(polyline_points(all_svg, "val-loss"), -1);
  EXPECT_EQ(polyline_points(all_svg, "val-full-loss"), 4);
}

TEST(RunPlot, SaysWhatTheLogLacks) {
  // One rank, no validation yet, no closing line: a run still in its first steps.
  TempFolder t;
  const std::string path = t.write("log.jsonl",
                                   "{\"step\":1,\"loss\":7.5,\"tokens_per_s\":900}\n"
                                   "{\"step\":2,\"loss\":7.25,\"tokens_per_s\":950}\n"
                                   "{\"step\":3,\"loss\":7.1,\"tok");  // killed mid-line
  const RunLog log = read_run_log(path);
  EXPECT_EQ(log.steps.size(), 2u);
  EXPECT_TRUE(log.ignored_partial_last_line);
  const std::string svg = run_plot_svg(log, "young run");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_HAS(svg, "validation loss: none in the log yet");
  EXPECT_HAS(svg, "unigram baseline: not in the log");
  EXPECT_HAS(svg, "1 rank (no busy shares)");
  EXPECT_HAS(svg, "an incomplete last line was ignored");
  EXPECT_EQ(count(svg, "busy-rank"), 0);
  EXPECT_EQ(polyline_points(svg, "val-loss"), -1);
  EXPECT_EQ(polyline_points(svg, "train-loss"), 2);
}

TEST(RunPlot, TheMultipleChoiceAccuracyIsItsOwnPanel) {
  TempFolder t;
  // Scored at steps 2 and 4 (step 2 logged again by a resume: its last record counts).
  const std::string path = t.write("log.jsonl",
                                   "{\"step\":1,\"loss\":7.5,\"tokens_per_s\":900}\n"
                                   "{\"step\":2,\"loss\":7.2,\"choices_acc\":0.1,\"choices_examples\":10,"
                                   "\"choices_chance\":0.25}\n"
                                   "{\"step\":2,\"loss\":7.2,\"choices_acc\":0.3,\"choices_examples\":10,"
                                   "\"choices_chance\":0.25}\n"
                                   "{\"step\":3,\"loss\":7.0}\n"
                                   "{\"step\":4,\"loss\":6.8,\"choices_acc\":0.4,\"choices_examples\":10,"
                                   "\"choices_chance\":0.25}\n");
  const RunLog log = read_run_log(path);
  ASSERT_EQ(log.choices.size(), 2u);
  EXPECT_EQ(log.choices[0].step, 2);
  EXPECT_DOUBLE_EQ(log.choices[0].accuracy, 0.3);
  EXPECT_EQ(log.choices[1].examples, 10);
  EXPECT_DOUBLE_EQ(log.choices_chance, 0.25);
  const std::string svg = run_plot_svg(log, "choices");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polyline_points(svg, "choices-acc"), 2);
  EXPECT_EQ(polyline_points(svg, "choices-chance"), 2);
  EXPECT_HAS(svg, ">accuracy (10 examples)<");
  EXPECT_HAS(svg, ">chance 25%<");
  // A log without them has no such panel.
  const std::string plain = run_plot_svg(read_run_log(t.write("plain.jsonl", "{\"step\":1,\"loss\":7.5}\n")), "plain");
  EXPECT_EQ(count(plain, "choices-acc"), 0);
}

TEST(RunPlot, UnreadableLogsAreClearErrors) {
  TempFolder t;
  EXPECT_HAS(expect_input_error(t.path() + "/nowhere"), "does not exist");
  EXPECT_HAS(expect_input_error(t.write("empty.jsonl", "")), "is empty");
  EXPECT_HAS(expect_input_error(t.write("blank.jsonl", "\n\n")), "is empty");
  EXPECT_HAS(expect_input_error(t.write("garbled.jsonl", "{\"step\":1,\"loss\":7}\nnot json\n{\"step\":3,\"loss\":6}\n")),
             "garbled.jsonl line 2 is not valid JSON");
  EXPECT_HAS(expect_input_error(t.write("binary.jsonl", std::string("\x01\x02\0\x03", 4))), "line 1 is not valid JSON");
  EXPECT_HAS(expect_input_error(t.write("overflow.jsonl", "{\"step\":1,\"loss\":1e999}\n")),
             "line 1 is not valid JSON");
  EXPECT_HAS(expect_input_error(t.write("array.jsonl", "[1,2]\n")), "line 1 is [1,2], not a JSON object");
  EXPECT_HAS(expect_input_error(t.write("no_step.jsonl", "{\"loss\":7}\n")), "line 1: no step number");
  EXPECT_HAS(expect_input_error(t.write("neg_step.jsonl", "{\"step\":-2,\"loss\":7}\n")), "field 'step' is -2");
  EXPECT_HAS(expect_input_error(t.write("no_loss.jsonl", "{\"step\":1}\n")), "step 1 has no field 'loss'");
  EXPECT_HAS(expect_input_error(t.write("loss_text.jsonl", "{\"step\":1,\"loss\":\"low\"}\n")),
             "line 1: field 'loss' is \"low\", not a number");
  EXPECT_HAS(expect_input_error(t.write("busy_text.jsonl", "{\"step\":1,\"loss\":7,\"busy\":\"all\"}\n")),
             "field 'busy' is \"all\", not an array");
  EXPECT_HAS(expect_input_error(t.write("only_final.jsonl", "{\"final\":true,\"step\":0,\"unigram_loss\":5}\n")),
             "has no step lines");
}

// A run of `steps` steps of `ms` each, evaluated every `every` with val_loss 7 - step / 100.
std::string timed_log(int steps, double ms, int every, bool with_ms = true) {
  std::string s;
  for (int step = 1; step <= steps; ++step) {
    s += "{\"step\":" + std::to_string(step) + ",\"loss\":7";
    if (with_ms) s += ",\"ms\":" + std::to_string(ms);
    if (step % every == 0) s += ",\"val_loss\":" + std::to_string(7.0 - step / 100.0) + ",\"val_windows\":4";
    s += "}\n";
  }
  return s;
}

// Several runs against wall time (`gpumix plot A B --labels`): each run's evaluations placed
// at the sum of its steps' ms, a dashed line at the first run's last validation loss.
TEST(RunPlot, SeveralRunsAgainstWallTime) {
  TempFolder t;
  const RunLog slow = read_run_log(t.write("slow.jsonl", timed_log(20, 500, 10)));
  const RunLog fast = read_run_log(t.write("fast.jsonl", timed_log(40, 100, 20)));
  EXPECT_DOUBLE_EQ(wall_time_s(slow, 10), 5.0);
  EXPECT_DOUBLE_EQ(wall_time_s(fast, 40), 4.0);
  const std::string svg = runs_plot_svg({slow, fast}, {"every step", "local H=20"}, Axis::kWallTime, "cmp");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "class='run-val-loss'"), 2);
  EXPECT_EQ(polyline_points(svg, "run-val-loss"), 2);  // the first run: steps 10 and 20
  EXPECT_HAS(svg, "every step&apos;s last, 6.800");  // escaped
  EXPECT_HAS(svg, "local H=20");
  EXPECT_HAS(svg, "training wall time, s");
  EXPECT_HAS(svg, "validation loss, first 4 windows");
  // The x axis spans the longest run: 20 x 0.5 s = 10 s; a tick at 10 exists.
  EXPECT_HAS(svg, ">10</text>");
  // Against step the same runs need no ms.
  const RunLog untimed = read_run_log(t.write("untimed.jsonl", timed_log(20, 0, 10, false)));
  EXPECT_TRUE(std::isnan(wall_time_s(untimed, 10)));
  EXPECT_EQ(xml_problem(runs_plot_svg({untimed, fast}, {"a", "b"}, Axis::kStep, "by step")), "");
  try {
    runs_plot_svg({untimed, fast}, {"a", "b"}, Axis::kWallTime, "x");
    ADD_FAILURE() << "a log without ms drew against time";
  } catch (const InputError& e) {
    EXPECT_HAS(std::string(e.what()), "has no 'ms' field");
  }
  try {
    runs_plot_svg({slow, fast}, {"a"}, Axis::kWallTime, "x");
    ADD_FAILURE() << "a missing label was accepted";
  } catch (const InputError& e) {
    EXPECT_HAS(std::string(e.what()), "2 runs but 1 labels");
  }
}

}  // namespace
}  // namespace gpumix::draw
