// The Llama family's shape (nn/model_family.h), as Hugging Face's LlamaForCausalLM lays it
// out: a token embedding and no learned positions (rotary embeddings, rope_theta),
// pre-RMSNorm blocks without biases, grouped-query attention (KV key/value heads of
// C / NH channels each; q and o are C x C, k and v C x KV·C/NH), a SwiGLU MLP of width FF
// (gate, up: C -> FF; down: FF -> C), a final RMSNorm, and an output matrix of its own
// unless tied to the embedding. GPTConfig's 0 for KV, FF, rope_theta or norm_eps means the
// family's default (NH, Llama's 2/3·4C rounded up to 256, 10000, 1e-5); the model's JSON
// holds the resolved values.
//
// This is the shape alone: `gpumix plan` and `simulate` plan Llama models from it. The
// stages to compute with (nn/model_stages.h) are not written yet, so training, profiling,
// evaluation and generation refuse a Llama model by name (model_stages()).
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "nn/model_family.h"

namespace gpumix {

namespace {

int kv_heads(const GPTConfig& c) { return c.KV > 0 ? c.KV : c.NH; }
// Llama's rule for the MLP's width (Touvron et al. 2023): 2/3 of GPT's 4C, rounded up to a
// multiple of 256. It gives every preset's: 1536 at C 576, 5632 at 2048, 11008 at 4096.
int mlp_width(const GPTConfig& c) {
  if (c.FF > 0) return c.FF;
  const int64_t ff = (8 * (int64_t)c.C + 2) / 3;
  return (int)((ff + 255) / 256 * 256);
}
double rope_theta(const GPTConfig& c) { return c.rope_theta > 0 ? c.rope_theta : 10000.0; }
double norm_eps(const GPTConfig& c) { return c.norm_eps > 0 ? c.norm_eps : 1e-5; }
int64_t kv_channels(const GPTConfig& c) { return (int64_t)kv_heads(c) * (c.C / c.NH); }

class LlamaFamily final : public ModelFamily {
 public:
  const char* name() const override { return "llama"; }

  std::vector<GPTConfig> presets() const override {
    auto preset = [](const char* name, int L, int NH, int KV, int C, int FF, int V, int T, double theta,
                     double eps, bool tied) {
      GPTConfig c{name, L, NH, C, V, T};
      c.family = "llama";
      c.KV = KV;
      c.FF = FF;
      c.rope_theta = theta;
      c.norm_eps = eps;
      c.tied = tied;
      return c;
    };
    return {
        // Seconds on a CPU (tests, the README): gpt-nano's size, with GQA and an untied head.
        preset("llama-nano", 4, 4, 2, 128, 384, 4096, 128, 10000, 1e-5, false),
        // HuggingFaceTB/SmolLM2-135M, TinyLlama/TinyLlama-1.1B, and LLaMA 7B (Touvron et al.
        // 2023; Cephalo's LLaMA-7B; Llama 2 7B has the same blocks at T 4096).
        preset("smollm2-135m", 30, 9, 3, 576, 1536, 49152, 8192, 100000, 1e-5, true),
        preset("tinyllama-1.1b", 22, 32, 4, 2048, 5632, 32000, 2048, 10000, 1e-5, false),
        preset("llama-7b", 32, 32, 32, 4096, 11008, 32000, 2048, 10000, 1e-6, false),
    };
  }

  void validate(const GPTConfig& c) const override {
    const std::string where = "model " + c.name + ": ";
    const int kv = kv_heads(c);
    if (c.KV < 0 || c.NH % kv != 0)
      throw std::invalid_argument(where + "KV (key/value heads) = " + std::to_string(c.KV) +
                                  " must divide NH (heads) = " + std::to_string(c.NH) +
                                  " (grouped-query attention: each key/value head serves NH / KV query heads)");
    if ((c.C / c.NH) % 2 != 0)
      throw std::invalid_argument(where + "the head size C / NH = " + std::to_string(c.C / c.NH) +
                                  " must be even (rotary embeddings turn pairs of channels)");
    if (c.FF < 0) throw std::invalid_argument(where + "FF (MLP width) must be positive, got " + std::to_string(c.FF));
    if (c.rope_theta < 0 || !std::isfinite(c.rope_theta))
      throw std::invalid_argument(where + "rope_theta must be a positive number, got " + std::to_string(c.rope_theta));
    if (c.norm_eps < 0 || !std::isfinite(c.norm_eps) || c.norm_eps >= 1)
      throw std::invalid_argument(where + "norm_eps must be in (0, 1), got " + std::to_string(c.norm_eps));
  }

