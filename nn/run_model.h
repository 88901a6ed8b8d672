// A training run's model shape, before its step loop: the preset with the flags' overrides,
// or an --init-from folder's config.json, checked against the data and the sequence length.
#pragma once

#include <cstdint>

#include "nn/gpt_config.h"
#include "nn/train_options.h"

namespace gpumix {

// The sequence length of a run: --seq, or the model's context (the preset's, or
// n_positions of o.init_from's config.json, which --seq must not exceed).
int64_t resolve_seq(const TrainOptions& o);

// The preset with the flags' overrides, the data's vocabulary and sequence length `seq`;
// or, with o.init_from, its config.json (context n_positions), whose vocab_size must be
// the data's and which no shape flag may override.
GPTConfig resolve_model(const TrainOptions& o, int64_t vocab, int64_t seq);

}  // namespace gpumix
