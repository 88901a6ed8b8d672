// Using a trained model without training it: the model of a checkpoint, per-token losses,
// the mean loss over a token stream, and sampling. `gpumix generate` and the C API's
// gpumix_forward / gpumix_evaluate / gpumix_generate all go through these, so that the
// same checkpoint and seed give the same tokens everywhere.
//
// Glossary: B batch, T sequence, V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/checkpoint.h"
#include "nn/gpt.h"

namespace gpumix {

// The checkpoint's model (its shape from meta.json, its fp32 master weights) on the CPU,
// computing in `compute` (f32 or bf16: then with its compute copy made from the master).
std::unique_ptr<GPT> load_model(const CheckpointReader& reader, DType compute = DType::f32);

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
  int tokens = 100;          // ids to append
  float temperature = 0.8f;  // 0: greedy (argmax)
  int top_k = 40;            // sample among the k most likely ids (0: the whole vocabulary)
  uint64_t seed = 42;        // the i-th sampled id draws philox(seed, "generate", i)
};

// Appends o.tokens ids to `ids` (at least one id, all below V), each predicted from the
// last T ids. Deterministic for a seed, whatever the threads. Throws Error on bad options.
void sample_tokens(const GPT& model, std::vector<int32_t>& ids, const SampleOptions& o);

}  // namespace gpumix
