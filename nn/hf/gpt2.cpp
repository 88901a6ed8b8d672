#include "nn/hf/gpt2.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "nn/data/file_util.h"
#include "nn/gpt.h"

namespace gpumix::hf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* config_file = "config.json";
constexpr const char* weights_file = "model.safetensors";
constexpr const char* vocab_file = "vocab.json";
constexpr const char* merges_file = "merges.txt";
constexpr const char* prefix = "transformer.";
// What GPUMix's kernels compute (kernels/cpu/layernorm.cpp, kernels/cuda/layernorm.cu).
constexpr double layernorm_eps = 1e-5;
// GPT-2's tanh approximation of GELU under the names transformers gives it.
const std::set<std::string> tanh_gelu_names = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

std::string in(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

std::runtime_error missing_file(const std::string& dir, const char* file) {
  return std::runtime_error("'" + dir + "' has no " + file + ": a Hugging Face GPT-2 folder holds config.json, "
                            "model.safetensors, vocab.json and merges.txt (what save_pretrained writes, or "
                            "`gpumix export`)");
}

// (out, in) row-major <-> (in, out) row-major: dst[c * rows + r] = src[r * cols + c].
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// Which config.json fields set a tensor's shape, for errors.
std::string fields_of(const TensorName& t, const GPTConfig& c) {
  const std::string embd = "n_embd = " + std::to_string(c.C);
  if (t.name == "transformer.wte.weight") return "vocab_size = " + std::to_string(c.V) + " and " + embd;
  if (t.name == "transformer.wpe.weight") return "n_positions = " + std::to_string(c.T) + " and " + embd;
  return embd;
}

// This file maps GPT-2's family (nn/gpt2_family.cpp) to GPT2LMHeadModel; another family's
// model has other tensors.
void require_gpt2_family(const GPTConfig& config) {
  if (config.family != "gpt2")
    throw std::invalid_argument("Hugging Face folders of model family '" + config.family +
                                "' are not supported; GPUMix reads and writes GPT-2 (GPT2LMHeadModel) folders");
}

}  // namespace

std::vector<TensorName> tensor_names(const GPTConfig& config) {
  require_gpt2_family(config);
  std::vector<TensorName> names;
  for (const ParamInfo& p : gpt_param_layout(config)) {
    const bool embedding = p.name == "wte" || p.name == "wpe";
    std::vector<int64_t> shape(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.ndim);
    shape[0] = p.used / (p.shape.numel() / shape[0]);  // wte: V rows, without the padding
    const bool transposed = !embedding && shape.size() == 2;
    if (transposed) std::swap(shape[0], shape[1]);
    names.push_back({prefix + p.name + (embedding ? ".weight" : ""), shape, transposed});
  }
  return names;
}

bool is_model_folder(const std::string& dir) { return fs::is_directory(dir) && fs::is_regular_file(in(dir, config_file)); }

