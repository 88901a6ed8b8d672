#include "nn/gpt.h"

#include <cmath>
#include <cstring>

#include "autograd/functions.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/rng.h"

namespace gpumix {

std::vector<ParamInfo> gpt_param_layout(const GPTConfig& config) {
  config.validate();
  const int64_t C = config.C, V = config.V, T = config.T;
  const float std_w = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * config.L);
  std::vector<ParamInfo> layout;
  int64_t offset = 0;
  auto add = [&](std::string name, Shape shape, int unit, bool decay, float init_std) {
    layout.push_back({std::move(name), shape, offset, unit, decay, init_std, shape.numel()});
    offset += shape.numel();
  };
  add("wte", {config.Vp(), C}, 0, true, std_w);  // (Vp, C), also the LM head
  layout.back().used = V * C;                     // rows V..Vp-1: padding
  add("wpe", {T, C}, 0, true, std_w);  // (T, C)
  for (int l = 0; l < config.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const int unit = l + 1;
    add(h + "ln_1.weight", {C}, unit, false, -1);
    add(h + "ln_1.bias", {C}, unit, false, 0);
    add(h + "attn.c_attn.weight", {3 * C, C}, unit, true, std_w);
    add(h + "attn.c_attn.bias", {3 * C}, unit, false, 0);
    add(h + "attn.c_proj.weight", {C, C}, unit, true, std_residual);
    add(h + "attn.c_proj.bias", {C}, unit, false, 0);
    add(h + "ln_2.weight", {C}, unit, false, -1);
    add(h + "ln_2.bias", {C}, unit, false, 0);
    add(h + "mlp.c_fc.weight", {4 * C, C}, unit, true, std_w);
    add(h + "mlp.c_fc.bias", {4 * C}, unit, false, 0);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, unit, true, std_residual);
    add(h + "mlp.c_proj.bias", {C}, unit, false, 0);
  }
  add("ln_f.weight", {C}, config.L + 1, false, -1);
  add("ln_f.bias", {C}, config.L + 1, false, 0);
  GPUMIX_CHECK(offset == config.total_params(), "parameter layout has ", offset,
               " elements but the config counts ", config.total_params());
  return layout;
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
    : config_(config), device_(device), compute_dtype_(compute), layout_(gpt_param_layout(config)) {
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
  }
  if (unit == 0) {  // the embedding's view of wte: its first V rows, value and gradient
    const VarImpl& wte = *vars_[0].impl();
    const int64_t V = config_.V, C = config_.C;
    wte_vocab_ = Var(wte.value.flat_slice(0, V * C).view({V, C}), false, "wte");
    VarImpl& w = *wte_vocab_.impl();
    w.parameter = true;
    w.grad = wte.grad.defined() ? wte.grad.flat_slice(0, V * C).view({V, C}) : Tensor();
    w.requires_grad = wte.requires_grad;
  }
}

void GPT::unbind_unit(int unit) {
  unit_range(unit);  // checks the index
  for (int i = unit_first_[unit]; i < unit_first_[unit + 1]; ++i) {
    VarImpl& v = *vars_[i].impl();
    v.value = v.grad = Tensor();
    v.requires_grad = false;
  }
  if (unit == 0) wte_vocab_ = Var();
}

std::pair<int64_t, int64_t> GPT::unit_range(int unit) const {
  GPUMIX_CHECK(unit >= 0 && unit < config_.num_units(), "unit ", unit, " outside 0..",
               config_.num_units() - 1);
  const ParamInfo& first = layout_[unit_first_[unit]];
  return {first.offset, config_.unit_params(unit)};
}

const Var& GPT::p(int unit, const char* suffix) const {
  for (int i = unit_first_[unit]; i < unit_first_[unit + 1]; ++i) {
    const std::string& name = layout_[i].name;
    const size_t n = std::strlen(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return vars_[i];
  }
  GPUMIX_CHECK(false, "no parameter ending in '", suffix, "' in unit ", unit);
}

Var GPT::embed(const Tensor& tokens) const { return embedding(tokens, wte_vocab_, vars_[1]); }

Var GPT::block(int l, const Var& x) const {
  const int u = l + 1;
  // Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
  Var h = layernorm(x, p(u, "ln_1.weight"), p(u, "ln_1.bias"));
  h = linear(h, p(u, "attn.c_attn.weight"), p(u, "attn.c_attn.bias"));  // (B, T, 3C)
  h = attention(h, config_.NH);                                           // (B, T, C)
  h = linear(h, p(u, "attn.c_proj.weight"), p(u, "attn.c_proj.bias"));
  Var x1 = add(x, h);
  h = layernorm(x1, p(u, "ln_2.weight"), p(u, "ln_2.bias"));
  // (B, T, 4C) in the middle, GELU in the products' epilogues
  h = mlp(h, p(u, "mlp.c_fc.weight"), p(u, "mlp.c_fc.bias"), p(u, "mlp.c_proj.weight"),
          p(u, "mlp.c_proj.bias"));
  return add(x1, h);
}

Var GPT::ln_f(const Var& x) const {
  const int u = config_.L + 1;
  return layernorm(x, p(u, "ln_f.weight"), p(u, "ln_f.bias"));
}

Var GPT::head(const Var& x) const {
  return linear(ln_f(x), vars_[0], Var());  // tied: logits = h @ wte^T, (B, T, Vp)
}

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
  // The head on wte's V rows: no padding column to mask.
  const Tensor out = linear(ln_f(x), wte_vocab_, Var()).value();
  return out.dtype() == DType::f32 ? out : out.to(DType::f32);
}

}  // namespace gpumix
