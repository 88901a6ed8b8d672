// GPT in bf16 (nn/gpt.h "Precision"): the fp32 master and its bf16 compute copy (in f32 the
// master itself), bind_unit's dtypes, forward and backward in bf16 against f32 from the same
// weights, recompute and micro-batches unchanged, and AdamW rewriting the copy.
//
// Tolerance (tests/core/test_util.h model_close): every element within rtol (|ref| +
// rms(ref)), rms over the compared tensor (the logits; each parameter's gradient), rtol =
// R 2^-8 + (k + 2) FLT_EPSILON, and the whole within a normalised mean squared error of
// R 2^-16 + ((k + 2) eps)^2, with R the bf16 roundings on the longest path to the compared
// value and k the longest reduction on it. A GPT's forward path rounds, per block, 10 op
// outputs (ln, qkv, attention, proj, add, ln, fc, gelu, fc2, add) and, in the fused
// attention, possibly its probabilities; then the embedding, ln_f and the logits:
// R_forward = 11 L + 3. Its gradients add the backward's roundings of the same ops and of
// the residual gradients where the two paths meet (2 per block): R_backward = 2 R_forward
// + 2 L. k: the longest dot product, 4C in the MLP, or the B*T rows a weight gradient
// sums over. The loss, a mean of lse - logit, may be off by twice the logits' rms error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../core/test_util.h"
#include "core/ops.h"
#include "nn/gpt.h"
#include "nn/optim.h"
#include "nn_test_util.h"

