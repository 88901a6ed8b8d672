// Byte-level BPE tokenizer in the style of GPT-2: train, encode, decode, save, load.
//
// Ids: 0..255 are the raw bytes (so any byte string round-trips and there is no UNK),
// merge r creates id 256 + r, and the special token <|endoftext|> takes the last id,
// 256 + merges. vocab_size() counts all three kinds (GPT-2: 256 + 50000 + 1 = 50257).
//
// Text is first split on the special token, then pre-tokenized by a hand-written scanner
// approximating the GPT-2 regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with ASCII classes and every byte >= 0x80 counted as a letter. Merges never cross a
// pre-token boundary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumix::data {

inline constexpr std::string_view eot_text = "<|endoftext|>";

// One pre-token of a text: [begin, end) byte offsets.
struct Piece {
  size_t begin = 0;
  size_t end = 0;
};

// The pre-tokens of `text` (which must not hold the special token: split on it first).
// Concatenated, the pieces cover `text` exactly.
std::vector<Piece> pretokenize(std::string_view text);

// A position where a text may be cut into independently pre-tokenized chunks without
// changing the result: a ' ' preceded by a non-space byte. Returns up to `n - 1` sorted
// cut points (fewer when the text has no such place), used to parallelise.
std::vector<size_t> chunk_cuts(std::string_view text, int n);

struct TrainOptions {
  bool show_progress = false;  // progress bar with ETA on stderr (see progress.h)
};

class Tokenizer {
 public:
  using Pair = std::pair<int32_t, int32_t>;

  // The byte-level tokenizer with no merges (vocab_size() == 257).
  Tokenizer();
  explicit Tokenizer(std::vector<Pair> merges);

  // Learns vocab_size - 257 merges from `text` (which may contain <|endoftext|>, never
  // merged into). Tie-break: highest count, then the smallest pair (a, b). Stops early,
  // with a smaller vocabulary, when no pair is left to merge.
  static Tokenizer train(std::string_view text, int vocab_size, const TrainOptions& options = {});
  // The same merges by recounting every pair at each step: the oracle of train()'s tests.
  static Tokenizer train_naive(std::string_view text, int vocab_size);

  // With allow_special, each literal "<|endoftext|>" in the text becomes eot_id();
  // otherwise it is encoded as ordinary bytes.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Encodes one pre-token (no special-token handling), appending to `out`.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // Throws std::out_of_range naming the id when one is not in [0, vocab_size()).
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }

  int vocab_size() const { return 256 + num_merges() + 1; }
  int num_merges() const { return static_cast<int>(merges_.size()); }
  int32_t eot_id() const { return 256 + num_merges(); }
  const std::vector<Pair>& merges() const { return merges_; }
  const std::string& token_bytes(int32_t id) const { return vocab_.at(id); }

  // FNV-1a 64 of the merges and the special token: identifies the tokenizer in token
  // files and checkpoints. Stable across machines, releases and file-format versions.
  uint64_t hash() const;

  // Text format, version 1 (see bpe.cpp for the grammar); written atomically.
  void save(const std::string& path) const;
  static Tokenizer load(const std::string& path);

 private:
  int32_t rank_of(int32_t a, int32_t b) const;

  std::vector<Pair> merges_;
  std::vector<std::string> vocab_;  // id -> bytes (the special token's text last)
  std::vector<uint64_t> rank_keys_;   // open-addressing table: pair key per slot
  std::vector<int32_t> rank_values_;  // rank per slot, -1 for empty
};

}  // namespace gpumix::data
