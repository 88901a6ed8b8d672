#include "dist/engine/whole_model_engine.h"

#include "core/ops.h"

namespace gpumix::dist {

WholeModelEngine::WholeModelEngine(const GPTConfig& config, Device device, DType compute, uint64_t seed,
                                   const AdamWConfig& adam, bool recompute)
    : model_(config, device, seed, compute),
      opt_(model_.layout(), 0, model_.num_params(), device, adam),
      recompute_(recompute) {}

std::vector<Tensor> WholeModelEngine::forward_backward(const Tensor& inputs, const Tensor& targets,
                                                       int64_t micro, float scale) {
  {
    TraceSpan span(tracer, "zero gradients", "compute");
    model_.zero_grad();
  }
  std::vector<Tensor> losses;
  for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
    Var l;
    {
      TraceSpan span(tracer, "forward", "compute", -1, (int)j);
      l = model_.loss(inputs.slice(r0, r1), targets.slice(r0, r1), scale, recompute_);
    }
    TraceSpan span(tracer, "backward", "compute", -1, (int)j);
    backward(l);
    losses.push_back(l.value());
  });
  return losses;
}

std::vector<Tensor> WholeModelEngine::loss_sums(const Tensor& inputs, const Tensor& targets, int64_t micro) {
  NoGradGuard no_grad;
  std::vector<Tensor> sums;
  for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
    TraceSpan span(tracer, "forward", "compute", -1, (int)j);
    sums.push_back(model_.loss(inputs.slice(r0, r1), targets.slice(r0, r1), 1.0f).value());
  });
  return sums;
}

std::vector<Tensor> WholeModelEngine::unit_grads() {
  std::vector<Tensor> out;
  for (int u = 0; u < model_.config().num_units(); ++u) {
    const auto [offset, count] = model_.unit_range(u);
    out.push_back(model_.grads().flat_slice(offset, count));
  }
  return out;
}

void WholeModelEngine::scale_grads(float f) { ops::scale(model_.grads(), model_.grads(), f); }

void WholeModelEngine::optimizer_step(float lr, int step) {
  opt_.step(model_.params(), model_.grads(), lr, step, model_.compute_params());
}

std::vector<OwnedSlice> WholeModelEngine::slices() { return {{0, model_.params(), &opt_}}; }

}  // namespace gpumix::dist
