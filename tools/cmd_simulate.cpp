// gpumix simulate: cluster file + model + global batch → every planner side by side
// (step time, tokens/s, MFU, busy / communication / idle, memory, OOM).
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include "dist/plan/cluster.h"
#include "dist/plan/compute_dtype.h"
#include "draw/plan_svg.h"
#include "dist/plan/planner.h"
#include "dist/plan/profile.h"
#include "dist/plan/simulator.h"
#include "dist/plan/sync.h"
#include "nn/gpt_config.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

using namespace gpumix::dist;

int cmd_simulate(int argc, char** argv) {
  CLI::App app{"Predict every planner's step on a described cluster", "gpumix simulate"};
  std::string cluster_path, model_name, svg_path, dtype_text;
  std::vector<std::string> profile_paths;
  int64_t global_batch = 0;
  int seq = 512;
  bool as_json = false, verbose = false;
  app.add_option("--cluster", cluster_path, "cluster file")->required();
  app.add_option("--model", model_name, "model preset")->required();
  app.add_option("--global-batch,-B", global_batch, "global batch in samples")->required();
  app.add_option("--seq", seq, "sequence length T (default 512)");
  app.add_option("--profile", profile_paths, "measured profiles to use instead of the catalog (by device name)");
  app.add_option("--dtype", dtype_text, compute_dtype_help() + "; measured profiles must be in it");
  app.add_flag("--json", as_json, "print the results as JSON on stdout");
  app.add_flag("--plans,-v", verbose, "print each planner's plan table too");
  app.add_option("--svg", svg_path, "write a picture: one per planner");
  std::string sync_text = "every-step";
  LocalSync sync;
  app.add_option("--sync", sync_text,
                 "every-step (default), or local:H: also predict local updates, groups that meet every H inner "
                 "steps through an outer optimizer (as gpumix train --sync local:H)");
  app.add_option("--groups", sync.groups, "with --sync local:H: N groups of consecutive ranks (default: one per node)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  gpumix::tools::check_global_batch_flag(global_batch);
  {
    const LocalSync parsed = parse_sync(sync_text);
    check_local_only_flags(parsed, app.count("--groups") > 0 ? std::vector<std::string>{"--groups"}
                                                               : std::vector<std::string>{});
    const int groups = sync.groups;
    sync = parsed;
    sync.groups = groups;
  }
  const std::optional<gpumix::DType> dtype = gpumix::tools::parse_dtype_flag(dtype_text);
  const gpumix::GPTConfig model = gpumix::gpt_preset(model_name);
  if (seq < 1 || seq > model.T)
    throw std::invalid_argument("--seq must lie in [1, " + std::to_string(model.T) + "] for " + model_name);
  std::vector<Profile> measured;
  for (const std::string& path : profile_paths) measured.push_back(read_profile(path));
  const Cluster cluster = read_cluster(cluster_path);
  const Profile profile = synthesize_profile(cluster, model, seq, measured, dtype);
  // Local mode first: a bad H or --groups fails before the planners of the whole cluster run.
  std::optional<LocalSimulation> local;
  if (sync.local) local = simulate_local(profile, global_batch, sync);
  const Simulation sim = simulate(profile, cluster.name, global_batch);
  if (local)
    for (const SimEntry& e : sim.entries)
      if (e.planner == "gpumix" && e.planned) set_every_step_cross_bytes(*local, e.plan);
  if (!svg_path.empty()) {
    std::vector<Plan> plans;
    for (const SimEntry& e : sim.entries)
      if (e.planned) plans.push_back(e.plan);
    gpumix::draw::write_plans_svg(plans, cluster.name + ": " + model.name + ", T = " + std::to_string(seq) + ", B = " +
                               std::to_string(global_batch), svg_path);
  }
  if (as_json) {
    nlohmann::json j = simulation_to_json(sim);
    if (local) j["local"] = local_to_json(*local);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << simulation_table(sim);
  for (const SimEntry& e : sim.entries) {
    if (!e.planned) std::cout << e.planner << ": " << e.error << "\n";
    else if (verbose) std::cout << "\n" << plan_table(e.plan);
  }
  if (local) std::cout << local_table(*local, sim);
  return 0;
}

}  // namespace

GPUMIX_COMMAND("simulate", "predict every planner's step time and memory on a described cluster", cmd_simulate);
