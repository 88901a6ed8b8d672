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

  double forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                          float scale) override;
  double loss_sum(const Tensor& inputs, const Tensor& targets, int64_t micro) override;
  double grad_sum_squares() override;
  std::vector<Tensor> unit_grads() override;
  void scale_grads(float f) override;
  void optimizer_step(float lr, int step) override;
  std::vector<OwnedSlice> slices() override;
  void sync_compute_params() override { model_.sync_compute_params(); }
  void reshard(const ShardLayout&) override {}  // one rank owns everything, in any plan

 private:
  GPT model_;
  AdamW opt_;
  bool recompute_;
};

}  // namespace gpumix::dist
