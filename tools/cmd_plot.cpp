// gpumix plot: a picture of a run (draw/run_plot.h) from its log.jsonl.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "draw/run_plot.h"
#include "draw/svg.h"
#include "tools/command.h"

namespace {

int cmd_plot(int argc, char** argv) {
  std::string run, svg_path;
  CLI::App app{"Draw a run's loss, validation loss, tokens/s and per-rank busy shares from its log.jsonl",
               "gpumix plot"};
  app.add_option("run", run, "run folder of `gpumix train` (or its log.jsonl)")->required();
  app.add_option("--svg", svg_path, "the SVG file to write")->required();
  CLI11_PARSE(app, argc, argv);
  const gpumix::draw::RunLog log = gpumix::draw::read_run_log(run);
  const std::string name = std::filesystem::path(run).lexically_normal().string();
  gpumix::draw::write_svg_file(svg_path, gpumix::draw::run_plot_svg(log, "run " + name));
  std::printf("wrote %s: %zu steps, %zu validation points, %d rank%s%s\n", svg_path.c_str(), log.steps.size(),
              log.evals.size(), log.ranks, log.ranks == 1 ? "" : "s",
              std::isfinite(log.unigram_loss) ? "" : " (no unigram baseline in the log)");
  return 0;
}

}  // namespace

GPUMIX_COMMAND("plot", "draw a run's losses, tokens/s and busy shares as SVG", cmd_plot);
