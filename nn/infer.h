// Using a trained model without training it: the model of a checkpoint, per-token losses,
// the mean loss over a token stream, and sampling (incremental, with a key/value cache, one
// sequence or several). `gpumix generate` and the C API's
// gpumix_forward / gpumix_evaluate / gpumix_generate all go through these, so that the
// same checkpoint and seed give the same tokens everywhere.
//
// Glossary: B batch, T sequence (the model's context), C channels, L layers, NH heads,
// V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/checkpoint.h"
#include "nn/data/bpe.h"
#include "nn/gpt.h"

namespace gpumix {

class DecodeState;

// The checkpoint's model (its shape from meta.json, its fp32 master weights) on the CPU,
// computing in `compute` (f32 or bf16: then with its compute copy made from the master).
std::unique_ptr<GPT> load_model(const CheckpointReader& reader, DType compute = DType::f32);

// A Hugging Face GPT-2 folder (nn/hf/gpt2.h): its model on the CPU, computing in `compute`,
// and the tokenizer that came with it.
struct HfModel {
  std::unique_ptr<GPT> model;
  data::Tokenizer tokenizer;
};
HfModel load_hf_model(const std::string& dir, DType compute = DType::f32);

// Throws Error naming `what`, the position and the value when an id of ids[0, n) is outside
// [lowest, vocab) (lowest -1 for targets, where -1 means "no target").
void check_token_ids(const int32_t* ids, int64_t n, int64_t vocab, const char* what, int32_t lowest = 0);

// Per-token cross-entropy in nats: tokens, targets i32 (B, T), T <= the model's context,
// targets -1 ignored (loss 0) -> losses f32 (B, T). No tape.
Tensor token_losses(const GPT& model, const Tensor& tokens, const Tensor& targets);

// The mean per-token loss over `tokens` read as consecutive windows of the model's
// context T, each predicting the token after it (the windows the trainer's validation
// reads, data::BatchLoader::eval_window): n >= T + 1 tokens. `windows_out` (if not null)
// gets the number of windows.
double mean_loss(const GPT& model, const int32_t* tokens, int64_t n, int64_t* windows_out = nullptr);

struct SampleOptions {
  int tokens = 100;          // ids to append (at most: a stop id ends a sequence earlier)
  float temperature = 0.8f;  // 0: greedy (argmax)
  int top_k = 40;            // sample among the k most likely ids (0: the whole vocabulary)
  float top_p = 1.0f;        // then among the fewest most likely of those whose probabilities
                             // (renormalised over the k) sum to >= top_p (nucleus; 1: all k)
  uint64_t seed = 42;        // sequence j's i-th sampled id draws philox(rng_key(seed,
                             // "generate", j), i): j = 0 is a single sequence's stream
  std::vector<int32_t> stop; // a sequence ends after sampling one of these ids (kept)
  bool kv_cache = true;      // false: the reference, the whole context recomputed per id
};

// Appends up to o.tokens ids to `ids` (at least one id, all below V), each predicted from
// the last T ids (T the model's context), drawing stream `stream` (SampleOptions::seed).
// Deterministic for a seed, whatever the threads. Throws Error on bad options.
//
// With o.kv_cache (the default) the context is processed once (KVCache::prefill) and each
// new id costs one position per layer (KVCache::step). Past the window, the rule is
// today's: each id is predicted from the last T ids at positions 0..T-1, so once ids holds
// T, every further id re-fills the cache from the last T ids (a full forward, as without a
// cache: the cached keys carry their absolute positions, which a shifted window changes).
//
// Cache versus recompute: the cached path computes the same ops on fewer rows, so its
// logits equal the recomputed ones up to the order of fp32 sums (the GEMMs' blocking for
// 1 row against T rows; attention_decode's sums against the tiled attention's). fp32:
// within ~1e-5 relative, which leaves the ids identical except where two candidates are
// that close (tests/nn/test_infer.cpp checks identical ids, greedy and seeded). bf16: the
// recomputed attention rounds its probabilities to bf16 before the product with v (the
// avx512_bf16 path) and the decode kernel does not, so the logits agree within bf16
// rounding (~1e-2 relative) and an id may differ only where the top two logits (greedy) or
// a sampling boundary lie within that; the test checks every id against that rule,
// teacher-forced on the cached sequence.
void sample_tokens(const GPT& model, std::vector<int32_t>& ids, const SampleOptions& o, int64_t stream = 0);

// Several sequences at once: seqs[j] (a prompt of its own length) is continued as
// sample_tokens(model, seqs[j], o, j) would: its own cache and its own stream, so its ids
// depend neither on how many sequences there are nor on the others' prompts. Each ends at
// o.tokens ids or after a stop id. The sequences run one after the other on the model's
// device (one cache at a time; their rows are not batched into shared GEMMs).
void sample_batch(const GPT& model, std::vector<std::vector<int32_t>>& seqs, const SampleOptions& o);

// The id that o's rule picks from logits (V) with the uniform u in [0, 1): argmax at
// temperature 0, else the softmax of logits / temperature over the top_k most likely
// (ties: the lower id first), cut to the top_p nucleus, sampled by inverting its
// cumulative sum at u. The rule of sample_tokens, for tests of known distributions.
int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, double u);

// Incremental decoding's key/value cache of one sequence on the model's device: the model
// family's cached keys and values per layer (nn/model_stages.h DecodeState; GPT-2's: the
// qkv rows (1, T, 3C) of the positions seen, L x T x 3C values, gpt2 in fp32: 113 MB), in the
// model's compute dtype. The model must outlive the cache.
class KVCache {
 public:
  explicit KVCache(const GPT& model);
  ~KVCache();
  KVCache(KVCache&&) noexcept;
  // Forgets what it held and runs the model over ids[0, n) (1 <= n <= T) at positions
  // 0..n-1, one forward with n rows. Returns the logits (V) of the last position (fp32).
  std::vector<float> prefill(const int32_t* ids, int64_t n);
  // Runs id at position length() (< T): one row per layer, its attention over the cached
  // rows (ops::attention_decode). Returns its logits (V, fp32).
  std::vector<float> step(int32_t id);
  int64_t length() const { return n_; }

 private:
  // Runs tokens (1, rows) at positions n_..n_+rows-1 through the blocks, then the head on
  // its last row.
  std::vector<float> forward(const Tensor& tokens, int64_t rows);

  const GPT& model_;
  std::unique_ptr<DecodeState> state_;
  int64_t n_ = 0;
};

}  // namespace gpumix
