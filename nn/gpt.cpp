#include "nn/gpt.h"

#include <cmath>
#include <cstring>

#include "autograd/functions.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/rng.h"
#include "nn/model_stages.h"

namespace gpumix {

std::vector<ParamInfo> gpt_param_layout(const GPTConfig& config) {
  config.validate();
  return model_stages(config).param_layout(config);
}

std::vector<SavedRun> gpt_saved_runs(const std::vector<ParamInfo>& layout, int64_t offset, int64_t count) {
  std::vector<SavedRun> runs;
  int64_t padding = 0;  // padding elements before the current parameter
  for (const ParamInfo& info : layout) {
    const int64_t begin = std::max(info.offset, offset);
    const int64_t stop = std::min(info.offset + info.used, offset + count);
    if (begin < stop) {
      if (!runs.empty() && runs.back().flat + runs.back().count == begin)
        runs.back().count += stop - begin;
      else
        runs.push_back({begin, begin - padding, stop - begin});
    }
    padding += info.shape.numel() - info.used;
  }
  return runs;
}

void GPT::init_slice(const std::vector<ParamInfo>& layout, uint64_t seed, int64_t offset,
                     Tensor& out) {
  const int64_t end = offset + out.numel();
  for (const ParamInfo& info : layout) {
    const int64_t begin = std::max(info.offset, offset);
    const int64_t stop = std::min(info.offset + info.shape.numel(), end);
    if (begin >= stop) continue;
    // The padding (from info.offset + used) is zero; the model's elements are as unpadded.
    const int64_t used_stop = std::max(begin, std::min(stop, info.offset + info.used));
    if (used_stop < stop) out.flat_slice(used_stop - offset, stop - used_stop).fill_(0.0f);
    if (begin == used_stop) continue;
    Tensor part = out.flat_slice(begin - offset, used_stop - begin);
    if (info.init_std > 0)  // element i of a parameter is element i of its named stream
      ops::normal_(part, rng_key(seed, info.name), (uint64_t)(begin - info.offset), 0.0f, info.init_std);
    else
      part.fill_(info.init_std < 0 ? 1.0f : 0.0f);  // LayerNorm weight 1; biases 0
  }
}

GPT::GPT(const GPTConfig& config, Device device, DType compute)
    : config_(config), device_(device), compute_dtype_(compute), layout_(gpt_param_layout(config)),
      stages_(&model_stages(config)), used_vars_(layout_.size()) {
  check_compute_dtype(compute, "GPT");
  int unit = -1;
  for (size_t i = 0; i < layout_.size(); ++i) {
    if (layout_[i].unit != unit) {
      unit = layout_[i].unit;
      unit_first_.push_back((int)i);
    }
    vars_.emplace_back(Tensor(), false, layout_[i].name);  // requires a gradient once bound
    vars_.back().impl()->parameter = true;
  }
  unit_first_.push_back((int)layout_.size());
}

GPT::GPT(const GPTConfig& config, Device device, uint64_t seed, DType compute)
    : GPT(config, device, compute) {
  const int64_t P = config.total_params();
  params_ = Tensor::empty({P}, DType::f32, device);
  compute_params_ = compute == DType::f32 ? params_ : Tensor::empty({P}, compute, device);
  grads_ = Tensor::zeros({P}, DType::f32, device);
  init_slice(layout_, seed, 0, params_);
  sync_compute_params();
  for (int u = 0; u < config.num_units(); ++u) {
    const auto [offset, count] = unit_range(u);
    bind_unit(u, compute_params_.flat_slice(offset, count), grads_.flat_slice(offset, count));
  }
}

void GPT::sync_compute_params() {
  GPUMIX_CHECK(params_.defined(), "sync_compute_params: this model has no storage of its own "
               "(its units are bound to outside buffers)");
  if (compute_dtype_ != DType::f32) ops::convert(compute_params_, params_);
}

void GPT::bind_unit(int unit, const Tensor& params, const Tensor& grads) {
  const auto [unit_offset, count] = unit_range(unit);
  GPUMIX_CHECK(params.numel() == count && (!grads.defined() || grads.numel() == count), "bind_unit ",
               unit, ": the unit has ", count, " parameters, got buffers of ", params.numel(), " and ",
               grads.defined() ? grads.numel() : 0);
  GPUMIX_CHECK(params.dtype() == compute_dtype_, "bind_unit ", unit, ": parameters must be ",
               dtype_name(compute_dtype_), " (the model's compute dtype), got ",
               dtype_name(params.dtype()));
  GPUMIX_CHECK(!grads.defined() || grads.dtype() == DType::f32, "bind_unit ", unit,
               ": gradients must be f32 (parameter gradients are fp32 in every compute dtype), got ",
               dtype_name(grads.dtype()));
  for (int i = unit_first_[unit]; i < unit_first_[unit + 1]; ++i) {
    const ParamInfo& info = layout_[i];
    VarImpl& v = *vars_[i].impl();
    const int64_t at = info.offset - unit_offset, n = info.shape.numel();
    v.value = params.flat_slice(at, n).view(info.shape);
    v.grad = grads.defined() ? grads.flat_slice(at, n).view(info.shape) : Tensor();
    v.requires_grad = grads.defined();
    if (info.used < n) {  // a padded parameter's used rows (the vocabulary's): value and gradient
      const int64_t cols = info.shape[info.shape.ndim - 1], rows = info.used / cols;
      used_vars_[i] = Var(v.value.flat_slice(0, info.used).view({rows, cols}), false, info.name);
      VarImpl& w = *used_vars_[i].impl();
      w.parameter = true;
      w.grad = v.grad.defined() ? v.grad.flat_slice(0, info.used).view({rows, cols}) : Tensor();
      w.requires_grad = v.requires_grad;
    }
  }
}

void GPT::unbind_unit(int unit) {
  unit_range(unit);  // checks the index
  for (int i = unit_first_[unit]; i < unit_first_[unit + 1]; ++i) {
    VarImpl& v = *vars_[i].impl();
    v.value = v.grad = Tensor();
    v.requires_grad = false;
    used_vars_[i] = Var();
  }
}

std::pair<int64_t, int64_t> GPT::unit_range(int unit) const {
  GPUMIX_CHECK(unit >= 0 && unit < config_.num_units(), "unit ", unit, " outside 0..",
               config_.num_units() - 1);
  const ParamInfo& first = layout_[unit_first_[unit]];
  return {first.offset, config_.unit_params(unit)};
}

const Var& GPT::param_named(int unit, const char* suffix) const {
  for (int i = unit_first_[unit]; i < unit_first_[unit + 1]; ++i) {
    const std::string& name = layout_[i].name;
    const size_t n = std::strlen(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return vars_[i];
  }
  GPUMIX_CHECK(false, "no parameter ending in '", suffix, "' in unit ", unit);
}

const Var& GPT::param_used(int i) const { return layout_[i].used < layout_[i].shape.numel() ? used_vars_[i] : vars_[i]; }

Var GPT::embed(const Tensor& tokens) const { return stages_->embed(*this, tokens); }

Var GPT::block(int l, const Var& x) const { return stages_->block(*this, l, x); }

Var GPT::head(const Var& x) const { return stages_->head(*this, x, true); }

Var GPT::head_loss(const Var& x, const Tensor& targets, float scale) const {
  return classifier_loss(head(x), targets, scale, config_.V);
}

Var GPT::loss(const Tensor& tokens, const Tensor& targets, float scale, bool use_recompute) const {
  Var x = embed(tokens);
  for (int l = 0; l < config_.L; ++l) {
    if (use_recompute)
      x = recompute([this, l](const std::vector<Var>& in) { return block(l, in[0]); }, {x});
    else
      x = block(l, x);
  }
  return head_loss(x, targets, scale);
}

Tensor GPT::logits(const Tensor& tokens) const {
  NoGradGuard no_grad;
  Var x = embed(tokens);
  for (int l = 0; l < config_.L; ++l) x = block(l, x);
  const Tensor out = stages_->head(*this, x, false).value();  // the model's V columns only
  return out.dtype() == DType::f32 ? out : out.to(DType::f32);
}

}  // namespace gpumix
