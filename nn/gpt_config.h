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

  // Parameters per sharding unit. Units are, in order: the embedding (wte, wpe), each
  // of the L blocks, and the head (final layernorm; the LM head is tied to wte).
  int64_t embed_params() const;  // V*C + T*C
  int64_t block_params() const;  // 12*C*C + 13*C
  int64_t head_params() const;   // 2*C
  int64_t total_params() const;
  int num_units() const { return L + 2; }
  int64_t unit_params(int unit) const;  // 0 = embed, 1..L = blocks, L+1 = head

  // Forward FLOPs of one token through the whole model at sequence length t (matmuls
  // and attention, 2 FLOPs per multiply-add): the basis of MFU.
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
