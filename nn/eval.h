// `gpumix eval`: the mean loss and perplexity of a model (a run's checkpoint or a Hugging
// Face GPT-2 folder) on a corpus, encoded with the tokenizer the model came with, or on a
// token file. The windows are mean_loss's (nn/infer.h), so the number is gpumix_evaluate's
// on the same tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/dtype.h"
#include "nn/data/corpus.h"

namespace gpumix {

struct EvalOptions {
  std::string ckpt;   // run folder (its latest checkpoint) or a checkpoint folder
  std::string model;  // or a Hugging Face GPT-2 folder (nn/hf/gpt2.h)
  std::string data;   // text corpus (file or folder) or token file
  data::CorpusFormat format = data::CorpusFormat::auto_detect;
  int64_t windows = 0;  // the first N windows of the model's context (0: all)
  DType dtype = DType::f32;
  int threads = 0;
};

struct EvalResult {
  double loss = 0;        // mean nats per predicted token
  double perplexity = 0;  // exp(loss)
  int64_t windows = 0, windows_total = 0;  // measured, and the data's
  int64_t context = 0;                     // T: tokens per window
  int64_t tokens = 0;                      // of the data
  std::string source;                      // the checkpoint or folder the model came from
  std::string tokenizer;                   // what encoded the text ("" : a token file)
  std::string format;                      // what was read ("token file", "text", ...)
  std::string warning;                     // "" or what to say about the data
};

// Throws InputError naming the problem, the numbers and the fix: both or neither of
// ckpt/model, no tokenizer for a text corpus, a token file of another vocabulary, fewer
// tokens than one window + 1. `progress(done, total)` (if set) is called after each group of
// windows.
EvalResult evaluate(const EvalOptions& o, const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace gpumix
