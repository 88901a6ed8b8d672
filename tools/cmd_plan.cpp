// gpumix plan: profiles (or a cluster file) + model + global batch → the plan, as a table,
// as JSON (--json on stdout, --out FILE), and as a picture (--svg FILE).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "dist/plan/cluster.h"
#include "dist/plan/compute_dtype.h"
#include "dist/plan/plan.h"
#include "draw/plan_svg.h"
#include "dist/plan/planner.h"
#include "dist/plan/profile.h"
#include "dist/plan/simulator.h"
#include "nn/gpt_config.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

using namespace gpumix::dist;

int cmd_plan(int argc, char** argv) {
  CLI::App app{"Plan per-rank batches, micro-batches and state shares (docs/method.md §4)", "gpumix plan"};
  std::string profile_path, cluster_path, model_name, out_path, svg_path, planner = "gpumix", dtype_text;
  int64_t global_batch = 0;
  int seq = 0;
  std::string sharding = "auto";
  bool as_json = false, no_offload = false, no_leave_out = false;
  app.add_option("--profile", profile_path, "profile file (JSON, from `gpumix profile`)");
  app.add_option("--cluster", cluster_path, "cluster file: profiles synthesised from the device catalog");
  app.add_option("--model", model_name, "model preset (required with --cluster; checked against --profile)");
  app.add_option("--global-batch,-B", global_batch, "global batch in samples")->required();
  app.add_option("--seq", seq, "sequence length T (with --cluster; default 512)");
  app.add_option("--dtype", dtype_text, compute_dtype_help() + "; with --profile: the profile's (another is an error)");
  app.add_option("--planner", planner, "gpumix, even, proportional or cephalo");
  app.add_flag("--json", as_json, "print the plan as JSON on stdout");
  app.add_option("--out", out_path, "write the plan file");
  app.add_option("--svg", svg_path, "write a picture of the plan");
  app.add_flag("--no-offload", no_offload, "never offload block inputs to host memory");
  app.add_flag("--no-leave-out", no_leave_out, "use every rank");
  app.add_option("--sharding", sharding,
                 "gpumix planner: auto (full or hybrid, whichever the cost model predicts faster; hybrid is "
                 "tried on clusters of several nodes), full, or G (hybrid in groups of G ranks)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  gpumix::tools::check_global_batch_flag(global_batch);
  const std::optional<gpumix::DType> dtype = gpumix::tools::parse_dtype_flag(dtype_text);
  gpumix::tools::check_seq_flag(app.count("--seq") > 0, seq,
                                "the profile's seq_len (with --cluster: 512, or the model's context if shorter)");
  if (profile_path.empty() == cluster_path.empty())
    throw std::invalid_argument("give exactly one of --profile FILE or --cluster FILE");
  Profile profile;
  if (!profile_path.empty()) {
    profile = read_profile(profile_path);
    if (!model_name.empty()) {
      const gpumix::GPTConfig m = gpumix::gpt_preset(model_name);
      if (m.L != profile.model.L || m.C != profile.model.C || m.V != profile.model.V || m.NH != profile.model.NH)
        throw std::invalid_argument("--model " + model_name + " differs from the profile's model " + profile.model.name);
    }
    if (seq != 0 && seq != profile.seq_len)
      throw std::invalid_argument("--seq " + std::to_string(seq) + " differs from the profile's seq_len " +
                                  std::to_string(profile.seq_len));
    if (dtype && *dtype != profile.dtype)
      throw std::invalid_argument(std::string("--dtype ") + gpumix::dtype_name(*dtype) + " differs from the profile's " +
                                  gpumix::dtype_name(profile.dtype) + " (" + profile_path +
                                  "); measure the devices in it with `gpumix profile --dtype " +
                                  gpumix::dtype_name(*dtype) + "`, or drop --dtype");
  } else {
    if (model_name.empty()) throw std::invalid_argument("--model is required with --cluster");
    const gpumix::GPTConfig model = gpumix::gpt_preset(model_name);
    profile = synthesize_profile(read_cluster(cluster_path), model, seq > 0 ? seq : std::min(512, model.T), {}, dtype);
  }
  PlannerOptions opts;
  opts.allow_offload = !no_offload;
  opts.allow_leave_out = !no_leave_out;
  opts.group_size = gpumix::tools::parse_sharding_flag(sharding);
  if (opts.group_size > 0) {
    const std::string bad = check_sharding(Sharding{opts.group_size}, profile.num_ranks());
    if (!bad.empty()) throw std::invalid_argument("--sharding " + sharding + ": " + bad);
  }
  const Plan plan = run_planner(planner, profile, global_batch, opts);
  if (!out_path.empty()) write_plan(plan, out_path);
  if (!svg_path.empty()) gpumix::draw::write_plans_svg({plan}, "gpumix plan: " + profile.model.name, svg_path);
  if (as_json) std::cout << plan_to_json(plan).dump(2) << "\n";
  else std::cout << plan_table(plan);
  return plan.fits() ? 0 : 1;
}

}  // namespace

GPUMIX_COMMAND("plan", "plan batches, micro-batches and state shares for a cluster", cmd_plan);
