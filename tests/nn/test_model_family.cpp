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

// Hugging Face's parameter counts of the three published presets (config.json's shapes;
// SmolLM2 ties its head, TinyLlama and LLaMA 7B do not).
TEST(ModelFamily, LlamaPresetsCountHuggingFacesParameters) {
  EXPECT_EQ(gpt_preset("smollm2-135m").saved_params(), 134515008);
  EXPECT_EQ(gpt_preset("tinyllama-1.1b").saved_params(), 1100048384);
  EXPECT_EQ(gpt_preset("llama-7b").saved_params(), 6738415616);
  for (const char* name : {"llama-nano", "smollm2-135m", "tinyllama-1.1b", "llama-7b"}) {
    const GPTConfig c = gpt_preset(name);
    EXPECT_EQ(c.family, "llama") << name;
    EXPECT_NO_THROW(c.validate()) << name;
  }
}

TEST(ModelFamily, LlamaDescribesItsUnitsAndCosts) {
  GPTConfig c = gpt_preset("tinyllama-1.1b");
  const int64_t C = c.C, kv = 4 * (2048 / 32), ff = 5632;
  EXPECT_EQ(c.block_params(), 2 * C + 2 * C * C + 2 * C * kv + 3 * C * ff);
  EXPECT_EQ(c.embed_params(), c.Vp() * C);  // no position table
  EXPECT_EQ(c.head_params(), C + c.Vp() * C);
  EXPECT_FALSE(c.head_reads_embedding());
  // Forward FLOPs: twice the matmul weights (the head's V x C included) plus attention.
  const double matmul = (double)c.L * (2 * C * C + 2 * C * kv + 3 * C * ff) + (double)c.V * C;
  EXPECT_DOUBLE_EQ(c.forward_flops_per_token(2048), 2 * matmul + c.L * 2.0 * 2049 * C);
  c.tied = true;
  EXPECT_EQ(c.head_params(), C);
  EXPECT_TRUE(c.head_reads_embedding());
  // Llama's MLP width when none is given: 2/3 of 4C, rounded up to 256.
  for (const char* name : {"smollm2-135m", "tinyllama-1.1b", "llama-7b"}) {
    GPTConfig p = gpt_preset(name);
    const int64_t given = p.block_params();
    p.FF = 0;
    EXPECT_EQ(p.block_params(), given) << name;
  }
}

TEST(ModelFamily, LlamaJsonNamesItsFamilyAndFields) {
  const GPTConfig c = gpt_preset("smollm2-135m");
  const nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j.at("family"), "llama");
  EXPECT_EQ(j.at("KV"), 3);
  EXPECT_EQ(j.at("FF"), 1536);
  EXPECT_EQ(j.at("rope_theta"), 100000.0);
  EXPECT_EQ(j.at("tied"), true);
  const GPTConfig back = config_from_json(j, "model");
  EXPECT_EQ(back.family, "llama");
  EXPECT_EQ(back.KV, 3);
  EXPECT_EQ(back.saved_params(), c.saved_params());
  EXPECT_EQ(config_to_json(back), j);
  // Missing fields take the family's defaults: NH key/value heads, Llama's MLP width.
  nlohmann::json bare = {{"name", "custom"}, {"family", "llama"}, {"L", 2}, {"NH", 4}, {"C", 64}, {"V", 256}, {"T", 32}};
  const GPTConfig d = config_from_json(bare, "model");
  EXPECT_EQ(config_to_json(d).at("KV"), 4);
  EXPECT_EQ(config_to_json(d).at("FF"), 256);  // 2/3 of 256 -> 171 -> 256
  bare["KV"] = "two";
  std::string m = message_of([&] { config_from_json(bare, "plan.model"); });
  EXPECT_NE(m.find("plan.model.KV: wrong type"), std::string::npos) << m;
  bare["KV"] = 3;
  m = message_of([&] { config_from_json(bare, "plan.model"); });
  EXPECT_NE(m.find("KV (key/value heads) = 3 must divide NH (heads) = 4"), std::string::npos) << m;
}

TEST(ModelFamily, LlamaRefusesBadFieldsByName) {
  GPTConfig c = gpt_preset("llama-nano");
  c.KV = 3;
  EXPECT_NE(message_of([&] { c.validate(); }).find("must divide NH"), std::string::npos);
  c = gpt_preset("llama-nano");
  c.C = 4 * 33;  // head size 33: no channel pairs to rotate
  EXPECT_NE(message_of([&] { c.validate(); }).find("must be even"), std::string::npos);
  c = gpt_preset("llama-nano");
  c.norm_eps = 2;
  EXPECT_NE(message_of([&] { c.validate(); }).find("norm_eps must be in (0, 1)"), std::string::npos);
}

// The shape is there, the stages are not: whatever computes says so by name.
TEST(ModelFamily, LlamaHasNoStagesYetAndSaysWhatWorks) {
  const std::string m = message_of([] { model_stages(gpt_preset("llama-nano")); });
  EXPECT_NE(m.find("model llama-nano: the llama family has a shape but no stages"), std::string::npos) << m;
  EXPECT_NE(m.find("gpumix plan"), std::string::npos) << m;
}

}  // namespace
}  // namespace gpumix
