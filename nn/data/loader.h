// Deterministic batches of training windows, the train/validation split, and the unigram
// baseline.
//
// Glossary: B global batch (rows), T sequence length, N tokens in the split.
//
// Batch k of a run is a fixed function of (seed, k). Training reads the split in epochs of
// W = (N - 1) / T windows of T + 1 tokens that tile it (consecutive ones share a token, as
// targets are inputs shifted by one); row r of batch k is sample g = k * B + r, in epoch
// e = g / W at position j = g mod W, and starts at
//     start(seed, g) = offset(seed, e) + permute(seed, e, j) * T
// where permute is a keyed bijection of [0, W) (a Feistel network) and offset in
// [0, N - 1 - W * T] shifts the tiling per epoch, so window edges fall elsewhere each time.
// Each epoch reads every window once, in a new order: without replacement, like shuffling
// a dataset, but with no generator state and no stored permutation (O(1) memory at any N).
// So a rank that reads rows [row_begin, row_end) of batch k gets exactly those rows of the
// one-reader batch, whatever the number of ranks, the plan, or the order of calls, and a
// resumed run needs only k. Documents may cross window edges, and windows cross the edges
// of shards (a TokenView may join several).
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

// A bijection of [0, n) chosen by key: a balanced Feistel network of four hash_counter
// rounds on the smallest even number of bits holding n, cycle-walked back into [0, n)
// (fewer than four walks expected). Requires i < n.
uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key);

// The name of the training window order above, saved in checkpoints: a checkpoint drawn in
// another order cannot be resumed on the same data stream.
inline constexpr const char* kWindowOrder = "shuffled-epochs";

class BatchLoader {
 public:
  // Throws std::invalid_argument when tokens has fewer than T + 1 tokens or B, T < 1.
  BatchLoader(TokenView tokens, int64_t seq_len, int64_t global_batch, uint64_t seed);

  int64_t seq_len() const { return seq_len_; }
  int64_t global_batch() const { return global_batch_; }
  uint64_t seed() const { return seed_; }

  // W: training windows in an epoch; B * steps / W epochs are read in a run of `steps`.
  int64_t windows_per_epoch() const { return windows_; }
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
  int64_t windows_;  // W = (N - 1) / T
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
