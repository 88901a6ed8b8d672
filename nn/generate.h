// `gpumix generate`: text (or token ids) sampled from a run's checkpoint or a Hugging Face
// GPT-2 folder, through the sampler of nn/infer.h; optionally the prompt's logits as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/infer.h"

namespace gpumix {

struct GenerateOptions : SampleOptions {
  std::string ckpt;             // run folder (its latest checkpoint) or a checkpoint folder
  std::string model;            // or a Hugging Face GPT-2 folder (nn/hf/gpt2.h)
  std::string dump_logits;      // when set: write the prompt's ids and logits there as JSON
  std::string prompt;
  std::vector<int32_t> prompt_ids;  // instead of `prompt`: token ids, no tokenizer needed
  int threads = 0;
  DType dtype = DType::f32;     // compute dtype of the model (core/precision.h)
  int num_samples = 1;          // continuations of the prompt (sample_batch: stream j each)
};

// Returns the prompt followed by the generated text (sample_tokens, through the run
// folder's tokenizer); with prompt_ids, the prompt's ids then the generated ones,
// space-separated. With a tokenizer, a sample also ends at its <|endoftext|> (kept) besides
// the stop ids. With num_samples > 1, the samples one after the other, each after a line
// "--- sample J ---" (ids: one line per sample).
std::string generate(const GenerateOptions& options);

}  // namespace gpumix
