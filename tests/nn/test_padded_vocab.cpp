// The padded vocabulary (GPTConfig::Vp) and the fused classifier in the model: the layout
// and the saved runs; the real rows' initial weights as without padding; the loss and every
// gradient equal to the unfused head on the V real rows (f32 and bf16); padding that holds
// garbage changes no loss, no logit and no sample; training leaves it at zero; checkpoints
// hold V rows (an old, unpadded checkpoint loads). Models with V not a multiple of 128.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "../core/test_util.h"
#include "autograd/functions.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/checkpoint.h"
#include "nn/gpt.h"
#include "nn/infer.h"
#include "nn/optim.h"
#include "nn_test_util.h"

namespace gpumix {
namespace {

using test::bf16_rtol;
using test::model_close;
using test::random_tokens;

GPTConfig padded_config() {  // V = 97 -> Vp = 128
  GPTConfig c = test::tiny_config();
  c.C = 16;
  c.V = 97;
  return c;
}

int find(const GPT& m, const std::string& name) {
  for (size_t i = 0; i < m.layout().size(); ++i)
    if (m.layout()[i].name == name) return (int)i;
  return -1;
}

// Elements [V*C, Vp*C) of the flat buffer `flat` (wte is the first parameter).
std::vector<float> padding_of(const std::vector<float>& flat, const GPTConfig& c) {
  return std::vector<float>(flat.begin() + (int64_t)c.V * c.C, flat.begin() + c.Vp() * c.C);
}

void fill_padding(GPT& m, float value) {
  const GPTConfig& c = m.config();
  m.params().flat_slice((int64_t)c.V * c.C, (c.Vp() - c.V) * c.C).fill_(value);
  m.sync_compute_params();
}

// The unfused reference of GPT::loss: the same stages, then the head on wte's first V rows
// and the plain cross-entropy (ops::crossentropy_*), gradients into the model's buffers.
float unfused_loss(GPT& m, const Tensor& tokens, const Tensor& targets, float scale) {
  const int64_t V = m.config().V, C = m.config().C;
  const Var& w = m.param(0);
  Var wte(w.value().flat_slice(0, V * C).view({V, C}), true, "wte");
  wte.impl()->parameter = true;
  wte.impl()->grad = w.grad().flat_slice(0, V * C).view({V, C});
  Var x = m.embed(tokens);
  for (int l = 0; l < m.config().L; ++l) x = m.block(l, x);
  Var h = layernorm(x, m.param(find(m, "ln_f.weight")), m.param(find(m, "ln_f.bias")));
  Var loss = cross_entropy(linear(h, wte, Var()), targets, scale);
  backward(loss);
  return loss.value().item();
}

TEST(PaddedVocab, LayoutAndSavedRuns) {
  EXPECT_EQ(gpt_preset("gpt2").Vp(), 50304);
  EXPECT_EQ(gpt_preset("gpt-nano").Vp(), 4096);  // already a multiple: nothing added
  const GPTConfig c = padded_config();
  const auto layout = gpt_param_layout(c);
  EXPECT_EQ(layout[0].shape, (Shape{128, 16}));
  EXPECT_EQ(layout[0].used, 97 * 16);
  const int64_t pad = (128 - 97) * 16, P = c.total_params();
  EXPECT_EQ(c.saved_params(), P - pad);
  // The whole buffer: wte's V rows, then everything after the padding, shifted by it.
  const auto all = gpt_saved_runs(layout, 0, P);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].flat, 0);
  EXPECT_EQ(all[0].saved, 0);
  EXPECT_EQ(all[0].count, 97 * 16);
  EXPECT_EQ(all[1].flat, 128 * 16);
  EXPECT_EQ(all[1].saved, 97 * 16);
  EXPECT_EQ(all[1].count, P - 128 * 16);
  // A slice inside the padding holds nothing; one across it, two runs.
  EXPECT_TRUE(gpt_saved_runs(layout, 100 * 16, 10).empty());
  const auto across = gpt_saved_runs(layout, 97 * 16 - 5, pad + 10);
  ASSERT_EQ(across.size(), 2u);
  EXPECT_EQ(across[0].count, 5);
  EXPECT_EQ(across[1].flat, 128 * 16);
  EXPECT_EQ(across[1].saved, 97 * 16);
  EXPECT_EQ(across[1].count, 5);
}

