#include "nn/infer.h"

#include <algorithm>
#include <cmath>

#include "autograd/tape.h"
#include "core/ops.h"
#include "core/rng.h"
#include "kernels/philox.h"
#include "nn/data/loader.h"

namespace gpumix {

std::unique_ptr<GPT> load_model(const CheckpointReader& reader, DType compute) {
  const GPTConfig config = config_from_json(reader.model(), reader.dir() + "/meta.json: model");
  auto model = std::make_unique<GPT>(config, Device::cpu(), 0, compute);
  reader.read_slice("master", 0, model->params().data<float>(), model->num_params());
  model->sync_compute_params();
  return model;
}

void check_token_ids(const int32_t* ids, int64_t n, int64_t vocab, const char* what, int32_t lowest) {
  for (int64_t i = 0; i < n; ++i)
    GPUMIX_CHECK_INPUT(ids[i] >= lowest && ids[i] < vocab, what, ": id ", ids[i], " at position ", i,
                       " is outside [", lowest, ", ", vocab, "), the model's vocabulary",
                       lowest < 0 ? " (-1: no target)" : "");
}

Tensor token_losses(const GPT& model, const Tensor& tokens, const Tensor& targets) {
  GPUMIX_CHECK(tokens.dim() == 2 && targets.shape() == tokens.shape(), "token_losses: tokens ",
               tokens.shape().str(), " and targets ", targets.shape().str(), " must both be (B, T)");
  const int64_t B = tokens.size(0), T = tokens.size(1), V = model.config().V;
  const Tensor logits = model.logits(tokens).view({B * T, V});  // (B*T, V)
  Tensor losses = Tensor::empty({B * T}, DType::f32, logits.device());
  Tensor lse = Tensor::empty({B * T}, DType::f32, logits.device());
  ops::crossentropy_forward(losses, lse, logits, targets.view({B * T}));
  return losses.view({B, T});
}

double mean_loss(const GPT& model, const int32_t* tokens, int64_t n, int64_t* windows_out) {
  const int64_t T = model.config().T;
  GPUMIX_CHECK_INPUT(n >= T + 1, "mean loss: ", n, " tokens are fewer than one window of the model's context + 1 = ",
                     T + 1, "; pass more tokens");
  const data::BatchLoader loader(data::TokenView(tokens, (size_t)n), T, 1, 0);
  const int64_t windows = loader.num_eval_windows();
  const int64_t chunk = 8;  // windows per forward: bounds the logits to 8 * T * V floats
  double sum = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += chunk) {
    const int64_t rows = std::min(chunk, windows - w0);
    Tensor in = Tensor::empty({rows, T}, DType::i32), tg = Tensor::empty({rows, T}, DType::i32);
    for (int64_t r = 0; r < rows; ++r)
      loader.eval_window(w0 + r, in.data<int32_t>() + r * T, tg.data<int32_t>() + r * T);
    for (float x : token_losses(model, in, tg).to_vector()) sum += x;
  }
  if (windows_out) *windows_out = windows;
  return sum / (double)(windows * T);
}

void sample_tokens(const GPT& model, std::vector<int32_t>& ids, const SampleOptions& o) {
  const GPTConfig& config = model.config();
  GPUMIX_CHECK_INPUT(o.tokens >= 0, "generate: the number of tokens must be >= 0, got ", o.tokens);
  GPUMIX_CHECK_INPUT(o.temperature >= 0, "generate: the temperature must be >= 0 (0: greedy), got ", o.temperature);
  GPUMIX_CHECK_INPUT(o.top_k >= 0, "generate: top-k must be >= 0 (0: all tokens), got ", o.top_k);
  GPUMIX_CHECK_INPUT(!ids.empty(), "generate: the prompt must hold at least one token id");
  check_token_ids(ids.data(), (int64_t)ids.size(), config.V, "generate: prompt");
  std::vector<float> probs(config.V);
  for (int i = 0; i < o.tokens; ++i) {
    const int64_t T = std::min<int64_t>((int64_t)ids.size(), config.T);
    std::vector<int32_t> context(ids.end() - T, ids.end());
    const Tensor logits = model.logits(Tensor::from_vector(context, {1, T}));
    const float* last = logits.data<float>() + (T - 1) * config.V;  // (V)
    int32_t next = 0;
    if (o.temperature == 0) {
      next = (int32_t)(std::max_element(last, last + config.V) - last);
    } else {
      // Top-k on the scaled logits, then sample with a counter-based uniform.
      std::vector<int32_t> order(config.V);
      for (int v = 0; v < config.V; ++v) order[v] = v;
      const int k = o.top_k > 0 ? std::min(o.top_k, config.V) : config.V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return last[a] > last[b]; });
      double total = 0;
      for (int j = 0; j < k; ++j) {
        probs[j] = std::exp((last[order[j]] - last[order[0]]) / o.temperature);
        total += probs[j];
      }
      const double u = philox_uniform_at(rng_key(o.seed, "generate"), (uint64_t)i) * total;
      double acc = 0;
      next = order[k - 1];
      for (int j = 0; j < k; ++j) {
        acc += probs[j];
        if (u < acc) {
          next = order[j];
          break;
        }
      }
    }
    ids.push_back(next);
  }
}

}  // namespace gpumix
