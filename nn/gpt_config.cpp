#include "nn/gpt_config.h"

#include <stdexcept>

namespace gpumix {

namespace {

// name, L, NH, C, V, T. Small presets use a small vocabulary (a BPE trained on the
// corpus); GPT-2 shapes use GPT-2's 50257; the billion-parameter shapes are GPT-3's
// (XL, 2.7B, 6.7B) at T = 2048.
const GPTConfig kPresets[] = {
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

}  // namespace

int64_t GPTConfig::embed_params() const { return Vp() * C + (int64_t)T * C; }
int64_t GPTConfig::block_params() const { return 12 * (int64_t)C * C + 13 * (int64_t)C; }
int64_t GPTConfig::head_params() const { return 2 * (int64_t)C; }
int64_t GPTConfig::total_params() const {
  return embed_params() + L * block_params() + head_params();
}
int64_t GPTConfig::saved_params() const { return total_params() - (Vp() - V) * C; }

int64_t GPTConfig::unit_params(int unit) const {
  if (unit < 0 || unit >= num_units())
    throw std::out_of_range("GPTConfig::unit_params: unit " + std::to_string(unit) +
                            " outside 0.." + std::to_string(num_units() - 1));
  if (unit == 0) return embed_params();
  if (unit == L + 1) return head_params();
  return block_params();
}

double GPTConfig::forward_flops_per_token(int t) const {
  // Per block: qkv 6C^2, attention projection 2C^2, MLP 16C^2 (all 2*in*out), and
  // attention scores + weighted sum 2 * 2 * t_avg * C with t_avg = (t+1)/2 under the mask.
  const double c = C;
  const double per_block = 24.0 * c * c + 2.0 * (t + 1) * c;
  const double lm_head = 2.0 * c * V;
  return L * per_block + lm_head;
}

void GPTConfig::validate() const {
  auto positive = [&](const char* field, int value) {
    if (value <= 0)
      throw std::invalid_argument("model " + name + ": " + field + " must be positive, got " +
                                  std::to_string(value));
  };
  positive("L (layers)", L);
  positive("NH (heads)", NH);
  positive("C (channels)", C);
  positive("V (vocabulary)", V);
  positive("T (context length)", T);
  if (C % NH != 0)
    throw std::invalid_argument("model " + name + ": C (channels) = " + std::to_string(C) +
                                " is not a multiple of NH (heads) = " + std::to_string(NH));
}

nlohmann::json config_to_json(const GPTConfig& c) {
  return {{"name", c.name}, {"L", c.L}, {"NH", c.NH}, {"C", c.C}, {"V", c.V}, {"T", c.T}};
}

GPTConfig config_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_string()) {
    try {
      return gpt_preset(j.get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
  }
  if (!j.is_object())
    throw std::invalid_argument(where + ": must be an object {\"L\", \"NH\", \"C\", \"V\", \"T\"} or a preset's name");
  auto dimension = [&](const char* key) {
    const auto v = j.find(key);
    if (v == j.end()) throw std::invalid_argument(where + "." + key + ": missing");
    if (!v->is_number_integer() || *v < 1 || *v > (1 << 30))
      throw std::invalid_argument(where + "." + key + ": must be a positive integer, got " + v->dump());
    return v->get<int>();
  };
  GPTConfig c;
  const auto name = j.find("name");
  c.name = name != j.end() && name->is_string() ? name->get<std::string>() : "custom";
  c.L = dimension("L");
  c.NH = dimension("NH");
  c.C = dimension("C");
  c.V = dimension("V");
  c.T = dimension("T");
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  return c;
}

GPTConfig gpt_preset(const std::string& name) {
  for (const GPTConfig& p : kPresets)
    if (p.name == name) return p;
  std::string known;
  for (const GPTConfig& p : kPresets) known += (known.empty() ? "" : ", ") + p.name;
  throw std::invalid_argument("unknown model preset '" + name + "'; known presets: " + known);
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const GPTConfig& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace gpumix
