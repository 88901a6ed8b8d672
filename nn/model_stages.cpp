#include "nn/model_stages.h"

#include <stdexcept>

#include "core/ops.h"
#include "core/rng.h"
#include "nn/model_family.h"

namespace gpumix {

// The registry of stages: a new family adds its line here (and its shape's in
// model_family.cpp).
const ModelStages& model_stages(const GPTConfig& c) {
  const std::string family = c.family_info().name();  // checks the family is known
  if (family == "gpt2") return gpt2_stages();
  throw std::invalid_argument("model " + c.name + ": the " + family +
                              " family has a shape but no stages to compute with yet: `gpumix plan` and "
                              "`gpumix simulate` plan it; training, profiling, evaluation, generation and "
                              "`gpumix bench` need its stages (the GPT-2 presets have them: " +
                              "gpt-nano ... gpt-6.7b)");
}

Tensor named_random_tensor(const Shape& shape, Device device, const char* name, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  ops::normal_(t, rng_key(0, name), 0, 0.0f, 1.0f);
  return dtype == DType::f32 ? t : t.to(dtype);
}

Tensor hashed_random_tokens(int64_t m, int64_t T, int V, Device device) {
  std::vector<int32_t> v(m * T);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (int32_t)(mix64(i) % (uint64_t)V);
  return Tensor::from_vector(v, {m, T}, device);
}

}  // namespace gpumix
