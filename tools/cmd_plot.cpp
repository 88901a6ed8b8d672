// gpumix plot: a picture of a run (draw/run_plot.h) from its log.jsonl, or several runs'
// validation losses in one picture, against training wall time or step.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "draw/run_plot.h"
#include "draw/svg.h"
#include "tools/command.h"

namespace {

namespace draw = gpumix::draw;

int cmd_plot(int argc, char** argv) {
  std::vector<std::string> runs, labels;
  std::string svg_path, x_axis = "time", title;
  CLI::App app{"Draw a run's loss, validation loss, tokens/s and per-rank busy shares from its log.jsonl; with "
               "several runs, their validation losses in one picture",
               "gpumix plot"};
  app.add_option("runs", runs, "run folder(s) of `gpumix train` (or their log.jsonl)")->required();
  app.add_option("--svg", svg_path, "the SVG file to write")->required();
  app.add_option("--labels", labels, "with several runs: one name per run, in order (default: the folders)")
      ->delimiter(',');
  app.add_option("--x", x_axis, "with several runs: 'time' (training wall time, the default) or 'step'")
      ->check(CLI::IsMember({"time", "step"}));
  app.add_option("--title", title, "the picture's title");
  CLI11_PARSE(app, argc, argv);
  auto name_of = [](const std::string& run) { return std::filesystem::path(run).lexically_normal().string(); };
  if (runs.size() == 1) {
    GPUMIX_CHECK_INPUT(labels.empty(), "--labels names the runs of a comparison; one run (", runs[0],
                       ") draws its own picture: drop --labels or give more runs");
    const draw::RunLog log = draw::read_run_log(runs[0]);
    draw::write_svg_file(svg_path, draw::run_plot_svg(log, title.empty() ? "run " + name_of(runs[0]) : title));
    std::printf("wrote %s: %zu steps, %zu validation points, %d rank%s%s\n", svg_path.c_str(), log.steps.size(),
                log.evals.size(), log.ranks, log.ranks == 1 ? "" : "s",
                std::isfinite(log.unigram_loss) ? "" : " (no unigram baseline in the log)");
    return 0;
  }
  GPUMIX_CHECK_INPUT(labels.empty() || labels.size() == runs.size(), runs.size(), " runs but ", labels.size(),
                     " --labels; give one label per run, in order, or none");
  std::vector<draw::RunLog> logs;
  for (const std::string& run : runs) {
    logs.push_back(draw::read_run_log(run));
    if (labels.size() < runs.size()) labels.push_back(name_of(run));
  }
  const draw::Axis x = x_axis == "time" ? draw::Axis::kWallTime : draw::Axis::kStep;
  draw::write_svg_file(svg_path, draw::runs_plot_svg(logs, labels, x, title.empty() ? "validation loss" : title));
  std::printf("wrote %s: %zu runs against %s\n", svg_path.c_str(), runs.size(),
              x == draw::Axis::kWallTime ? "training wall time" : "step");
  return 0;
}

}  // namespace

GPUMIX_COMMAND("plot", "draw a run's losses, tokens/s and busy shares as SVG; several runs' validation losses",
               cmd_plot);
