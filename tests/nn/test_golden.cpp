// The whole model against PyTorch: logits, loss, every parameter gradient and the losses
// of a few AdamW steps, from tests/nn/golden_gpt.json (made by tests/nn/make_golden.py).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/ops.h"
#include "nn/gpt.h"
#include "nn/optim.h"

namespace gpumix {
namespace {

nlohmann::json load_golden() {
  std::ifstream in(GPUMIX_GOLDEN_FILE);
  EXPECT_TRUE(in.good()) << "cannot open " << GPUMIX_GOLDEN_FILE;
  return nlohmann::json::parse(in);
}

// fp32 against fp32 computed in another order: |a - b| <= atol + rtol * |b|, with rtol a
// multiple of FLT_EPSILON for the reduction lengths here (<= 4C = 64 terms per dot
// product, a few layers deep). Reports the worst element.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                  double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::fabs((double)got[i] - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst element " << at << " = " << got[at] << ", PyTorch "
                        << want[at] << ", " << worst << "x the allowance";
}

TEST(Golden, MatchesPyTorch) {
  const nlohmann::json g = load_golden();
  GPTConfig c;
  c.name = "golden";
  c.L = g["config"]["L"];
  c.NH = g["config"]["NH"];
  c.C = g["config"]["C"];
  c.V = g["config"]["V"];
  c.T = g["config"]["T"];
  const int64_t B = g["config"]["B"];
  GPT model(c, Device::cpu(), 0);
  const std::vector<float> params = g["params"].get<std::vector<float>>();
  ASSERT_EQ((int64_t)params.size(), model.num_params());
  model.params().copy_from(Tensor::from_vector(params, {model.num_params()}));

  const Tensor tokens = Tensor::from_vector(g["tokens"].get<std::vector<int32_t>>(), {B, c.T});
  const std::vector<int32_t> target_values = g["targets"].get<std::vector<int32_t>>();
  const Tensor targets = Tensor::from_vector(target_values, {B, c.T});
  int counted = 0;
  for (int32_t t : target_values) counted += t >= 0;

  const double rtol = 64 * FLT_EPSILON;
  expect_close(model.logits(tokens).to_vector(), g["logits"].get<std::vector<float>>(), "logits",
               1e-6, rtol);

  model.zero_grad();
  Var loss = model.loss(tokens, targets, 1.0f / counted);
  EXPECT_NEAR(loss.value().item(), g["loss"].get<double>(), 1e-6 + rtol * g["loss"].get<double>());
  backward(loss);
  expect_close(model.grads().to_vector(), g["grads"].get<std::vector<float>>(), "gradients", 1e-7,
               rtol);

  AdamWConfig cfg;
  cfg.beta1 = g["adamw"]["beta1"];
  cfg.beta2 = g["adamw"]["beta2"];
  cfg.eps = g["adamw"]["eps"];
  cfg.weight_decay = g["adamw"]["weight_decay"];
  const float lr = g["adamw"]["lr"];
  model.params().copy_from(Tensor::from_vector(params, {model.num_params()}));
  AdamW opt(model.layout(), 0, model.num_params(), Device::cpu(), cfg);
  const std::vector<double> want = g["step_losses"].get<std::vector<double>>();
  for (size_t step = 1; step <= want.size(); ++step) {
    model.zero_grad();
    Var l = model.loss(tokens, targets, 1.0f / counted);
    // Adam normalises each update, so rounding differences grow with the steps: allow
    // a little more than one forward pass's tolerance per step.
    EXPECT_NEAR(l.value().item(), want[step - 1], 1e-5 * step) << "AdamW step " << step;
    backward(l);
    opt.step(model.params(), model.grads(), lr, (int)step);
  }
}

}  // namespace
}  // namespace gpumix
