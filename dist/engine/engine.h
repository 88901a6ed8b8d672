// The interface between the step loop (dist/engine/trainer.cpp) and an engine: what one
// rank does with its rows of a batch and its share of the training state. The step loop
// owns the data, the schedule, the guard, the log and the plan; an engine owns the model,
// the parameters, the gradients, the optimizer state and the collectives that move them.
//
// Engines: WholeModelEngine (one rank, dist/engine/whole_model_engine.h) and ShardedEngine
// (several ranks, uneven shares, dist/engine/sharded_engine.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/engine/shard_layout.h"
#include "dist/engine/trace.h"
#include "nn/optim.h"

namespace gpumix::dist {

// Rows [begin, end) of a (rows, T) tensor, in micro-batches of at most `micro` rows.
template <class F>
void for_micro_batches(int64_t rows, int64_t micro, F&& fn) {
  for (int64_t begin = 0, j = 0; begin < rows; begin += micro, ++j) fn(j, begin, std::min(rows, begin + micro));
}

// A rank's share of the training state, for checkpoints: elements [flat_offset, +count) of
// the flat layout, with their fp32 master weights and AdamW moments.
struct OwnedSlice {
  int64_t flat_offset;
  Tensor master;
  AdamW* opt;
};

// One rank's part of a step. Losses are returned already scaled (this rank's share of the
// global mean) as one-element fp32 tensors on the rank's device, one per micro-batch, so
// that the step loop reads them together with the gradient norms (one wait for the device
// per step, not one per micro-batch); their sum in micro-batch order, in double, is the
// rank's loss. Gradients end up reduced into the rank's own slices. An engine computes in
// one compute dtype (core/precision.h): fp32 master weights, gradients and moments; in bf16
// also a bf16 copy of its weights, rewritten by AdamW in the same pass, that it computes with.
class Engine {
 public:
  virtual ~Engine() = default;
  // Forward and backward of this rank's rows of a batch (i32 tensors on its device);
  // returns the scaled loss of each micro-batch (none for a rank without rows).
  virtual std::vector<Tensor> forward_backward(const Tensor& inputs, const Tensor& targets,
                                               int64_t micro, float scale) = 0;
  // Forward only: the per-token losses summed over each micro-batch of the rows.
  virtual std::vector<Tensor> loss_sums(const Tensor& inputs, const Tensor& targets, int64_t micro) = 0;
  // This rank's reduced gradient slice of each unit (unit order; empty where it owns none).
  virtual std::vector<Tensor> unit_grads() = 0;
  virtual void scale_grads(float factor) = 0;
  virtual void optimizer_step(float lr, int step) = 0;
  virtual std::vector<OwnedSlice> slices() = 0;
  // Rewrites the weights' compute copy from the master weights, after the masters of
  // slices() were written (a checkpoint was read). Nothing to do in f32.
  virtual void sync_compute_params() = 0;
  // Moves this rank's training state to another layout of the same model (a new plan's
  // shares). Every rank calls it at the same point.
  virtual void reshard(const ShardLayout& next) = 0;
  // Keep saved block inputs in host memory between forward and backward (RankWork::offload
  // of dist/plan/work.h; dist/engine/offload.h). Engines that save no block inputs ignore it.
  virtual void set_offload(bool) {}
  // False on a rank whose state is a copy of another rank's (hybrid sharding: every group
  // but the first holds replicas): it writes no checkpoint slices and its gradient slices
  // are not counted again in the norm.
  virtual bool primary_replica() const { return true; }
  // One unit's collectives as this engine runs them now (its layout, its communicators and
  // forms), each the fastest of `repeats` runs after a warm-up, started together, the slowest
  // rank's: what the cost model's per-block AG / RS / AR predict. Collective. `form` says
  // how they ran ("flat", "hierarchical"). Engines without collectives return zeros.
  struct CollectiveTimes {
    double all_gather_s = 0, reduce_scatter_s = 0, all_reduce_s = 0;
    std::string all_gather_form, reduce_scatter_form;
  };
  virtual CollectiveTimes time_collectives(int /*unit*/, int /*repeats*/) { return {}; }
  double wait_s = 0;  // time spent waiting for collectives since the last reset
  Tracer* tracer = nullptr;  // the run's (dist/engine/trace.h); null or idle: no spans
};

}  // namespace gpumix::dist
