#include "nn/model_family.h"

#include <stdexcept>

namespace gpumix {

// The registry: a new family adds its line here (and its stages' in model_stages.cpp).
std::vector<const ModelFamily*> model_families() { return {&gpt2_family(), &llama_family()}; }

const ModelFamily& model_family(const std::string& name) {
  std::string known;
  for (const ModelFamily* f : model_families()) {
    if (f->name() == name) return *f;
    known += (known.empty() ? "" : ", ") + std::string(f->name());
  }
  throw std::invalid_argument("unknown model family '" + name + "'; known families: " + known);
}

}  // namespace gpumix
