#include "dist/engine/whole_model_engine.h"

#include "core/ops.h"

namespace gpumix::dist {

WholeModelEngine::WholeModelEngine(const GPTConfig& config, Device device, DType compute, uint64_t seed,
                                   const AdamWConfig& adam, bool recompute)
    : model_(config, device, seed, compute),
      opt_(model_.layout(), 0, model_.num_params(), device, adam),
      recompute_(recompute) {}

double WholeModelEngine::forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                                          float scale) {
  {
    TraceSpan span(tracer, "zero gradients", "compute");
    model_.zero_grad();
  }
  double loss = 0;
  for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
    Var l;
    {
      TraceSpan span(tracer, "forward", "compute", -1, (int)j);
      l = model_.loss(inputs.slice(r0, r1), targets.slice(r0, r1), scale, recompute_);
    }
    TraceSpan span(tracer, "backward", "compute", -1, (int)j);
    backward(l);
    loss += l.value().item();
  });
  return loss;
}

double WholeModelEngine::loss_sum(const Tensor& inputs, const Tensor& targets, int64_t micro) {
  NoGradGuard no_grad;
  double sum = 0;
  for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
    TraceSpan span(tracer, "forward", "compute", -1, (int)j);
    sum += model_.loss(inputs.slice(r0, r1), targets.slice(r0, r1), 1.0f).value().item();
  });
  return sum;
}

double WholeModelEngine::grad_sum_squares() { return ops::sum_squares(model_.grads()); }

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