  void fields_to_json(const GPTConfig& c, nlohmann::json& j) const override {
    j["KV"] = kv_heads(c);
    j["FF"] = mlp_width(c);
    j["rope_theta"] = rope_theta(c);
    j["norm_eps"] = norm_eps(c);
    j["tied"] = c.tied;
  }
  void fields_from_json(const nlohmann::json& j, const std::string& where, GPTConfig& c) const override {
    auto field = [&](const char* key, auto& out, auto check) {
      const auto v = j.find(key);
      if (v == j.end()) return;  // the family's default
      if (!check(*v)) throw std::invalid_argument(where + "." + key + ": wrong type, got " + v->dump());
      out = v->get<std::remove_reference_t<decltype(out)>>();
    };
    field("KV", c.KV, [](const nlohmann::json& v) { return v.is_number_integer() && v >= 1 && v <= (1 << 20); });
    field("FF", c.FF, [](const nlohmann::json& v) { return v.is_number_integer() && v >= 1 && v <= (1 << 30); });
    field("rope_theta", c.rope_theta, [](const nlohmann::json& v) { return v.is_number() && v > 0; });
    field("norm_eps", c.norm_eps, [](const nlohmann::json& v) { return v.is_number() && v > 0; });
    field("tied", c.tied, [](const nlohmann::json& v) { return v.is_boolean(); });
  }

  int64_t embed_params(const GPTConfig& c) const override { return c.Vp() * c.C; }
  // Two RMSNorm weights, q and o (C x C), k and v (C x KV·C/NH), gate, up and down (C x FF).
  int64_t block_params(const GPTConfig& c) const override {
    const int64_t C = c.C;
    return 2 * C + 2 * C * C + 2 * C * kv_channels(c) + 3 * C * mlp_width(c);
  }
  // The final RMSNorm, and the output matrix (Vp rows, as the embedding) when untied.
  int64_t head_params(const GPTConfig& c) const override { return c.C + (c.tied ? 0 : c.Vp() * c.C); }
  bool head_reads_embedding(const GPTConfig& c) const override { return c.tied; }

  // Per block: the projections 2·(2C² + 2·C·KVC + 3·C·FF) (2 per multiply-add), and the
  // attention scores + weighted sum over all NH query heads, 2 · 2 · t_avg · C with
  // t_avg = (t+1)/2 under the mask (grouped keys and values change the bytes, not the
  // FLOPs). The norms, rotations and the SwiGLU product are O(C) and left out, as GPT-2's
  // LayerNorm and GELU are.
  double block_forward_flops_per_token(const GPTConfig& g, int t) const override {
    const double c = g.C;
    return 2.0 * (2.0 * c * c + 2.0 * c * kv_channels(g) + 3.0 * c * mlp_width(g)) + 2.0 * (t + 1) * c;
  }
  double head_forward_flops_per_token(const GPTConfig& g) const override { return 2.0 * g.C * g.V; }

  // The saved activations of a block per token, counted as for GPT-2 (Korthikanti et al.
  // 2022's attention term 5·NH·T kept alike): the input, both norms' outputs, q, k and v
  // before and after the rotation (q and k), the attention's output, the residual between
  // the halves, gate and up and their SwiGLU product, 7C + 3·KVC + 3·FF values of
  // `dtype_bytes`; half again for the backward's gradient temporaries.
  double block_activation_bytes(const GPTConfig& g, int seq_len, int64_t m, int dtype_bytes) const override {
    const double values = 7.0 * g.C + 3.0 * (double)kv_channels(g) + 3.0 * mlp_width(g);
    const double per_token = values * dtype_bytes + 5.0 * g.NH * seq_len * dtype_bytes / 2.0;
    return 1.5 * (double)m * seq_len * per_token;
  }
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family;
  return family;
}

}  // namespace gpumix
