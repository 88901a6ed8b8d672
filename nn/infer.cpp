#include "nn/infer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "autograd/tape.h"
#include "core/ops.h"
#include "core/rng.h"
#include "kernels/philox.h"
#include "nn/data/loader.h"
#include "nn/hf/gpt2.h"
#include "nn/model_stages.h"

namespace gpumix {

std::unique_ptr<GPT> load_model(const CheckpointReader& reader, DType compute) {
  const GPTConfig config = config_from_json(reader.model(), reader.dir() + "/meta.json: model");
  auto model = std::make_unique<GPT>(config, Device::cpu(), 0, compute);
  float* params = model->params().data<float>();  // its padding is zero already
  for (const SavedRun& r : gpt_saved_runs(model->layout(), 0, model->num_params()))
    reader.read_slice("master", r.saved, params + r.flat, r.count);
  model->sync_compute_params();
  return model;
}

HfModel load_hf_model(const std::string& dir, DType compute) {
  hf::Gpt2Model m = hf::read_model(dir);
  auto model = std::make_unique<GPT>(m.config, Device::cpu(), 0, compute);
  std::copy(m.params.begin(), m.params.end(), model->params().data<float>());
  model->sync_compute_params();
  return {std::move(model), std::move(m.tokenizer)};
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

// ---- sampling -----------------------------------------------------------------------------

namespace {

void check_sample_options(const GPTConfig& config, const SampleOptions& o) {
  GPUMIX_CHECK_INPUT(o.tokens >= 0, "generate: the number of tokens must be >= 0, got ", o.tokens);
  GPUMIX_CHECK_INPUT(o.temperature >= 0, "generate: the temperature must be >= 0 (0: greedy), got ", o.temperature);
  GPUMIX_CHECK_INPUT(o.top_k >= 0, "generate: top-k must be >= 0 (0: all tokens), got ", o.top_k);
  GPUMIX_CHECK_INPUT(o.top_p > 0 && o.top_p <= 1, "generate: top-p must be in (0, 1] (1: no nucleus cut), got ",
                     o.top_p);
  check_token_ids(o.stop.data(), (int64_t)o.stop.size(), config.V, "generate: stop ids");
}

}  // namespace

int32_t pick_token(const float* last, int64_t V, const SampleOptions& o, double u01) {
  if (o.temperature == 0) return (int32_t)(std::max_element(last, last + V) - last);
  // Top-k on the scaled logits, then the nucleus, then sample with a counter-based uniform.
  std::vector<int32_t> order(V);
  for (int64_t v = 0; v < V; ++v) order[v] = (int32_t)v;
  const int64_t k = o.top_k > 0 ? std::min<int64_t>(o.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return last[a] > last[b] || (last[a] == last[b] && a < b); });
  std::vector<double> probs(k);
  double total = 0;
  for (int64_t j = 0; j < k; ++j) {
    probs[j] = std::exp((last[order[j]] - last[order[0]]) / o.temperature);
    total += probs[j];
  }
  int64_t n = k;  // candidates kept
  if (o.top_p < 1) {
    double acc = 0;
    for (n = 0; n < k;) {
      acc += probs[n++];
      if (acc >= o.top_p * total) break;
    }
    total = acc;
  }
  const double u = u01 * total;
  double acc = 0;
  for (int64_t j = 0; j < n; ++j) {
    acc += probs[j];
    if (u < acc) return order[j];
  }
  return order[n - 1];
}

void sample_tokens(const GPT& model, std::vector<int32_t>& ids, const SampleOptions& o, int64_t stream) {
  const GPTConfig& config = model.config();
  check_sample_options(config, o);
  GPUMIX_CHECK_INPUT(!ids.empty(), "generate: the prompt must hold at least one token id");
  check_token_ids(ids.data(), (int64_t)ids.size(), config.V, "generate: prompt");
  const uint64_t key = rng_key(o.seed, "generate", (uint64_t)stream);
  std::optional<KVCache> cache;
  if (o.kv_cache) cache.emplace(model);
  // The logits (V) that predict the id after `ids`, from its last T ids.
  std::vector<float> logits;
  const auto window = [&] { return std::min<int64_t>((int64_t)ids.size(), config.T); };
  const auto recompute = [&] {
    const int64_t T = window();
    const std::vector<int32_t> context(ids.end() - T, ids.end());
    const Tensor all = model.logits(Tensor::from_vector(context, {1, T}).to(model.device())).to(Device::cpu());
    const float* last = all.data<float>() + (T - 1) * config.V;  // (V)
    logits.assign(last, last + config.V);
  };
  const auto refill = [&] {
    const int64_t T = window();
    logits = cache->prefill(ids.data() + ids.size() - T, T);
  };
  for (int i = 0; i < o.tokens; ++i) {
    if (!cache)
      recompute();
    else if (i == 0 || cache->length() == config.T)  // the prompt; or past the window: slide
      refill();
    else
      logits = cache->step(ids.back());
    const double u = o.temperature == 0 ? 0 : philox_uniform_at(key, (uint64_t)i);
    const int32_t next = pick_token(logits.data(), config.V, o, u);
    ids.push_back(next);
    if (std::find(o.stop.begin(), o.stop.end(), next) != o.stop.end()) break;
  }
}

void sample_batch(const GPT& model, std::vector<std::vector<int32_t>>& seqs, const SampleOptions& o) {
  check_sample_options(model.config(), o);
  for (size_t j = 0; j < seqs.size(); ++j) {
    GPUMIX_CHECK_INPUT(!seqs[j].empty(), "generate: prompt ", j, " of ", seqs.size(),
                       " is empty; each must hold at least one token id");
    check_token_ids(seqs[j].data(), (int64_t)seqs[j].size(), model.config().V,
                    ("generate: prompt " + std::to_string(j)).c_str());
  }
  for (size_t j = 0; j < seqs.size(); ++j) sample_tokens(model, seqs[j], o, (int64_t)j);
}

// ---- the key/value cache -----------------------------------------------------------------

KVCache::KVCache(const GPT& model) : model_(model), state_(model_stages(model.config()).decoder(model)) {}

KVCache::~KVCache() = default;
KVCache::KVCache(KVCache&&) noexcept = default;

std::vector<float> KVCache::prefill(const int32_t* ids, int64_t n) {
  const GPTConfig& c = model_.config();
  GPUMIX_CHECK_INPUT(n >= 1 && n <= c.T, "KVCache::prefill: ", n, " ids, expected 1 to the model's context ", c.T);
  check_token_ids(ids, n, c.V, "KVCache::prefill");
  n_ = 0;
  return forward(Tensor::from_vector(std::vector<int32_t>(ids, ids + n), {1, n}).to(model_.device()), n);
}

std::vector<float> KVCache::step(int32_t id) {
  const GPTConfig& c = model_.config();
  GPUMIX_CHECK_INPUT(n_ >= 1 && n_ < c.T, "KVCache::step: the cache holds ", n_, " positions; a step needs 1 to ",
                     c.T - 1, " (prefill first; at the context ", c.T, ", prefill the window again)");
  check_token_ids(&id, 1, c.V, "KVCache::step");
  return forward(Tensor::from_vector(std::vector<int32_t>{id}, {1, 1}).to(model_.device()), 1);
}

// The family's step (nn/model_stages.h DecodeState) on `rows` new rows at positions n_..
std::vector<float> KVCache::forward(const Tensor& tokens, int64_t rows) {
  std::vector<float> logits = state_->forward(tokens, rows, n_);
  n_ += rows;
  return logits;
}

}  // namespace gpumix
