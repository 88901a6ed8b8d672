// AdamW over a slice of the flat parameter buffer, the learning-rate schedule and
// gradient-norm clipping. The optimizer works on any slice [offset, offset + count) of
// the flat layout, so a sharded engine runs it on its own shard only.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "nn/gpt.h"

namespace gpumix {

class AdamW {
 public:
  // Moments (fp32, zeros) for elements [offset, offset + count) of the flat layout; weight
  // decay applies to the parameters whose ParamInfo::decay is set.
  AdamW(const std::vector<ParamInfo>& layout, int64_t offset, int64_t count, Device device,
        const AdamWConfig& config);

  // One step on the slice: params (fp32 master weights) and grads (fp32) are (count) views
  // of the same elements. `step` counts from 1; `lr` overrides config.lr (schedules).
  // `compute_copy`, the same elements of the model's compute copy (GPT::compute_params()),
  // is rewritten from the updated weights in the same pass when it is bf16; in f32 it is
  // the master itself (or undefined) and nothing more is done.
  void step(Tensor& params, const Tensor& grads, float lr, int step,
            const Tensor& compute_copy = Tensor());

  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  int64_t offset() const { return offset_; }
  int64_t count() const { return count_; }
  const AdamWConfig& config() const { return config_; }

 private:
  struct Range {
    int64_t begin, end;  // relative to the slice
    bool decay;
  };
  std::vector<Range> ranges_;  // consecutive runs of equal decay
  int64_t offset_, count_;
  AdamWConfig config_;
  Tensor m_, v_;
};

// Linear warmup to max_lr over `warmup` steps, then cosine decay to min_lr at `total`.
struct LRSchedule {
  float max_lr = 3e-4f;
  float min_lr = 3e-5f;
  int warmup = 0;
  int total = 1;
  float at(int step) const;  // step counts from 1
};

// The factor that scales gradients of global norm `norm` down to `max_norm` (1 when the
// norm is already within it or clipping is off, max_norm <= 0).
float clip_factor(double norm, double max_norm);

}  // namespace gpumix
