#include "nn/optim.h"

#include <algorithm>
#include <cmath>

namespace gpumix {

AdamW::AdamW(const std::vector<ParamInfo>& layout, int64_t offset, int64_t count, Device device,
             const AdamWConfig& config)
    : offset_(offset), count_(count), config_(config) {
  for (const ParamInfo& p : layout) {
    const int64_t begin = std::max(p.offset, offset) - offset;
    const int64_t end = std::min(p.offset + p.shape.numel(), offset + count) - offset;
    if (begin >= end) continue;
    if (!ranges_.empty() && ranges_.back().decay == p.decay && ranges_.back().end == begin)
      ranges_.back().end = end;
    else
      ranges_.push_back({begin, end, p.decay});
  }
  m_ = Tensor::zeros({count}, DType::f32, device);
  v_ = Tensor::zeros({count}, DType::f32, device);
}

void AdamW::step(Tensor& params, const Tensor& grads, float lr, int step,
                 const Tensor& compute_copy) {
  GPUMIX_CHECK(params.numel() == count_ && grads.numel() == count_, "AdamW::step: slice of ",
               count_, " elements, got params ", params.numel(), " and grads ", grads.numel());
  const bool f32_copy = compute_copy.defined() && compute_copy.dtype() == DType::f32;
  GPUMIX_CHECK(!f32_copy || (compute_copy.raw_data() == params.raw_data() &&
                             compute_copy.numel() == params.numel()),
               "AdamW::step: an f32 compute copy must be the master weights themselves (an f32 "
               "model computes on them), got a separate ", compute_copy.str());
  const bool write_copy = compute_copy.defined() && !f32_copy;
  GPUMIX_CHECK(!write_copy || compute_copy.numel() == count_, "AdamW::step: slice of ", count_,
               " elements, got a compute copy of ", compute_copy.numel());
  AdamWConfig c = config_;
  c.lr = lr;
  for (const Range& r : ranges_) {
    const int64_t n = r.end - r.begin;
    Tensor p = params.flat_slice(r.begin, n), m = m_.flat_slice(r.begin, n),
           v = v_.flat_slice(r.begin, n);
    Tensor copy = write_copy ? compute_copy.flat_slice(r.begin, n) : Tensor();
    c.weight_decay = r.decay ? config_.weight_decay : 0.0f;
    ops::adamw_step(p, copy, grads.flat_slice(r.begin, n), m, v, c, step);
  }
}

float LRSchedule::at(int step) const {
  if (warmup > 0 && step <= warmup) return max_lr * (float)step / (float)warmup;
  if (step >= total) return min_lr;
  const double progress = (double)(step - warmup) / std::max(1, total - warmup);
  return min_lr + 0.5f * (max_lr - min_lr) * (float)(1.0 + std::cos(M_PI * progress));
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return (float)(max_norm / (norm + 1e-6));
}

}  // namespace gpumix
