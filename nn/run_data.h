// A training run's data, before its step loop: the corpus read, the run's tokenizer found,
// imported or trained, the text encoded (or a token file mapped, or the caller's tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/data/shards.h"
#include "nn/data/token_file.h"
#include "nn/train_options.h"

namespace gpumix {

// The tokens of a run, either owned (encoded from text) or mapped from token data; with
// --val-data, the validation tokens too (else val_tokens is empty: the run splits `tokens`).
struct RunData {
  std::vector<int32_t> owned;
  std::unique_ptr<data::TokenShards> shards, val_shards;
  data::TokenView tokens, val_tokens;
  int64_t vocab = 0;
  uint64_t tokenizer_hash = 0;
  std::string tokenizer_path;
  std::string format;   // what was read: "token file", "text", "fortunes (N records)", ...
  std::string warning;  // "" or what the run should say about the data (mostly not text)
};

// Reads o.data. A text corpus is encoded with the run's tokenizer, which is trained (with
// the model preset's vocabulary) and saved when absent and `may_train_tokenizer`; other
// ranks pass false and load what rank 0 saved. With o.init_from the run's tokenizer is the
// folder's, saved as <out>/tokenizer.bpe (which, if present, must be the same).
RunData prepare_data(const TrainOptions& o, bool may_train_tokenizer);

}  // namespace gpumix
