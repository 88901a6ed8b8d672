#include "nn/data/loader.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace gpumix::data {

namespace {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_counter(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ a);
  h = splitmix64(h ^ b);
  return splitmix64(h ^ c);
}

uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key) {
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  do {  // every value of the domain lies on a cycle, so walking from i < n comes back below n
    uint64_t left = i >> half, right = i & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t next = left ^ (hash_counter(key, round, right) & mask);
      left = right;
      right = next;
    }
    i = (left << half) | right;
  } while (i >= n);
  return i;
}

BatchLoader::BatchLoader(TokenView tokens, int64_t seq_len, int64_t global_batch, uint64_t seed)
    : tokens_(tokens), seq_len_(seq_len), global_batch_(global_batch), seed_(seed) {
  if (seq_len < 1 || global_batch < 1) {
    throw std::invalid_argument("batch loader: sequence length " + std::to_string(seq_len) + " and batch " +
                                std::to_string(global_batch) + " must both be at least 1");
  }
  if (static_cast<int64_t>(tokens.size()) < seq_len + 1) {
    throw std::invalid_argument("batch loader: " + std::to_string(tokens.size()) +
                                " tokens are fewer than one window of T + 1 = " + std::to_string(seq_len + 1) +
                                " — use a larger corpus or a shorter sequence length");
  }
  windows_ = (static_cast<int64_t>(tokens.size()) - 1) / seq_len;
}

int64_t BatchLoader::window_start(int64_t k, int64_t row) const {
  // Tags keep the per-epoch words apart from each other and from other uses of the hash.
  constexpr uint64_t kOrderTag = 0x6f72646572ull, kOffsetTag = 0x6f6666736574ull;
  const uint64_t windows = static_cast<uint64_t>(windows_);
  const uint64_t sample = static_cast<uint64_t>(k) * static_cast<uint64_t>(global_batch_) + static_cast<uint64_t>(row);
  const uint64_t epoch = sample / windows, position = sample % windows;
  const uint64_t slack = tokens_.size() - 1 - windows * static_cast<uint64_t>(seq_len_);  // < T
  const uint64_t offset = hash_counter(seed_, kOffsetTag, epoch) % (slack + 1);
  const uint64_t window = permute_index(position, windows, hash_counter(seed_, kOrderTag, epoch));
  return static_cast<int64_t>(offset + window * static_cast<uint64_t>(seq_len_));
}

void BatchLoader::copy_window(int64_t start, int32_t* inputs, int32_t* targets) const {
  tokens_.copy_to(start, seq_len_, inputs);
  tokens_.copy_to(start + 1, seq_len_, targets);
}

void BatchLoader::get(int64_t k, int64_t row_begin, int64_t row_end, int32_t* inputs, int32_t* targets) const {
  if (k < 0 || row_begin < 0 || row_end < row_begin || row_end > global_batch_) {
    throw std::out_of_range("batch loader: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                            ") of batch " + std::to_string(k) + " are outside a batch of " +
                            std::to_string(global_batch_) + " rows");
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t off = (r - row_begin) * seq_len_;
    copy_window(window_start(k, r), inputs + off, targets + off);
  }
}

int64_t BatchLoader::num_eval_windows() const { return windows_; }

void BatchLoader::eval_window(int64_t i, int32_t* inputs, int32_t* targets) const {
  if (i < 0 || i >= num_eval_windows()) {
    throw std::out_of_range("batch loader: evaluation window " + std::to_string(i) + " is outside [0, " +
                            std::to_string(num_eval_windows()) + ")");
  }
  copy_window(i * seq_len_, inputs, targets);
}

Split split_train_val(TokenView tokens, int64_t seq_len, double val_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1)) {
    throw std::invalid_argument("validation fraction " + std::to_string(val_fraction) + " must be in (0, 1)");
  }
  if (seq_len < 1) throw std::invalid_argument("sequence length " + std::to_string(seq_len) + " must be at least 1");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t window = seq_len + 1;
  const int64_t val = std::max<int64_t>(static_cast<int64_t>(std::ceil(val_fraction * n)), window);
  if (n - val < window) {
    throw std::invalid_argument(
        "the corpus has " + std::to_string(n) + " tokens, too few for a training and a validation window of T + 1 = " +
        std::to_string(window) + " tokens each (at least " + std::to_string(std::max(2 * window, window + val)) +
        " needed) — use a larger corpus or a shorter sequence length (--seq)");
  }
  return {tokens.slice(0, n - val), tokens.slice(n - val, n)};
}

Split given_split(TokenView train, TokenView val, int64_t seq_len) {
  const auto check = [&](TokenView t, const char* what) {
    if (static_cast<int64_t>(t.size()) < seq_len + 1)
      throw std::invalid_argument(std::string(what) + " holds " + std::to_string(t.size()) +
                                  " tokens, fewer than one window of T + 1 = " + std::to_string(seq_len + 1) +
                                  " — pass more token data or a shorter sequence length (--seq)");
  };
  check(train, "the training data (--data)");
  check(val, "the validation data (--val-data)");
  return {train, val};
}

double unigram_cross_entropy(TokenView train, TokenView val, int64_t vocab_size) {
  if (vocab_size < 1) throw std::invalid_argument("unigram baseline: vocabulary size must be positive");
  if (val.empty()) throw std::invalid_argument("unigram baseline: the validation split is empty");
  std::vector<int64_t> counts(vocab_size, 0);
  const auto check = [&](int32_t t, const char* split) {
    if (t < 0 || t >= vocab_size) {
      throw std::out_of_range(std::string("unigram baseline: ") + split + " token " + std::to_string(t) +
                              " is outside the vocabulary of " + std::to_string(vocab_size));
    }
  };
  train.for_each_run([&](size_t, const TokenView& run) {
    for (size_t i = 0; i < run.size(); ++i) {
      check(run[i], "training");
      ++counts[run[i]];
    }
  });
  const double log_denom = std::log(static_cast<double>(train.size()) + static_cast<double>(vocab_size));
  double sum = 0;
  val.for_each_run([&](size_t, const TokenView& run) {
    for (size_t i = 0; i < run.size(); ++i) {
      check(run[i], "validation");
      sum += log_denom - std::log(static_cast<double>(counts[run[i]] + 1));
    }
  });
  return sum / static_cast<double>(val.size());
}

}  // namespace gpumix::data
