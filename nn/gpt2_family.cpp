// GPT-2's shape (nn/model_family.h): learned token and position embeddings (wte, wpe),
// pre-LayerNorm blocks with biases, a fused qkv projection, a 4C GELU MLP, the LM head tied
// to wte. Its stages: nn/gpt2_stages.cpp.
#include <stdexcept>

#include "nn/model_family.h"

namespace gpumix {

namespace {

class Gpt2Family final : public ModelFamily {
 public:
  const char* name() const override { return "gpt2"; }

  // name, L, NH, C, V, T. Small presets use a small vocabulary (a BPE trained on the
  // corpus); GPT-2 shapes use GPT-2's 50257; the billion-parameter shapes are GPT-3's
  // (XL, 2.7B, 6.7B) at T = 2048.
  std::vector<GPTConfig> presets() const override {
    return {
        {"gpt-nano", 4, 4, 128, 4096, 128},
        {"gpt-micro", 4, 4, 192, 8192, 256},
        {"gpt-mini", 6, 6, 384, 8192, 256},
        {"gpt2", 12, 12, 768, 50257, 1024},
        {"gpt2-medium", 24, 16, 1024, 50257, 1024},
        {"gpt2-large", 36, 20, 1280, 50257, 1024},
        {"gpt2-xl", 48, 25, 1600, 50257, 1024},
        {"gpt-1.3b", 24, 32, 2048, 50257, 2048},
        {"gpt-2.7b", 32, 32, 2560, 50257, 2048},
        {"gpt-6.7b", 32, 32, 4096, 50257, 2048},
    };
  }

  // GPT-2 has none of the other families' fields: a value set is a mistake, named.
  void validate(const GPTConfig& c) const override {
    const GPTConfig d;
    auto unused = [&](const char* field, bool set) {
      if (set)
        throw std::invalid_argument("model " + c.name + ": " + field +
                                    " is not a GPT-2 setting (GPT-2 has NH key/value heads, a 4C MLP, "
                                    "learned positions, LayerNorm eps 1e-5 and a tied head)");
    };
    unused("KV (key/value heads)", c.KV != d.KV && c.KV != c.NH);
    unused("FF (MLP width)", c.FF != d.FF && c.FF != 4 * c.C);
    unused("rope_theta", c.rope_theta != d.rope_theta);
    unused("norm_eps", c.norm_eps != d.norm_eps);
    unused("tied = false", c.tied != d.tied);
  }
  void fields_to_json(const GPTConfig&, nlohmann::json&) const override {}
  void fields_from_json(const nlohmann::json&, const std::string&, GPTConfig&) const override {}

  int64_t embed_params(const GPTConfig& c) const override { return c.Vp() * c.C + (int64_t)c.T * c.C; }
  int64_t block_params(const GPTConfig& c) const override { return 12 * (int64_t)c.C * c.C + 13 * (int64_t)c.C; }
  int64_t head_params(const GPTConfig& c) const override { return 2 * (int64_t)c.C; }  // ln_f
  bool head_reads_embedding(const GPTConfig&) const override { return true; }

  // Per block: qkv 6C^2, attention projection 2C^2, MLP 16C^2 (all 2*in*out), and
  // attention scores + weighted sum 2 * 2 * t_avg * C with t_avg = (t+1)/2 under the mask.
  double block_forward_flops_per_token(const GPTConfig& g, int t) const override {
    const double c = g.C;
    return 24.0 * c * c + 2.0 * (t + 1) * c;
  }
  double head_forward_flops_per_token(const GPTConfig& g) const override {
    const double c = g.C;
    return 2.0 * c * g.V;
  }
  // Korthikanti et al. (2022) count 34·C + 5·NH·T bytes per token of saved activations in
  // 16 bits; scaled by dtype / 2, and half again for the backward's gradient temporaries.
  double block_activation_bytes(const GPTConfig& g, int seq_len, int64_t m, int dtype_bytes) const override {
    const double per_token = 34.0 * g.C + 5.0 * g.NH * seq_len;
    return 1.5 * (double)m * seq_len * per_token * dtype_bytes / 2.0;
  }
};

}  // namespace

const ModelFamily& gpt2_family() {
  static const Gpt2Family family;
  return family;
}

}  // namespace gpumix
