// The training loop on one or many ranks. Every rank calls train() with the same options
// and plan and its own Comm; together they execute the plan as docs/method.md §5 describes:
//
// - one rank: the whole model on its device, each micro-batch's forward and backward
//   in turn (gradient accumulation), AdamW over all parameters
//   (dist/engine/whole_model_engine.h);
// - several ranks: the uneven sharded engine (dist/engine/sharded_engine.h). Rank i owns
//   share r_i of every unit's fp32 master weights and AdamW moments (ShardLayout), runs b_i
//   rows of every global batch as micro-batches of m_i, layer-major: each unit's parameters
//   are gathered once per pass (the next unit's gather overlapping the current unit's
//   compute), each micro-batch's block input is kept, backward recomputes each block from
//   it, and each unit's gradient is reduce-scattered once per step.
//
// Both give the gradient of the loss summed over the global batch divided by its token
// count: the same model whatever the plan, up to float rounding. Both compute in the run's
// compute dtype (dist/plan/compute_dtype.h): f32, or bf16 with fp32 master weights,
// gradients and moments (core/precision.h). The step loop around an
// engine (dist/engine/trainer.cpp) is the same for both: dist/engine/engine.h is the line
// between them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dist/comm/collective_cost.h"
#include "dist/comm/comm.h"
#include "dist/engine/drift.h"
#include "dist/engine/outer_step.h"
#include "dist/engine/profiler.h"
#include "dist/plan/compute_dtype.h"
#include "dist/plan/plan.h"
#include "dist/plan/work.h"
#include "nn/train_options.h"

namespace gpumix::dist {

struct EngineOptions {
  bool prefetch = true;  // overlap the next unit's gather with the current unit's compute
  // This rank's device, already configured (capacity, slowdown); by default cpu:<rank> on
  // the local backend (each thread rank its own allocator) and cpu:0 otherwise.
  Device device;
  bool device_set = false;
  std::string device_label = "cpu";  // the device's type in profiles and plans
  // "" : run `work` as given. Otherwise profile the ranks (or load the cache) and plan with
  // this planner: "gpumix" (alias "auto"), "even", "proportional" or "cephalo". Baseline
  // plans run even when the memory model says they do not fit: the allocator decides.
  std::string planner;
  // The gpumix planner's sharding (PlannerOptions::group_size): -1 full or hybrid as the cost
  // model predicts faster, 0 full, G > 0 hybrid in groups of G ranks.
  int sharding = -1;
  ProfilerOptions profiler;
  // With a planner other than "even": when ranks' measured compute times drift from the
  // plan's (dist/engine/drift.h), correct the profile, re-plan and re-shard in place.
  DriftOptions drift;
  // --trace FILE --trace-steps A:B: steps A..B (clipped to the steps this call trains) as a
  // Trace Event Format file (dist/engine/trace.h); "" : no trace.
  std::string trace;
  int trace_first = 2, trace_last = 4;
  // The plan file `work` was read from ("" : none) and what it holds: the compute dtype it
  // was made for, the links its collectives were priced with (TopologyComm chooses their
  // forms by them; none in older files: its defaults) and its predictions, which the run
  // measures itself against as a planned run does.
  std::string plan_file;
  std::shared_ptr<const Plan> file_plan;
  // --sync local:H and its outer optimizer (dist/engine/outer_step.h); default every-step.
  LocalSync sync;
};

// Every value of `o` in range, before anything is written: the launcher calls it before it
// touches the run folder (dist/engine/launch.h), train() again for callers of its own. 0 and
// -1 mean "not given" (the model's context, the preset's shape, the default warmup); a front
// end that can tell a value given from one left out refuses those itself. Throws InputError
// naming the flag (as `gpumix train` spells it), the value, the rule and the fix.
void check_train_options(const TrainOptions& o);

// Runs the whole training on this rank (o.batch is the global batch). Rank 0 prints and
// writes the log; every rank writes its slices of each checkpoint. `work` is ignored when
// engine.planner is set.
TrainResult train(const TrainOptions& o, const Work& work, Comm& comm, const EngineOptions& engine = {});

}  // namespace gpumix::dist