GPTConfig read_config(const std::string& dir) {
  const std::string path = in(dir, config_file);
  if (!fs::is_regular_file(path)) throw missing_file(dir, config_file);
  json j;
  try {
    j = json::parse(data::read_file(path));
  } catch (const json::exception& e) {
    throw std::runtime_error("config file '" + path + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error("config file '" + path + "' is not a JSON object");
  const auto fail = [&](const std::string& field, const std::string& problem) {
    return std::runtime_error("config file '" + path + "': field '" + field + "' " + problem);
  };
  const auto has = [&](const char* field) { return j.contains(field) && !j[field].is_null(); };
  if (has("model_type") && j["model_type"] != "gpt2")
    throw fail("model_type", "is " + j["model_type"].dump() + ", but GPUMix imports GPT-2 models (model_type \"gpt2\")");
  const auto positive = [&](const char* field) {
    if (!has(field)) throw fail(field, "is missing (GPT2Config needs n_layer, n_head, n_embd, n_positions, vocab_size)");
    const json& v = j[field];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > INT32_MAX)
      throw fail(field, "must be a positive integer, got " + v.dump());
    return (int)v.get<int64_t>();
  };
  GPTConfig c;
  c.name = "hf-gpt2";
  c.L = positive("n_layer");
  c.NH = positive("n_head");
  c.C = positive("n_embd");
  c.V = positive("vocab_size");
  c.T = positive("n_positions");
  if (c.C % c.NH != 0)
    throw fail("n_head", "(" + std::to_string(c.NH) + ") does not divide n_embd (" + std::to_string(c.C) + ")");
  if (has("activation_function") &&
      !(j["activation_function"].is_string() && tanh_gelu_names.count(j["activation_function"].get<std::string>())))
    throw fail("activation_function", "is " + j["activation_function"].dump() +
                                          ", but GPUMix computes GPT-2's tanh GELU (\"gelu_new\")");
  if (has("layer_norm_epsilon") && !(j["layer_norm_epsilon"].is_number() &&
                                     std::fabs(j["layer_norm_epsilon"].get<double>() - layernorm_eps) <= 1e-6 * layernorm_eps))
    throw fail("layer_norm_epsilon", "is " + j["layer_norm_epsilon"].dump() + ", but GPUMix's LayerNorm uses 1e-05");
  if (has("n_inner") && j["n_inner"] != 4 * c.C)
    throw fail("n_inner", "is " + j["n_inner"].dump() + ", but GPUMix's MLP is 4 * n_embd = " + std::to_string(4 * c.C) + " wide");
  const auto flag_must_be = [&](const char* field, bool want, const char* why) {
    if (has(field) && j[field] != want) throw fail(field, "is " + j[field].dump() + ", but " + why);
  };
  flag_must_be("scale_attn_weights", true, "GPUMix scales attention scores by 1/sqrt(head size)");
  flag_must_be("scale_attn_by_inverse_layer_idx", false, "GPUMix does not scale attention by the layer index");
  flag_must_be("add_cross_attention", false, "GPUMix's blocks have no cross-attention");
  try {
    c.validate();
  } catch (const std::exception& e) {
    throw std::runtime_error("config file '" + path + "': " + e.what());
  }
  return c;
}

Gpt2Model read_model(const std::string& dir) {
  Gpt2Model m;
  m.config = read_config(dir);
  const GPTConfig& c = m.config;
  for (const char* file : {vocab_file, merges_file, weights_file})
    if (!fs::is_regular_file(in(dir, file))) throw missing_file(dir, file);
  m.tokenizer = data::Tokenizer::load_gpt2(in(dir, vocab_file), in(dir, merges_file));
  if (m.tokenizer.vocab_size() != c.V)
    throw std::runtime_error("config file '" + in(dir, config_file) + "': field 'vocab_size' is " + std::to_string(c.V) +
                             " but vocab.json and merges.txt make " + std::to_string(m.tokenizer.vocab_size()) +
                             " tokens (256 bytes + " + std::to_string(m.tokenizer.num_merges()) +
                             " merges + <|endoftext|>); GPUMix needs them equal");
  m.params.resize((size_t)c.total_params());
  Weights(dir, c).read(0, c.total_params(), m.params.data());
  return m;
}

namespace {

std::string existing_weights(const std::string& dir) {
  if (!fs::is_regular_file(in(dir, weights_file))) throw missing_file(dir, weights_file);
  return in(dir, weights_file);
}

}  // namespace

Weights::Weights(const std::string& dir, const GPTConfig& config) : config_(config), file_(existing_weights(dir)) {
  const GPTConfig& c = config_;
  const safetensors::Reader& st = file_;
  const auto fail = [&](const std::string& problem) {
    return std::runtime_error("weights file '" + st.path() + "': " + problem);
  };
  // GPT2LMHeadModel's names, or GPT2Model's (no "transformer." prefix: the original gpt2).
  if (st.find("transformer.wte.weight"))
    prefix_ = prefix;
  else if (!st.find("wte.weight"))
    throw fail("has neither 'transformer.wte.weight' nor 'wte.weight': not a GPT-2 model (" +
               std::to_string(st.tensors().size()) + " tensors" +
               (st.tensors().empty() ? std::string() : ", the first '" + st.tensors()[0].name + "'") + ")");
  std::set<std::string> used;
  for (const TensorName& t : tensor_names(c)) {
    const std::string name = prefix_ + t.name.substr(std::strlen(prefix));
    const safetensors::TensorInfo* info = st.find(name);
    if (!info)
      throw fail("has no tensor '" + name + "' (config.json: n_layer = " + std::to_string(c.L) +
                 ", so blocks h.0 .. h." + std::to_string(c.L - 1) + ")");
    if (info->shape != t.shape)
      throw fail("tensor '" + name + "' has shape " + safetensors::shape_str(info->shape) + " but config.json's " +
                 fields_of(t, c) + " make it " + safetensors::shape_str(t.shape));
    if (!safetensors::converts_to_f32(info->dtype))
      throw fail("tensor '" + name + "' is " + safetensors::dtype_name(info->dtype) + "; weights must be F32, BF16 or F16");
    used.insert(name);
  }
  // What else the file may hold: mask buffers, and a head tied to wte.
  for (const safetensors::TensorInfo& t : st.tensors()) {
    if (used.count(t.name)) continue;
    const std::string rest = t.name.rfind(prefix_, 0) == 0 ? t.name.substr(prefix_.size()) : t.name;
    int block = -1;
    char tail[32] = {};
    if (std::sscanf(rest.c_str(), "h.%d.%31s", &block, tail) == 2) {
      if (!std::strcmp(tail, "attn.bias") || !std::strcmp(tail, "attn.masked_bias")) continue;  // causal masks
      if (block >= c.L)
        throw fail("holds block " + std::to_string(block) + " ('" + t.name + "') but config.json's n_layer is " +
                   std::to_string(c.L));
    }
    if (t.name == "lm_head.weight") {
      const std::vector<int64_t> vc = {c.V, c.C};
      if (t.shape != vc)
        throw fail("tensor 'lm_head.weight' has shape " + safetensors::shape_str(t.shape) + ", not the " +
                   safetensors::shape_str(vc) + " of the embedding");
      std::vector<float> head((size_t)t.numel()), wte((size_t)t.numel());
      st.read_f32(t, head.data());
      st.read_f32(*st.find(prefix_ + "wte.weight"), wte.data());
      if (head != wte)
        throw fail("tensor 'lm_head.weight' differs from the token embedding: an untied LM head, which GPUMix's "
                   "model (its head is tied to wte) cannot hold");
      continue;
    }
    throw fail("tensor '" + t.name + "' is not a weight of GPT2LMHeadModel; GPUMix would lose it");
  }
}

void Weights::read(int64_t offset, int64_t count, float* out) const {
  const std::vector<ParamInfo> layout = gpt_param_layout(config_);
  const std::vector<TensorName> names = tensor_names(config_);
  GPUMIX_CHECK(offset >= 0 && count >= 0 && offset + count <= config_.total_params(), "Weights::read: [", offset,
               ", ", offset + count, ") is outside the ", config_.total_params(), " parameters");
  std::vector<float> whole;
  for (size_t i = 0; i < names.size(); ++i) {
    // The padding (wte's rows V..Vp-1) is in no file: zeros.
    const int64_t pad_begin = std::max(offset, layout[i].offset + layout[i].used);
    const int64_t pad_end = std::min(offset + count, layout[i].offset + layout[i].shape.numel());
    if (pad_begin < pad_end) std::fill(out + (pad_begin - offset), out + (pad_end - offset), 0.0f);
    const int64_t begin = std::max(offset, layout[i].offset);
    const int64_t end = std::min(offset + count, layout[i].offset + layout[i].used);
    if (begin >= end) continue;
    const TensorName& t = names[i];
    const safetensors::TensorInfo& info = *file_.find(prefix_ + t.name.substr(std::strlen(prefix)));
    float* dst = out + (begin - offset);
    const bool all = begin == layout[i].offset && end - begin == layout[i].used;
    if (all && !t.transposed) {
      file_.read_f32(info, dst);
      continue;
    }
    // A part, or a transposed matrix: the whole tensor once, in GPUMix's orientation.
    whole.resize((size_t)info.numel());
    file_.read_f32(info, whole.data());
    if (t.transposed) {
      std::vector<float> ours(whole.size());
      transpose(whole.data(), t.shape[0], t.shape[1], ours.data());
      whole.swap(ours);
    }
    std::copy(whole.begin() + (begin - layout[i].offset), whole.begin() + (end - layout[i].offset), dst);
  }
}

void write_model(const std::string& dir, const GPTConfig& config, const float* params,
                 const data::Tokenizer& tokenizer, safetensors::DType dtype) {
  require_gpt2_family(config);
  if (tokenizer.vocab_size() != config.V)
    throw std::invalid_argument("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                " tokens but the model's vocabulary is " + std::to_string(config.V));
  if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
    throw std::runtime_error("'" + dir + "' exists and is not empty; pass a new folder to write the model to "
                             "(nothing was written)");
  const std::vector<ParamInfo> layout = gpt_param_layout(config);
  const std::vector<TensorName> names = tensor_names(config);
  std::vector<safetensors::TensorSource> sources;
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorName t = names[i];
    const float* src = params + layout[i].offset;
    const int64_t n = layout[i].used;  // wte: its V rows
    sources.push_back({t.name, t.shape, [t, src, n](float* out) {
                         if (t.transposed)
                           transpose(src, t.shape[1], t.shape[0], out);  // GPUMix's (out, in) -> (in, out)
                         else
                           std::memcpy(out, src, (size_t)n * sizeof(float));
                       }});
  }
  nlohmann::ordered_json cfg = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_layer", config.L},
      {"n_head", config.NH},
      {"n_embd", config.C},
      {"n_positions", config.T},
      {"n_ctx", config.T},
      {"n_inner", nullptr},
      {"vocab_size", config.V},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", layernorm_eps},
      // GPUMix trains without dropout.
      {"attn_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"resid_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"bos_token_id", tokenizer.eot_id()},
      {"eos_token_id", tokenizer.eot_id()},
      {"torch_dtype", dtype == safetensors::DType::BF16 ? "bfloat16" : "float32"},
      {"use_cache", true},
  };
  const std::string tmp = dir + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    safetensors::write(in(tmp, weights_file), sources, dtype, {{"format", "pt"}});  // from_pretrained checks "format"
    data::write_file_atomic(in(tmp, config_file), cfg.dump(2) + "\n");
    tokenizer.save_gpt2(in(tmp, vocab_file), in(tmp, merges_file));
    if (fs::exists(dir)) fs::remove(dir);  // empty
    fs::rename(tmp, dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace gpumix::hf
