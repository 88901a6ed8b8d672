#include "nn/gpt_config.h"

#include <stdexcept>

#include "nn/model_family.h"

namespace gpumix {

const ModelFamily& GPTConfig::family_info() const { return model_family(family); }

int64_t GPTConfig::embed_params() const { return family_info().embed_params(*this); }
int64_t GPTConfig::block_params() const { return family_info().block_params(*this); }
int64_t GPTConfig::head_params() const { return family_info().head_params(*this); }
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
  return L * block_forward_flops_per_token(t) + head_forward_flops_per_token();
}
double GPTConfig::block_forward_flops_per_token(int t) const {
  return family_info().block_forward_flops_per_token(*this, t);
}
double GPTConfig::head_forward_flops_per_token() const { return family_info().head_forward_flops_per_token(*this); }
double GPTConfig::block_activation_bytes(int seq_len, int64_t m, int dtype_bytes) const {
  return family_info().block_activation_bytes(*this, seq_len, m, dtype_bytes);
}
bool GPTConfig::head_reads_embedding() const { return family_info().head_reads_embedding(*this); }

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
  family_info().validate(*this);
}

nlohmann::json config_to_json(const GPTConfig& c) {
  nlohmann::json j = {{"name", c.name}, {"L", c.L}, {"NH", c.NH}, {"C", c.C}, {"V", c.V}, {"T", c.T}};
  if (c.family != GPTConfig{}.family) {  // the default family's models keep their old JSON
    j["family"] = c.family;
    c.family_info().fields_to_json(c, j);
  }
  return j;
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
    const auto family = j.find("family");
    if (family != j.end()) {
      if (!family->is_string())
        throw std::invalid_argument("family: must be a family's name, got " + family->dump());
      c.family = family->get<std::string>();
    }
    c.family_info().fields_from_json(j, where, c);
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  return c;
}

GPTConfig gpt_preset(const std::string& name) {
  for (const ModelFamily* f : model_families())
    for (const GPTConfig& p : f->presets())
      if (p.name == name) return p;
  std::string known;
  for (const std::string& n : gpt_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model preset '" + name + "'; known presets: " + known);
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : model_families())
    for (const GPTConfig& p : f->presets()) names.push_back(p.name);
  return names;
}

}  // namespace gpumix
