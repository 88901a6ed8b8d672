// The shape of a model, without any storage: what the planner, the memory model and the
// simulator reason about, and what nn::GPT is built from. `family` names the model family
// (nn/model_family.h) that gives the shape its meaning: its unit sizes, costs and stages.
//
// Glossary: L layers, NH heads, C channels, V vocabulary, T context length (the longest
// sequence the model takes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpumix {

class ModelFamily;

struct GPTConfig {
  std::string name;  // preset name, or "custom"
  int L = 0;
  int NH = 0;
  int C = 0;
  int V = 0;
  int T = 0;
  // The model family ("gpt2", the default, is every model without one: old checkpoints,
  // plans and profiles). The fields below are the families' own; a family that has no use
  // for one leaves it at its default (and its JSON leaves it out).
  std::string family = "gpt2";
  int KV = 0;               // key/value heads (grouped-query attention): 0 means NH
  int FF = 0;               // the MLP's width (0: the family's default)
  double rope_theta = 0;    // rotary embeddings' base (0: none)
  double norm_eps = 0;      // the norms' epsilon (0: the family's default)
  bool tied = true;         // the head's output matrix is the token embedding

  const ModelFamily& family_info() const;  // throws std::invalid_argument for an unknown family

  // The vocabulary as the model computes it: V rounded up to a multiple of
  // vocab_pad_multiple (gpt2: 50257 -> 50304), so that the LM head's GEMMs and the
  // classifier run at full width (aligned leading dimensions, whole vectors). wte holds Vp
  // rows; rows V..Vp-1 are padding: zero, never trained, never looked up, never saved,
  // and the classifier keeps their logits out of the softmax (nn/gpt.h).
  static constexpr int vocab_pad_multiple = 128;
  int64_t Vp() const { return ((int64_t)V + vocab_pad_multiple - 1) / vocab_pad_multiple * vocab_pad_multiple; }

  // Parameters per sharding unit, as the family counts them. Units are, in order: the
  // embedding, each of the L blocks, and the head (its final norm, and its output matrix
  // unless tied to the embedding). The vocabulary's padding rows count (they are in the
  // flat buffers); saved_params() does not.
  int64_t embed_params() const;
  int64_t block_params() const;
  int64_t head_params() const;
  int64_t total_params() const;
  int64_t saved_params() const;  // total_params() without the padding rows: checkpoints, HF
  int num_units() const { return L + 2; }
  int64_t unit_params(int unit) const;  // 0 = embed, 1..L = blocks, L+1 = head

  // Forward FLOPs of one token through the whole model at sequence length t (matmuls
  // and attention, 2 FLOPs per multiply-add): the basis of MFU. The head counts V, not
  // Vp: the padding's FLOPs are not the model's.
  double forward_flops_per_token(int t) const;
  double block_forward_flops_per_token(int t) const;  // one block's share of it
  double head_forward_flops_per_token() const;        // the head's share of it
  // Analytic peak bytes of one block's recompute + backward at micro-batch m.
  double block_activation_bytes(int seq_len, int64_t m, int dtype_bytes) const;
  // True when the head computes with the embedding's parameters (tied).
  bool head_reads_embedding() const;

  // Throws std::invalid_argument naming the field when a dimension is not positive, C is
  // not a multiple of NH, the family is unknown or its own fields are invalid.
  void validate() const;
};

// Every family's presets (GPT-2's from gpt-nano, about 1M parameters, to gpt-6.7b). Throws
// std::invalid_argument listing the known names when `name` is not one.
GPTConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

// The model as JSON, as checkpoints, profiles and plans hold it: {"name", "L", "NH", "C",
// "V", "T"}, and for a family other than GPT-2 "family" and the family's own fields (so a
// GPT-2 model's JSON is what it was before families: old files read as GPT-2). Reading
// also takes a preset's name ("gpt2"). A missing or wrong-typed field or an invalid shape
// throws std::invalid_argument naming `where` and the field.
nlohmann::json config_to_json(const GPTConfig& c);
GPTConfig config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace gpumix