TEST(PaddedVocab, RealRowsStartAsWithoutPaddingAndThePaddingAtZero) {
  const GPTConfig c = padded_config();
  GPT m(c, Device::cpu(), 7);
  // wte's V rows are elements 0.. of its named stream, as before the padding existed.
  Tensor expect = Tensor::empty({(int64_t)c.V * c.C}, DType::f32);
  ops::normal_(expect, rng_key(7, "wte"), 0, 0.0f, 0.02f);
  const std::vector<float> p = m.params().to_vector();
  EXPECT_TRUE(std::equal(p.begin(), p.begin() + (int64_t)c.V * c.C, expect.to_vector().begin()));
  for (float x : padding_of(p, c)) ASSERT_EQ(x, 0.0f);
  // A shard's slice across the padding initialises to the same numbers.
  Tensor part = Tensor::empty({c.Vp() * c.C});
  GPT::init_slice(m.layout(), 7, 50 * c.C, part);
  const std::vector<float> q = part.to_vector();
  EXPECT_TRUE(std::equal(q.begin(), q.end(), p.begin() + 50 * c.C));
}

void expect_fused_equals_unfused(DType dtype) {
  const GPTConfig c = padded_config();
  GPT m(c, Device::cpu(), 3, dtype);
  const int64_t B = 3;
  const Tensor tokens = random_tokens(B, c.T, c.V, 1);
  const Tensor t0 = random_tokens(B, c.T, c.V, 2);
  std::vector<int32_t> t(t0.data<int32_t>(), t0.data<int32_t>() + t0.numel());
  t[4] = -1;  // an ignored target
  const Tensor targets = Tensor::from_vector(t, {B, c.T});
  const float scale = 1.0f / (float)(B * c.T);
  m.zero_grad();
  const float ref = unfused_loss(m, tokens, targets, scale);
  const std::vector<float> gref = m.grads().to_vector();
  m.zero_grad();
  Var loss = m.loss(tokens, targets, scale);
  backward(loss);
  const std::vector<float> g = m.grads().to_vector();
  // The same numbers up to the order of fp32 sums (a GEMM of Vp rows may block otherwise)
  // and, in bf16, the roundings of the logits and dlogits (R = 2).
  const int R = dtype == DType::bf16 ? 2 : 0;
  EXPECT_NEAR(loss.value().item(), ref, bf16_rtol(R, 4 * c.C) * std::fabs(ref)) << dtype_name(dtype);
  for (const ParamInfo& p : m.layout()) {
    const auto from = (std::ptrdiff_t)p.offset, to = from + (std::ptrdiff_t)p.used;
    EXPECT_TRUE(model_close(p.name.c_str(), std::vector<float>(g.begin() + from, g.begin() + to),
                            std::vector<float>(gref.begin() + from, gref.begin() + to), R, B * c.T + 4 * c.C))
        << dtype_name(dtype);
  }
  for (float x : padding_of(g, c)) ASSERT_EQ(x, 0.0f) << "a padding row has a gradient";
}

TEST(PaddedVocab, FusedLossAndGradientsEqualTheUnfusedHeadF32) { expect_fused_equals_unfused(DType::f32); }
TEST(PaddedVocab, FusedLossAndGradientsEqualTheUnfusedHeadBf16) { expect_fused_equals_unfused(DType::bf16); }

TEST(PaddedVocab, NotTheRootTheGradientIsScaledByTheLossGradient) {
  const GPTConfig c = padded_config();
  GPT m(c, Device::cpu(), 3);
  const Tensor tokens = random_tokens(2, c.T, c.V, 1), targets = random_tokens(2, c.T, c.V, 2);
  m.zero_grad();
  backward(m.loss(tokens, targets, 0.1f));
  const std::vector<float> once = m.grads().to_vector();
  m.zero_grad();
  backward(m.loss(tokens, targets, 0.1f), Tensor::full({1}, 2.5f, DType::f32));  // dloss 2.5
  const std::vector<float> scaled = m.grads().to_vector();
  std::vector<float> expect(once);
  for (float& x : expect) x *= 2.5f;
  // One more rounding per dlogit (x 2.5), then the same sums.
  EXPECT_TRUE(model_close("gradients x 2.5", scaled, expect, 0, 2 * c.T + 4 * c.C));
}

