// Hugging Face GPT-2 folders in and out: what GPT2LMHeadModel.from_pretrained and
// GPT2Tokenizer.from_pretrained read, and what save_pretrained writes.
//
//   model.safetensors   the weights, named as GPT2LMHeadModel's state dict
//                       (transformer.wte.weight, transformer.h.N.attn.c_attn.weight, ...);
//                       the LM head is tied to wte, so lm_head.weight is not written
//   config.json         GPT2Config: n_layer, n_head, n_embd, n_positions, vocab_size, ...
//   vocab.json          the tokenizer (nn/data/bpe.h: Tokenizer::load_gpt2)
//   merges.txt
//
// GPUMix's model is GPT-2's (nn/gpt.h names its parameters after it), with two layout
// differences: a Linear weight is (out, in) here and GPT-2's Conv1D weight is (in, out),
// so the four matrices of each block are transposed on the way in and out; and GPT-2's
// fused c_attn splits its 3C outputs as [q | k | v], heads contiguous within each, as
// GPUMix's attention does, so no reordering is needed.
//
// Glossary: L layers, NH heads, C channels, V vocabulary, T context (n_positions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/data/bpe.h"
#include "nn/gpt_config.h"
#include "nn/safetensors/safetensors.h"

namespace gpumix::hf {

struct Gpt2Model {
  GPTConfig config;           // from config.json, checked against the tensors
  std::vector<float> params;  // (P) in GPUMix's flat layout (gpt_param_layout)
  data::Tokenizer tokenizer;  // from vocab.json + merges.txt; vocab_size() == config.V
};

// True when `dir` is a folder holding config.json: a Hugging Face model folder.
bool is_model_folder(const std::string& dir);

// The shape of the model in dir/config.json, without reading the weights. Fields GPUMix
// cannot honour (another activation, layer-norm epsilon, MLP width, attention scaling,
// cross-attention) are errors naming the field, its value and what GPUMix computes.
GPTConfig read_config(const std::string& dir);

// The whole folder. Accepts the tensor names with or without the "transformer." prefix
// (GPT2LMHeadModel's and GPT2Model's) in F32, BF16 or F16; ignores the attention-mask
// buffers of old checkpoints (h.N.attn.bias, h.N.attn.masked_bias) and an lm_head.weight
// equal to wte. A tensor missing, of the wrong shape (naming the config fields it
// contradicts), unknown, or an untied head is an error naming the file and the tensor.
Gpt2Model read_model(const std::string& dir);

// The weights of a folder, checked as read_model does when opened, read in parts: a rank
// of a sharded run reads only its own slices of the flat layout.
class Weights {
 public:
  Weights(const std::string& dir, const GPTConfig& config);
  // Elements [offset, offset + count) of the flat layout (gpt_param_layout) into `out`.
  void read(int64_t offset, int64_t count, float* out) const;

 private:
  GPTConfig config_;
  safetensors::Reader file_;
  std::string prefix_;  // "transformer." or "" (GPT2Model's names)
};

// Writes the folder `dir`, which must not exist or be empty: the weights (`params`, the
// flat fp32 layout of `config`) as `dtype` (F32, or BF16 rounded to nearest even), the
// config and the tokenizer. Everything goes to a temporary folder that is renamed to
// `dir` at the end, so on any error nothing is left at `dir`.
void write_model(const std::string& dir, const GPTConfig& config, const float* params,
                 const data::Tokenizer& tokenizer, safetensors::DType dtype);

// The Hugging Face name and shape of each GPUMix parameter, in layout order, and whether
// its values are transposed (Conv1D (in, out) against Linear (out, in)).
struct TensorName {
  std::string name;            // "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // Hugging Face's shape
  bool transposed;
};
std::vector<TensorName> tensor_names(const GPTConfig& config);

}  // namespace gpumix::hf
