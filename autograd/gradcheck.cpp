#include "autograd/gradcheck.h"

#include <cmath>

#include "core/ops.h"
#include "core/precision.h"
#include "core/rng.h"

namespace gpumix {

namespace {

constexpr double kBf16Roundoff = 1.0 / 256;  // 2^-8: half the spacing of bf16 above 1

// L = sum(r * out) in double.
double projected(const Var& out, const std::vector<float>& r) {
  const std::vector<float> o = out.value().to_vector();
  double total = 0;
  for (size_t i = 0; i < o.size(); ++i) total += (double)r[i] * o[i];
  return total;
}

// fp32 copies of bf16 inputs (the same values), as fresh variables of the same kind; on
// the CPU where the inputs' device does not compute in fp32 (CUDA), whose fp32 path is the
// same function.
std::vector<Var> fp32_twins(const std::vector<Var>& inputs) {
  std::vector<Var> twins;
  for (const Var& v : inputs) {
    Tensor t = v.value().dtype() == DType::bf16 ? v.value().to(DType::f32) : v.value();
    if (!backend_supports(t.device(), DType::f32)) t = t.to(Device::cpu());
    twins.push_back(v.fresh(t));
  }
  return twins;
}

}  // namespace

GradCheckResult check_gradients(const RecomputeFn& f, const std::vector<Var>& inputs,
                                const GradCheckOptions& options) {
  bool bf16_mode = false;
  for (const Var& v : inputs) {
    const_cast<Var&>(v).clear_grad();
    bf16_mode |= v.value().dtype() == DType::bf16;
  }
  clear_tape();
  Var out = f(inputs);
  // The projection in the output's gradient dtype; its values (bf16-representable in bf16
  // mode) project the fp32 twins' outputs too.
  Tensor r = Tensor::empty(out.value().shape(), DType::f32, out.value().device());
  ops::uniform_(r, rng_key(options.seed, "gradcheck.projection"), 0, -1.0f, 1.0f);
  const DType rdtype = grad_dtype(*out.impl());
  if (rdtype != DType::f32) r = r.to(rdtype);
  const std::vector<float> rv = r.to_vector();
  backward(out, r);

  // Finite differences perturb these in place: the inputs themselves, or their twins.
  const std::vector<Var> probed = bf16_mode ? fp32_twins(inputs) : inputs;
  GradCheckResult result;
  for (size_t which = 0; which < inputs.size(); ++which) {
    const Var& in = inputs[which];
    if (!in.requires_grad()) continue;
    const std::vector<float> analytic =
        in.grad().defined() ? in.grad().to_vector() : std::vector<float>(in.value().numel(), 0.0f);
    const int64_t n = in.value().numel();
    const int64_t probes = std::min<int64_t>(n, options.max_checks_per_input);
    std::vector<int64_t> at(probes);
    std::vector<double> numeric(probes);
    double sum_squares = 0;
    for (int64_t p = 0; p < probes; ++p) {
      const int64_t i = probes == n ? p : (int64_t)(mix64(options.seed + which * 7919 + p) % n);
      // Perturb element i in place, evaluate, restore.
      Tensor element = probed[which].value().view({-1}).flat_slice(i, 1);
      const float saved = element.item();
      auto eval_at = [&](float value) {
        element.fill_(value);
        NoGradGuard no_grad;
        return projected(f(probed), rv);
      };
      const double plus = eval_at(saved + (float)options.eps);
      const double minus = eval_at(saved - (float)options.eps);
      eval_at(saved);
      at[p] = i;
      numeric[p] = (plus - minus) / (2 * options.eps);
      sum_squares += numeric[p] * numeric[p];
    }
    const double rms = probes ? std::sqrt(sum_squares / (double)probes) : 0;
    double worst = -1;
    std::string worst_text;
    for (int64_t p = 0; p < probes; ++p) {
      const int64_t i = at[p];
      const double error = std::fabs(numeric[p] - analytic[i]);
      double allowance = options.atol + options.rtol * std::fabs(numeric[p]);
      if (bf16_mode) allowance += options.bf16_roundings * kBf16Roundoff * (std::fabs(numeric[p]) + rms);
      const double excess = error / allowance;
      if (excess > worst) {
        worst = excess;
        worst_text = str("input ", which, (in.name().empty() ? "" : " (" + in.name() + ")"),
                         " element ", i, ": numeric ", numeric[p], ", analytic ", analytic[i],
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
