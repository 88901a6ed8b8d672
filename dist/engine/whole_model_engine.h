// One rank: the whole model on its device, each micro-batch's forward and backward in turn
// (gradient accumulation), AdamW over all parameters. In bf16 the model computes on its
// compute copy of the fp32 master (nn/gpt.h), which AdamW rewrites in the same pass.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/engine/engine.h"
#include "nn/gpt.h"
#include "nn/optim.h"

namespace gpumix::dist {

class WholeModelEngine final : public Engine {
 public:
  WholeModelEngine(const GPTConfig& config, Device device, DType compute, uint64_t seed,
                   const AdamWConfig& adam, bool recompute);

  std::vector<Tensor> forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                                       float scale) override;
  std::vector<Tensor> loss_sums(const Tensor& inputs, const Tensor& targets, int64_t micro) override;
  std::vector<Tensor> unit_grads() override;
  void scale_grads(float f) override;
  void optimizer_step(float lr, int step) override;
  std::vector<OwnedSlice> slices() override;
  void sync_compute_params() override { model_.sync_compute_params(); }
  void reshard(const ShardLayout&) override {}  // one rank owns everything, in any plan
  // set_offload: ignored; the tape keeps the activations (or, with recompute, the block
  // inputs) of one micro-batch at a time, not every micro-batch's.

 private:
  GPT model_;
  AdamW opt_;
  bool recompute_;
};

}  // namespace gpumix::dist
