// GPT: a decoder of any model family (nn/model_family.h, nn/model_stages.h; the name is
// historical: GPT-2 was the first family) on the autograd tape: it holds the parameters and
// runs the family's stages on them.
//
// Glossary: B batch, T sequence, C channels, L layers, NH heads, V vocabulary.
//
// All parameters live in ONE flat fp32 buffer (P elements, the master weights) in a stable
// order (the family's param_layout); the gradients in another (fp32). The order defines the
// flat layout that dist/ shards: units are the embedding, then each block, then the head.
//
// The padded vocabulary (GPTConfig::Vp): the vocabulary's matrices (GPT-2's wte) are
// (Vp, C) in the flat buffers, so that the head computes (N, Vp) logits at full width
// (ParamInfo::used marks the V rows). Rows V..Vp-1 are zero from the start and
// stay zero: no token looks them up (the embedding sees the first V rows, param_used), the
// classifier gives their logits no probability and so no gradient, and AdamW leaves a
// zero weight with zero gradients at zero. Checkpoints and Hugging Face files hold the V
// rows only (gpt_saved_runs maps the two layouts); inference computes V logits.
//
// Precision (core/precision.h): a model computes in one compute dtype, f32 or bf16. In
// bf16 it also keeps a flat bf16 compute copy of the master weights (same layout), which
// the stages compute with: activations and their gradients are bf16, the parameter
// gradients accumulate in fp32 straight from the kernels, and the optimizer updates the
// master weights and rewrites the copy in the same pass (AdamW::step). In f32 the compute
// copy IS the master buffer: no extra memory, no extra pass. Losses are fp32.
//
// GPT exposes its stages (embed, block l, head + loss) so that an engine can run the model
// layer by layer; forward() chains them for a single device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"
#include "nn/gpt_config.h"

namespace gpumix {

class ModelStages;

struct ParamInfo {
  std::string name;   // "wte", "h.3.attn.qkv.weight", "ln_f.bias"
  Shape shape;
  int64_t offset;     // into the flat buffer
  int unit;           // 0 = embedding, 1..L = blocks, L+1 = head
  bool decay;         // weight decay applies (matrices and embeddings, not biases or norms)
  float init_std;     // 0 for zeros; LayerNorm weights are ones
  int64_t used;       // its first `used` elements are the model's, the rest padding (wte: V*C)
};

// The parameter layout of a config, without allocating anything.
std::vector<ParamInfo> gpt_param_layout(const GPTConfig& config);

// A run of elements that files hold: flat elements [flat, flat + count) are elements
// [saved, saved + count) of the saved layout (the flat one without the padding,
// GPTConfig::saved_params() elements, as checkpoints and Hugging Face files hold it).
struct SavedRun {
  int64_t flat, saved, count;
};
// The runs of flat elements [offset, offset + count) that are saved, in order (padding
// elements are in none).
std::vector<SavedRun> gpt_saved_runs(const std::vector<ParamInfo>& layout, int64_t offset, int64_t count);

class GPT {
 public:
  // Allocates the flat master weights, their compute copy (bf16 only) and the gradients on
  // `device` and initialises the weights as GPT-2 does: N(0, 0.02), residual projections
  // N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm 1/0. Every parameter's numbers depend only
  // on (seed, its name), never on the layout. `compute` is f32 or bf16.
  GPT(const GPTConfig& config, Device device, uint64_t seed, DType compute = DType::f32);

  // A model with no storage of its own: every unit must be bound (bind_unit) to buffers
  // before it runs. This is how a sharded engine runs a unit on its gathered parameters.
  GPT(const GPTConfig& config, Device device, DType compute = DType::f32);

  // Points unit u's parameters at `params` (unit_params(u) elements in the compute dtype:
  // the unit's slice of a compute copy, e.g. gathered) and their gradients at `grads` (the
  // same count in fp32, into which backward accumulates; or undefined for no gradient: the
  // unit's parameters then do not require one). Other sizes or dtypes are an error.
  void bind_unit(int unit, const Tensor& params, const Tensor& grads);
  // Drops the unit's references to its buffers, so that gathered ones can be freed; the
  // unit must be bound again before it runs.
  void unbind_unit(int unit);

  // Writes the initial values of flat elements [offset, offset + out.numel()) into `out`:
  // the same numbers, element for element, as the whole-model initialisation, so any
  // shard can initialise itself without the rest.
  static void init_slice(const std::vector<ParamInfo>& layout, uint64_t seed, int64_t offset,
                         Tensor& out);

  const GPTConfig& config() const { return config_; }
  Device device() const { return device_; }
  DType compute_dtype() const { return compute_dtype_; }
  const std::vector<ParamInfo>& layout() const { return layout_; }
  Tensor& params() { return params_; }                  // (P) fp32 master weights
  Tensor& compute_params() { return compute_params_; }  // (P) compute dtype; f32: params()
  Tensor& grads() { return grads_; }                    // (P) fp32
  // Rewrites the compute copy from the master weights, after these were written directly
  // (loaded from a checkpoint, copied in by a test). Nothing to do in f32.
  void sync_compute_params();
  const Var& param(int i) const { return vars_[i]; }
  // Parameter i's first ParamInfo::used elements as (used / columns, columns): a padded
  // vocabulary matrix's V rows, value and gradient (the parameter itself when unpadded).
  const Var& param_used(int i) const;
  // The parameter of `unit` whose name ends in `suffix` (the family's stages find theirs so).
  const Var& param_named(int unit, const char* suffix) const;
  int64_t num_params() const { return params_.numel(); }
  // [offset, offset + count) of unit u in the flat buffer.
  std::pair<int64_t, int64_t> unit_range(int unit) const;

  void zero_grad() { grads_.zero_(); }

  // Stages (the family's, nn/model_stages.h). tokens i32 (B, T) -> (B, T, C); block l
  // (0-based) (B, T, C) -> (B, T, C);
  // head (B, T, C) -> logits (B, T, Vp), the padding's columns included; head_loss: the
  // head and the fused classifier (autograd/functions.h classifier_loss), whose gradient
  // is computed in its forward, in place of the logits.
  Var embed(const Tensor& tokens) const;
  Var block(int l, const Var& x) const;
  Var head(const Var& x) const;
  Var head_loss(const Var& x, const Tensor& targets, float scale) const;

  // scale * sum of per-token cross-entropy losses over the batch (targets -1 ignored).
  // With recompute, each block's activations are recomputed during backward.
  Var loss(const Tensor& tokens, const Tensor& targets, float scale, bool recompute = false) const;

  // Logits for inference (no tape): (B, T, V), the model's V only, fp32 whatever the
  // compute dtype.
  Tensor logits(const Tensor& tokens) const;

 private:

  GPTConfig config_;
  Device device_;
  DType compute_dtype_;
  std::vector<ParamInfo> layout_;
  const ModelStages* stages_;
  Tensor params_, compute_params_, grads_;
  std::vector<Var> vars_;
  std::vector<Var> used_vars_;  // per parameter: its used rows where padded (param_used)
  std::vector<int> unit_first_;  // index in layout_ of each unit's first parameter
};

}  // namespace gpumix