namespace gpumix {
namespace {

using test::bf16_nmse;
using test::bf16_rtol;
using test::close_to_scale;
using test::model_close;
using test::random_tokens;
using test::tiny_config;

int forward_roundings(const GPTConfig& c) { return 11 * c.L + 3; }
int backward_roundings(const GPTConfig& c) { return 2 * forward_roundings(c) + 2 * c.L; }

// A model whose master weights are the seed's rounded to bf16, so that an f32 and a bf16
// model compute from the same values.
void round_master_to_bf16(GPT& model) {
  model.params().copy_from(model.params().to(DType::bf16).to(DType::f32));
  model.sync_compute_params();
}

GPTConfig small_config() {
  GPTConfig c = tiny_config();
  c.C = 16;
  c.NH = 2;
  c.V = 29;  // random_tokens' stride 40503 is a multiple of 23
  c.T = 9;
  return c;
}

TEST(GPTBf16, TheComputeCopyIsTheMasterRounded) {
  const GPTConfig c = tiny_config();
  GPT f32(c, Device::cpu(), 5), bf(c, Device::cpu(), 5, DType::bf16);
  EXPECT_EQ(bf.compute_dtype(), DType::bf16);
  EXPECT_EQ(bf.params().dtype(), DType::f32);
  EXPECT_EQ(bf.grads().dtype(), DType::f32);
  EXPECT_EQ(bf.compute_params().dtype(), DType::bf16);
  // The same master weights whatever the compute dtype, and the copy is them rounded once.
  EXPECT_TRUE(test::bitwise_equal("master", bf.params().to_vector(), f32.params().to_vector()));
  std::vector<float> rounded = f32.params().to_vector();
  for (float& x : rounded) x = (float)bf16(x);
  EXPECT_TRUE(test::bitwise_equal("compute copy", bf.compute_params().to_vector(), rounded));
  // Parameters compute in bf16 and collect fp32 gradients.
  EXPECT_EQ(bf.param(2).value().dtype(), DType::bf16);
  // In f32 the compute copy is the master: no second buffer.
  EXPECT_EQ(f32.compute_params().raw_data(), f32.params().raw_data());
  EXPECT_EQ(f32.param(2).value().raw_data(), f32.params().flat_slice(f32.layout()[2].offset, 1).raw_data());
}

TEST(GPTBf16, MemoryIsTheMasterTheGradientsAndTheCopy) {
  const GPTConfig c = tiny_config();
  const Device d32 = Device::cpu(420), d16 = Device::cpu(421);
  const int64_t base32 = allocator(d32).stats().in_use, base16 = allocator(d16).stats().in_use;
  GPT f32(c, d32, 1), bf(c, d16, 1, DType::bf16);
  const int64_t P = f32.num_params();
  EXPECT_EQ(allocator(d32).stats().in_use - base32, 2 * Allocator::block_size(4 * P));
  EXPECT_EQ(allocator(d16).stats().in_use - base16,
            2 * Allocator::block_size(4 * P) + Allocator::block_size(2 * P));
}

TEST(GPTBf16, BindUnitTakesComputeDtypeParametersAndFp32Gradients) {
  const GPTConfig c = tiny_config();
  GPT unbound(c, Device::cpu(), DType::bf16);
  const int64_t n = c.unit_params(1);
  EXPECT_THROW_WITH(unbound.bind_unit(1, Tensor::zeros({n}), Tensor::zeros({n})), Error,
                    "bind_unit 1", "parameters must be bf16 (the model's compute dtype), got f32");
  EXPECT_THROW_WITH(unbound.bind_unit(1, Tensor::zeros({n}, DType::bf16), Tensor::zeros({n}, DType::bf16)),
                    Error, "bind_unit 1", "gradients must be f32", "got bf16");
  EXPECT_THROW_WITH(unbound.bind_unit(1, Tensor::zeros({n - 1}, DType::bf16), Tensor()), Error,
                    "bind_unit 1", "the unit has", "got buffers of");
  unbound.bind_unit(1, Tensor::zeros({n}, DType::bf16), Tensor::zeros({n}));
  EXPECT_THROW_WITH(GPT(c, Device::cpu(), 1, DType::i32), Error, "GPT",
                    "must be f32 or bf16, got i32");
  // An f32 model takes f32 parameters.
  GPT unbound32(c, Device::cpu());
  EXPECT_THROW_WITH(unbound32.bind_unit(1, Tensor::zeros({n}, DType::bf16), Tensor()), Error,
                    "parameters must be f32", "got bf16");
}

// Logits, loss and every gradient of a bf16 model against an f32 model with the same weights.
TEST(GPTBf16, ForwardAndBackwardMatchF32WithinBf16Tolerance) {
  const GPTConfig c = small_config();
  const int64_t B = 3, T = c.T;
  GPT f32(c, Device::cpu(), 11), bf(c, Device::cpu(), 11, DType::bf16);
  round_master_to_bf16(f32);
  round_master_to_bf16(bf);
  const Tensor tokens = random_tokens(B, T, c.V, 12), targets = random_tokens(B, T, c.V, 13);
  const Tensor logits32 = f32.logits(tokens), logits16 = bf.logits(tokens);
  EXPECT_EQ(logits16.dtype(), DType::f32);  // inference logits are fp32 whatever the dtype
  const int64_t k = std::max<int64_t>(4 * c.C, B * T);
  const std::vector<float> ref_logits = logits32.to_vector();
  EXPECT_TRUE(model_close("logits", logits16.to_vector(), ref_logits, forward_roundings(c), 4 * c.C));

  const float scale = 1.0f / (float)(B * T);
  // One model's forward and backward at a time: backward replays the whole tape.
  Var l32 = f32.loss(tokens, targets, scale);
  backward(l32);
  Var l16 = bf.loss(tokens, targets, scale);
  backward(l16);
  EXPECT_EQ(l16.value().dtype(), DType::f32);  // losses are fp32
  double squares = 0;
  for (float x : ref_logits) squares += (double)x * x;
  const double logit_rms = std::sqrt(squares / (double)ref_logits.size());
  EXPECT_NEAR(l16.value().item(), l32.value().item(),
              2 * std::sqrt(bf16_nmse(forward_roundings(c), 4 * c.C)) * logit_rms);
  // Each parameter's gradient is judged at its own scale (its terms' size).
  const std::vector<float> g16 = bf.grads().to_vector(), g32 = f32.grads().to_vector();
  for (const ParamInfo& p : bf.layout()) {
    const auto from = (std::ptrdiff_t)p.offset, to = from + (std::ptrdiff_t)p.shape.numel();
    EXPECT_TRUE(model_close(p.name.c_str(), std::vector<float>(g16.begin() + from, g16.begin() + to),
                            std::vector<float>(g32.begin() + from, g32.begin() + to),
                            backward_roundings(c), k));
  }
}

TEST(GPTBf16, RecomputeAndMicroBatchesWorkUnchanged) {
  const GPTConfig c = small_config();
  const int64_t B = 4, T = c.T;
  GPT bf(c, Device::cpu(), 21, DType::bf16);
  const Tensor tokens = random_tokens(B, T, c.V, 22), targets = random_tokens(B, T, c.V, 23);
  const float scale = 1.0f / (float)(B * T);
  bf.zero_grad();
  backward(bf.loss(tokens, targets, scale));
  const std::vector<float> whole = bf.grads().to_vector();
  // Recompute runs the same bf16 ops again: the same gradients.
  bf.zero_grad();
  backward(bf.loss(tokens, targets, scale, /*recompute=*/true));
  EXPECT_TRUE(close_to_scale("recompute", bf.grads().to_vector(), whole, bf16_rtol(0, B * T)));
  // Micro-batches: each row's activations are the same bf16 numbers; only the fp32
  // accumulation of the parameter gradients runs in another order.
  bf.zero_grad();
  double loss = 0;
  for (int64_t r = 0; r < B; r += 3) {
    const int64_t end = std::min(B, r + 3);
    Var l = bf.loss(tokens.slice(r, end), targets.slice(r, end), scale);
    loss += l.value().item();
    backward(l);
  }
  EXPECT_TRUE(close_to_scale("micro-batches", bf.grads().to_vector(), whole, bf16_rtol(0, B * T)));
  NoGradGuard no_grad;
  const double full = bf.loss(tokens, targets, scale).value().item();
  EXPECT_NEAR(loss, full, bf16_rtol(0, B * T) * std::fabs(full));
}

TEST(GPTBf16, AdamWUpdatesTheMasterAndRewritesTheCopy) {
  const GPTConfig c = tiny_config();
  GPT f32(c, Device::cpu(), 31), bf(c, Device::cpu(), 31, DType::bf16);
  AdamWConfig cfg;
  AdamW opt32(f32.layout(), 0, f32.num_params(), Device::cpu(), cfg);
  AdamW opt16(bf.layout(), 0, bf.num_params(), Device::cpu(), cfg);
  // The same fp32 gradients for both: the optimizer sees no compute dtype.
  ops::uniform_(f32.grads(), 7, 0, -1.0f, 1.0f);
  bf.grads().copy_from(f32.grads());
  for (int step = 1; step <= 3; ++step) {
    opt32.step(f32.params(), f32.grads(), 1e-2f, step, f32.compute_params());
    opt16.step(bf.params(), bf.grads(), 1e-2f, step, bf.compute_params());
  }
  EXPECT_TRUE(close_to_scale("master", bf.params().to_vector(), f32.params().to_vector(),
                             bf16_rtol(0, 8)));
  std::vector<float> rounded = bf.params().to_vector();
  for (float& x : rounded) x = (float)bf16(x);
  EXPECT_TRUE(test::bitwise_equal("compute copy", bf.compute_params().to_vector(), rounded));
  // A slice of the flat layout (as a shard's optimizer runs it) rewrites only its copy.
  const auto [offset, count] = bf.unit_range(1);
  AdamW shard(bf.layout(), offset, count, Device::cpu(), cfg);
  const std::vector<float> copy_before = bf.compute_params().to_vector();
  Tensor master = bf.params().flat_slice(offset, count);
  shard.step(master, bf.grads().flat_slice(offset, count), 1e-2f, 1,
             bf.compute_params().flat_slice(offset, count));
  const std::vector<float> copy_after = bf.compute_params().to_vector(), now = bf.params().to_vector();
  for (int64_t i = 0; i < bf.num_params(); ++i) {
    const bool inside = i >= offset && i < offset + count;
    ASSERT_EQ(copy_after[i], inside ? (float)bf16(now[i]) : copy_before[i]) << "element " << i;
  }
  // An f32 copy other than the master is refused.
  Tensor other = Tensor::zeros({f32.num_params()});
  EXPECT_THROW_WITH(opt32.step(f32.params(), f32.grads(), 1e-2f, 4, other), Error, "AdamW::step",
                    "an f32 compute copy must be the master weights themselves");
}

}  // namespace
}  // namespace gpumix
