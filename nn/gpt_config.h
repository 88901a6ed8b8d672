// The shape of a GPT model, without any storage: what the planner, the memory model and
// the simulator reason about, and what nn::GPT is built from.
//
// Glossary: L layers, NH heads, C channels, V vocabulary, T context length (the longest
// sequence the position embedding holds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpumix {

struct GPTConfig {
  std::string name;  // preset name, or "custom"
  int L = 0;
  int NH = 0;
  int C = 0;
  int V = 0;
  int T = 0;

  // The vocabulary as the model computes it: V rounded up to a multiple of
  // vocab_pad_multiple (gpt2: 50257 -> 50304), so that the LM head's GEMMs and the
  // classifier run at full width (aligned leading dimensions, whole vectors). wte holds Vp
  // rows; rows V..Vp-1 are padding: zero, never trained, never looked up, never saved,
  // and the classifier keeps their logits out of the softmax (nn/gpt.h).
  static constexpr int vocab_pad_multiple = 128;
  int64_t Vp() const { return ((int64_t)V + vocab_pad_multiple - 1) / vocab_pad_multiple * vocab_pad_multiple; }

  // Parameters per sharding unit. Units are, in order: the embedding (wte, wpe), each
  // of the L blocks, and the head (final layernorm; the LM head is tied to wte).
  // The padding rows of wte count (they are in the flat buffers); saved_params() does not.
  int64_t embed_params() const;  // Vp*C + T*C
  int64_t block_params() const;  // 12*C*C + 13*C
  int64_t head_params() const;   // 2*C
  int64_t total_params() const;
  int64_t saved_params() const;  // total_params() without wte's padding: checkpoints, HF
  int num_units() const { return L + 2; }
  int64_t unit_params(int unit) const;  // 0 = embed, 1..L = blocks, L+1 = head

  // Forward FLOPs of one token through the whole model at sequence length t (matmuls
  // and attention, 2 FLOPs per multiply-add): the basis of MFU. The head counts V, not
  // Vp: the padding's FLOPs are not the model's.
  double forward_flops_per_token(int t) const;

  // Throws std::invalid_argument naming the field when a dimension is not positive or
  // C is not a multiple of NH.
  void validate() const;
};

// Presets, from gpt-nano (about 1M parameters) to gpt-6.7b. Throws std::invalid_argument
// listing the known names when `name` is not one.
GPTConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

// The model as JSON, as checkpoints, profiles and plans hold it: {"name", "L", "NH", "C",
// "V", "T"}. Reading also takes a preset's name ("gpt2"). A missing or wrong-typed field
// or an invalid shape throws std::invalid_argument naming `where` and the field.
nlohmann::json config_to_json(const GPTConfig& c);
GPTConfig config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace gpumix
