// Deterministic batches of training windows, the train/validation split, and the unigram
// baseline.
//
// Glossary: B global batch (rows), T sequence length, N tokens in the split.
//
// Batch k of a run is a fixed function of (seed, k): row r of it is the window of T + 1
// tokens starting at
//     start(seed, k, r) = uniform(splitmix64(seed, k, r)) in [0, N - T)
// (inputs are tokens [start, start + T), targets [start + 1, start + T + 1)). The hash is
// counter-based, with no generator state, so a rank that reads rows [row_begin, row_end) of
// batch k gets exactly those rows of the one-reader batch, whatever the number of ranks,
// the plan, or the order of calls. Windows are drawn with replacement (they may overlap
// or repeat); over a run every start is equally likely.
//
// Validation instead reads the split in order: eval_window(i) starts at i * T, so that
// num_eval_windows() windows cover it once without overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/data/token_file.h"

namespace gpumix::data {

// Counter-based hash of (seed, a, b, c): splitmix64 finalisers chained over the words.
uint64_t hash_counter(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

class BatchLoader {
 public:
  // Throws std::invalid_argument when tokens has fewer than T + 1 tokens or B, T < 1.
  BatchLoader(TokenView tokens, int64_t seq_len, int64_t global_batch, uint64_t seed);

  int64_t seq_len() const { return seq_len_; }
  int64_t global_batch() const { return global_batch_; }
  uint64_t seed() const { return seed_; }

  // The start of row `row` of batch k.
  int64_t window_start(int64_t k, int64_t row) const;
  // Rows [row_begin, row_end) of batch k: inputs and targets, each (rows, T) row-major.
  void get(int64_t k, int64_t row_begin, int64_t row_end, int32_t* inputs, int32_t* targets) const;

  // Sequential validation windows: i in [0, num_eval_windows()), start i * T.
  int64_t num_eval_windows() const;
  void eval_window(int64_t i, int32_t* inputs, int32_t* targets) const;

 private:
  void copy_window(int64_t start, int32_t* inputs, int32_t* targets) const;

  TokenView tokens_;
  int64_t seq_len_;
  int64_t global_batch_;
  uint64_t seed_;
};

struct Split {
  TokenView train;
  TokenView val;
};

// Holds out the last max(ceil(val_fraction * N), T + 1) tokens for validation. Throws
// std::invalid_argument, naming N, T and the fix, when the corpus cannot give both splits
// at least one window of T + 1 tokens.
Split split_train_val(TokenView tokens, int64_t seq_len, double val_fraction = 0.05);

// Training and validation tokens given apart (--val-data). Throws std::invalid_argument,
// naming the sizes, T and the fix, when either has fewer than T + 1 tokens.
Split given_split(TokenView train, TokenView val, int64_t seq_len);

// The cross-entropy in nats/token of predicting each validation token by its unigram
// frequency in the training split, with add-one (Laplace) smoothing over the vocabulary:
//     p(v) = (count_train(v) + 1) / (N_train + vocab_size)
// so that a token never seen in training costs a finite log(N_train + V). A model that
// learned anything beyond token frequencies ends below it.
double unigram_cross_entropy(TokenView train, TokenView val, int64_t vocab_size);

}  // namespace gpumix::data
