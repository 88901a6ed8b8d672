#include "autograd/gradcheck.h"

#include <cmath>

#include "core/ops.h"
#include "core/rng.h"

namespace gpumix {

namespace {

// L = sum(r * out) in double.
double projected(const Var& out, const std::vector<float>& r) {
  const std::vector<float> o = out.value().to_vector();
  double total = 0;
  for (size_t i = 0; i < o.size(); ++i) total += (double)r[i] * o[i];
  return total;
}

}  // namespace

GradCheckResult check_gradients(const RecomputeFn& f, const std::vector<Var>& inputs,
                                const GradCheckOptions& options) {
  for (const Var& v : inputs) const_cast<Var&>(v).clear_grad();
  clear_tape();
  Var out = f(inputs);
  Tensor r = Tensor::empty(out.value().shape(), DType::f32, out.value().device());
  ops::uniform_(r, rng_key(options.seed, "gradcheck.projection"), 0, -1.0f, 1.0f);
  const std::vector<float> rv = r.to_vector();
  backward(out, r);

  GradCheckResult result;
  for (size_t which = 0; which < inputs.size(); ++which) {
    const Var& in = inputs[which];
    if (!in.requires_grad()) continue;
    const std::vector<float> analytic =
        in.grad().defined() ? in.grad().to_vector() : std::vector<float>(in.value().numel(), 0.0f);
    const int64_t n = in.value().numel();
    const int64_t probes = std::min<int64_t>(n, options.max_checks_per_input);
    double worst = -1;
    std::string worst_text;
    for (int64_t p = 0; p < probes; ++p) {
      const int64_t i = probes == n ? p : (int64_t)(mix64(options.seed + which * 7919 + p) % n);
      // Perturb element i in place (the input's own storage), evaluate, restore.
      Tensor element = in.value().view({-1}).flat_slice(i, 1);
      const float saved = element.item();
      auto eval_at = [&](float value) {
        element.fill_(value);
        NoGradGuard no_grad;
        return projected(f(inputs), rv);
      };
      const double plus = eval_at(saved + (float)options.eps);
      const double minus = eval_at(saved - (float)options.eps);
      eval_at(saved);
      const double numeric = (plus - minus) / (2 * options.eps);
      const double error = std::fabs(numeric - analytic[i]);
      const double allowance = options.atol + options.rtol * std::fabs(numeric);
      const double excess = error / allowance;
      if (excess > worst) {
        worst = excess;
        worst_text = str("input ", which, (in.name().empty() ? "" : " (" + in.name() + ")"),
                         " element ", i, ": numeric ", numeric, ", analytic ", analytic[i],
                         ", error ", error, " vs allowance ", allowance);
      }
    }
    if (worst > result.worst_excess) result.worst_excess = worst;
    if (worst > 1) result.ok = false;
    result.report += worst_text + "\n";
  }
  return result;
}

}  // namespace gpumix