TEST(PaddedVocab, GarbageInThePaddingChangesNoLossLogitOrSample) {
  const GPTConfig c = padded_config();
  GPT m(c, Device::cpu(), 5);
  float* p = m.params().data<float>();  // peaked distributions: ids not a rounding apart
  for (int64_t i = 0; i < m.num_params(); ++i) p[i] *= 3;
  const Tensor tokens = random_tokens(2, c.T, c.V, 3), targets = random_tokens(2, c.T, c.V, 4);
  const float before = m.loss(tokens, targets, 1.0f).value().item();
  clear_tape();
  const Tensor logits = m.logits(tokens);
  EXPECT_EQ(logits.shape(), (Shape{2, c.T, c.V}));  // the model's V only
  std::vector<int32_t> greedy{1, 2}, sampled{1, 2};
  SampleOptions o;
  o.tokens = 12;
  o.temperature = 0;
  sample_tokens(m, greedy, o);
  o.temperature = 1.0f;
  o.top_k = 0;
  sample_tokens(m, sampled, o);
  // Padding rows far above every real logit's scale: were a padding column in a softmax,
  // an argmax or a sample, it would win.
  fill_padding(m, 100.0f);
  m.zero_grad();
  Var loss = m.loss(tokens, targets, 1.0f);
  backward(loss);
  EXPECT_EQ(loss.value().item(), before);
  for (float x : padding_of(m.grads().to_vector(), c)) ASSERT_EQ(x, 0.0f);
  EXPECT_EQ(m.logits(tokens).to_vector(), logits.to_vector());
  std::vector<int32_t> greedy2{1, 2}, sampled2{1, 2};
  o.temperature = 0;
  o.top_k = 40;
  sample_tokens(m, greedy2, o);
  o.temperature = 1.0f;
  o.top_k = 0;
  sample_tokens(m, sampled2, o);
  EXPECT_EQ(greedy2, greedy);
  EXPECT_EQ(sampled2, sampled);
  for (int32_t id : sampled2) EXPECT_LT(id, c.V);
}

TEST(PaddedVocab, TrainingLeavesThePaddingAtZero) {
  const GPTConfig c = padded_config();
  for (DType dtype : {DType::f32, DType::bf16}) {
    GPT m(c, Device::cpu(), 9, dtype);
    AdamW opt(m.layout(), 0, m.num_params(), Device::cpu(), AdamWConfig{1e-2f});
    for (int step = 1; step <= 3; ++step) {
      m.zero_grad();
      backward(m.loss(random_tokens(2, c.T, c.V, step), random_tokens(2, c.T, c.V, step + 10), 0.1f));
      opt.step(m.params(), m.grads(), 1e-2f, step, m.compute_params());
    }
    for (float x : padding_of(m.params().to_vector(), c)) ASSERT_EQ(x, 0.0f) << dtype_name(dtype);
    for (float x : padding_of(opt.m().to_vector(), c)) ASSERT_EQ(x, 0.0f) << dtype_name(dtype);
  }
}

// A checkpoint of the layout before the padding (master: the flat buffer with wte's V rows
// only, as every checkpoint written so far) loads, padding zero; the model's own save
// writes exactly those elements.
TEST(PaddedVocab, AnUnpaddedCheckpointLoadsIntoThePaddedModel) {
  const GPTConfig c = padded_config();
  GPT m(c, Device::cpu(), 13);
  const std::vector<float> p = m.params().to_vector();
  std::vector<float> unpadded(p.begin(), p.begin() + (int64_t)c.V * c.C);
  unpadded.insert(unpadded.end(), p.begin() + c.Vp() * c.C, p.end());
  ASSERT_EQ((int64_t)unpadded.size(), c.saved_params());
  const std::string out = testing::TempDir() + "padded_vocab_ckpt";
  std::filesystem::remove_all(out);
  CheckpointWriter w;
  const std::string tmp = w.begin(out, 1, {{"master", c.saved_params()}});
  CheckpointWriter::write_slice(tmp, "master", 0, unpadded.data(), c.saved_params());
  CheckpointMeta meta;
  meta.model = config_to_json(c);
  const std::unique_ptr<GPT> back = load_model(CheckpointReader(w.commit(meta)));
  EXPECT_EQ(back->params().to_vector(), p);
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace gpumix
