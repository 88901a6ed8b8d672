// The GPT model: layout, initialisation, loss at initialisation, gradients (finite
// differences on a tiny model), recompute equivalence, and that it learns.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "core/ops.h"
#include "nn/gpt.h"
#include "nn/optim.h"
#include "nn_test_util.h"

namespace gpumix {
namespace {

using test::random_tokens;
using test::tiny_config;

TEST(GPT, LayoutCoversEveryParameterOnceInUnitOrder) {
  for (const char* name : {"gpt-nano", "gpt2", "gpt-6.7b"}) {
    const GPTConfig c = gpt_preset(name);
    const auto layout = gpt_param_layout(c);  // shapes only: no allocation
    int64_t offset = 0;
    int unit = 0;
    for (const ParamInfo& p : layout) {
      EXPECT_EQ(p.offset, offset) << p.name;
      EXPECT_GE(p.unit, unit) << p.name;
      unit = p.unit;
      offset += p.shape.numel();
    }
    EXPECT_EQ(offset, c.total_params()) << name;
  }
  EXPECT_NEAR((double)gpt_preset("gpt2").total_params(), 124.4e6, 0.2e6);
}

TEST(GPT, UnitRangesMatchTheConfig) {
  const GPTConfig c = tiny_config();
  GPT model(c, Device::cpu(), 1);
  int64_t next = 0;
  for (int u = 0; u < c.num_units(); ++u) {
    const auto [offset, count] = model.unit_range(u);
    EXPECT_EQ(offset, next);
    EXPECT_EQ(count, c.unit_params(u));
    next = offset + count;
  }
  EXPECT_EQ(next, model.num_params());
}

TEST(GPT, InitialisationDependsOnlyOnSeedAndName) {
  const GPTConfig c = tiny_config();
  GPT a(c, Device::cpu(), 5), b(c, Device::cpu(), 5), other(c, Device::cpu(), 6);
  EXPECT_EQ(a.params().to_vector(), b.params().to_vector());
  EXPECT_NE(a.params().to_vector(), other.params().to_vector());
  // A deeper model shares the first block's initial weights (those whose scale does not
  // depend on L): numbers follow names, not positions.
  GPTConfig deeper = c;
  deeper.L = 3;
  GPT d(deeper, Device::cpu(), 5);
  auto find = [](const GPT& m, const std::string& name) {
    for (size_t i = 0; i < m.layout().size(); ++i)
      if (m.layout()[i].name == name) return m.param((int)i).value().to_vector();
    return std::vector<float>();
  };
  EXPECT_EQ(find(a, "h.0.attn.c_attn.weight"), find(d, "h.0.attn.c_attn.weight"));
  EXPECT_FALSE(find(a, "h.0.attn.c_attn.weight").empty());
}

TEST(GPT, LossAtInitialisationIsNearLogV) {
  GPTConfig c = gpt_preset("gpt-nano");
  c.V = 512;
  c.T = 32;
  GPT model(c, Device::cpu(), 1);
  const Tensor tokens = random_tokens(4, 32, c.V, 1), targets = random_tokens(4, 32, c.V, 2);
  const float loss = model.loss(tokens, targets, 1.0f / (4 * 32)).value().item();
  clear_tape();
  EXPECT_NEAR(loss, std::log((double)c.V), 0.15);
}

TEST(GPT, GradientsMatchFiniteDifferences) {
  const GPTConfig c = tiny_config();
  GPT model(c, Device::cpu(), 3);
  const Tensor tokens = random_tokens(2, 5, c.V, 3), targets = random_tokens(2, 5, c.V, 4);
  std::vector<Var> params;
  for (size_t i = 0; i < model.layout().size(); ++i) params.push_back(model.param((int)i));
  auto f = [&](const std::vector<Var>&) { return model.loss(tokens, targets, 0.1f); };
  GradCheckOptions opt;
  opt.max_checks_per_input = 6;
  opt.eps = 1e-2;
  const GradCheckResult r = check_gradients(f, params, opt);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(GPT, RecomputeGivesTheSameGradients) {
  const GPTConfig c = tiny_config();
  GPT model(c, Device::cpu(), 4);
  const Tensor tokens = random_tokens(3, 6, c.V, 5), targets = random_tokens(3, 6, c.V, 6);
  model.zero_grad();
  backward(model.loss(tokens, targets, 1.0f / 18));
  const std::vector<float> plain = model.grads().to_vector();
  model.zero_grad();
  backward(model.loss(tokens, targets, 1.0f / 18, /*recompute=*/true));
  const std::vector<float> again = model.grads().to_vector();
  ASSERT_EQ(plain.size(), again.size());
  for (size_t i = 0; i < plain.size(); ++i)
    ASSERT_NEAR(plain[i], again[i], 1e-6 + 1e-5 * std::fabs(plain[i])) << "element " << i;
}

TEST(GPT, OverfitsOneBatch) {
  GPTConfig c = tiny_config();
  c.C = 32;
  c.NH = 4;
  c.T = 16;
  GPT model(c, Device::cpu(), 7);
  AdamWConfig cfg;
  cfg.weight_decay = 0;
  AdamW opt(model.layout(), 0, model.num_params(), Device::cpu(), cfg);
  const Tensor tokens = random_tokens(4, 16, c.V, 8), targets = random_tokens(4, 16, c.V, 9);
  float first = 0, last = 0;
  for (int step = 1; step <= 60; ++step) {
    model.zero_grad();
    Var loss = model.loss(tokens, targets, 1.0f / 64);
    backward(loss);
    opt.step(model.params(), model.grads(), 1e-2f, step);
    (step == 1 ? first : last) = loss.value().item();
  }
  EXPECT_LT(last, 0.3f * first) << "first " << first << " last " << last;
}

TEST(LRSchedule, WarmupThenCosine) {
  LRSchedule s;
  s.max_lr = 1.0f;
  s.min_lr = 0.1f;
  s.warmup = 10;
  s.total = 110;
  EXPECT_FLOAT_EQ(s.at(1), 0.1f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6);
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(500), 0.1f);
}

TEST(ClipFactor, ScalesOnlyAboveTheLimit) {
  EXPECT_FLOAT_EQ(clip_factor(0.5, 1.0), 1.0f);
  EXPECT_NEAR(clip_factor(4.0, 1.0), 0.25f, 1e-6);
  EXPECT_FLOAT_EQ(clip_factor(4.0, 0.0), 1.0f);
}

TEST(AdamW, WeightDecayOnlyOnDecayedParameters) {
  const GPTConfig c = tiny_config();
  GPT model(c, Device::cpu(), 1);
  AdamWConfig cfg;
  cfg.weight_decay = 0.5f;
  AdamW opt(model.layout(), 0, model.num_params(), Device::cpu(), cfg);
  model.params().fill_(1.0f);
  model.grads().zero_();
  opt.step(model.params(), model.grads(), 0.1f, 1);
  const std::vector<float> p = model.params().to_vector();
  for (const ParamInfo& info : model.layout())
    EXPECT_FLOAT_EQ(p[info.offset], info.decay ? 1.0f - 0.1f * 0.5f : 1.0f) << info.name;
}

}  // namespace
}  // namespace gpumix
