// The model-family interface (nn/model_family.h, nn/model_stages.h): the registry, the JSON
// of a model (GPT-2's unchanged, others naming their family), GPT-2's description.
#include <gtest/gtest.h>

#include <stdexcept>

#include "nn/gpt.h"
#include "nn/model_family.h"
#include "nn/model_stages.h"

namespace gpumix {
namespace {

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ModelFamily, RegistryNamesEveryFamilyAndRefusesAnUnknownOne) {
  EXPECT_STREQ(model_families().front()->name(), "gpt2");
  EXPECT_STREQ(model_family("gpt2").name(), "gpt2");
  const std::string m = message_of([] { model_family("mamba"); });
  EXPECT_NE(m.find("unknown model family 'mamba'"), std::string::npos) << m;
  EXPECT_NE(m.find("gpt2"), std::string::npos) << m;
}

TEST(ModelFamily, Gpt2JsonHasNoFamilyKeyAndOldJsonReadsAsGpt2) {
  const GPTConfig c = gpt_preset("gpt-nano");
  EXPECT_EQ(c.family, "gpt2");
  const nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j.find("family"), j.end()) << j.dump();
  EXPECT_EQ(j.size(), 6u) << j.dump();
  const GPTConfig back = config_from_json(j, "model");
  EXPECT_EQ(back.family, "gpt2");
  EXPECT_EQ(back.total_params(), c.total_params());
  nlohmann::json bad = j;
  bad["family"] = "mamba";
  const std::string m = message_of([&] { config_from_json(bad, "plan.model"); });
  EXPECT_NE(m.find("plan.model"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown model family 'mamba'"), std::string::npos) << m;
  bad["family"] = 3;
  EXPECT_NE(message_of([&] { config_from_json(bad, "plan.model"); }).find("family: must be"), std::string::npos);
}

TEST(ModelFamily, Gpt2RefusesOtherFamiliesFieldsByName) {
  GPTConfig c = gpt_preset("gpt-nano");
  c.KV = 2;
  EXPECT_NE(message_of([&] { c.validate(); }).find("KV (key/value heads)"), std::string::npos);
  c = gpt_preset("gpt-nano");
  c.tied = false;
  EXPECT_NE(message_of([&] { c.validate(); }).find("tied = false"), std::string::npos);
}

TEST(ModelFamily, Gpt2DescribesItsUnitsCostsAndStages) {
  const GPTConfig c = gpt_preset("gpt-nano");
  const int64_t C = c.C;
  EXPECT_EQ(c.block_params(), 12 * C * C + 13 * C);
  EXPECT_EQ(c.embed_params(), c.Vp() * C + (int64_t)c.T * C);
  EXPECT_EQ(c.head_params(), 2 * C);
  EXPECT_TRUE(c.head_reads_embedding());
  EXPECT_DOUBLE_EQ(c.forward_flops_per_token(64), c.L * c.block_forward_flops_per_token(64) + 2.0 * C * c.V);
  // The layout's units add up to the family's counts.
  int64_t per_unit[3] = {0, 0, 0};
  for (const ParamInfo& p : gpt_param_layout(c)) per_unit[p.unit == 0 ? 0 : p.unit == c.L + 1 ? 2 : 1] += p.shape.numel();
  EXPECT_EQ(per_unit[0], c.embed_params());
  EXPECT_EQ(per_unit[1], c.L * c.block_params());
  EXPECT_EQ(per_unit[2], c.head_params());
  // The embedding's backward fills unit 0's gradient where the tokens' rows are.
  const Tensor tokens = Tensor::from_vector(std::vector<int32_t>{3, 3}, {1, 2});
  const Tensor dx = Tensor::full({1, 2, C}, 1.0f, DType::f32, Device::cpu());
  Tensor g0 = Tensor::zeros({c.embed_params()}, DType::f32, Device::cpu());
  model_stages(c).embed_backward(c, g0, dx, tokens);
  const std::vector<float> g = g0.to_vector();
  EXPECT_EQ(g[3 * C], 2.0f);                  // wte row 3: both positions
  EXPECT_EQ(g[c.Vp() * C], 1.0f);             // wpe row 0
  EXPECT_EQ(g[0], 0.0f);                      // wte row 0: no token
}

}  // namespace
}  // namespace gpumix
