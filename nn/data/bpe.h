// Byte-level BPE tokenizer in the style of GPT-2: train, encode, decode, save, load, and
// GPT-2's own files (vocab.json + merges.txt) in and out.
//
// Canonical ids: 0..255 are the raw bytes (so any byte string round-trips and there is no
// UNK), merge r creates id 256 + r, and the special token <|endoftext|> is 256 + merges.
// vocab_size() counts all three kinds (GPT-2: 256 + 50000 + 1 = 50257). A tokenizer read
// from GPT-2's files keeps that file's ids (GPT-2 numbers its bytes in another order): the
// merges still work on canonical ids, and encode/decode map them to the file's ids.
//
// Text is first split on the special token, then pre-tokenized, and merges never cross a
// pre-token boundary. Two pre-tokenizers:
//   gpt2       GPT-2's regex over Unicode (PCRE2, UTF + UCP), exactly:
//                's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//              bytes that are not valid UTF-8 (which no regex matches) are a pre-token of
//              their own. New tokenizers use it.
//   gpumix-v1  the hand-written scanner of tokenizer files version 1, kept so those files
//              (and the checkpoints that name their hash) encode as they always did: the
//              same regex with ASCII classes and every byte >= 0x80 counted as a letter
//              (identical to gpt2 on ASCII text).
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

enum class Pretokenizer : uint8_t { gpt2, gpumix_v1 };
const char* pretokenizer_name(Pretokenizer kind);  // "gpt2", "gpumix-v1"

// The pre-tokens of `text` (which must not hold the special token: split on it first).
// Concatenated, the pieces cover `text` exactly.
std::vector<Piece> pretokenize(std::string_view text, Pretokenizer kind);

// A position where a text may be cut into independently pre-tokenized chunks without
// changing the result (with either pre-tokenizer): a ' ' preceded by an ASCII byte that is
// not a space. Returns up to `n - 1` sorted cut points (fewer when the text has no such
// place), used to parallelise.
std::vector<size_t> chunk_cuts(std::string_view text, int n);

struct TrainOptions {
  bool show_progress = false;  // progress bar with ETA on stderr (see progress.h)
  Pretokenizer pretokenizer = Pretokenizer::gpt2;
};

class Tokenizer {
 public:
  using Pair = std::pair<int32_t, int32_t>;

  // The byte-level tokenizer with no merges (vocab_size() == 257).
  Tokenizer();
  // `merges` in canonical ids. `ids`, when not empty, gives the id of each canonical id
  // (a permutation of 0..vocab_size()-1); empty: the canonical ids themselves.
  explicit Tokenizer(std::vector<Pair> merges, Pretokenizer pretokenizer = Pretokenizer::gpt2,
                     std::vector<int32_t> ids = {});

  // Learns vocab_size - 257 merges from `text` (which may contain <|endoftext|>, never
  // merged into). Tie-break: highest count, then the smallest pair (a, b). Stops early,
  // with a smaller vocabulary, when no pair is left to merge.
  static Tokenizer train(std::string_view text, int vocab_size, const TrainOptions& options = {});
  // The same merges by recounting every pair at each step: the oracle of train()'s tests.
  static Tokenizer train_naive(std::string_view text, int vocab_size,
                               Pretokenizer pretokenizer = Pretokenizer::gpt2);

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
  int32_t eot_id() const { return id_of(256 + num_merges()); }
  const std::vector<Pair>& merges() const { return merges_; }  // canonical ids
  Pretokenizer pretokenizer() const { return pretokenizer_; }
  bool ids_mapped() const { return !ids_.empty(); }
  const std::string& token_bytes(int32_t id) const { return vocab_.at(canonical_of(id)); }

  // FNV-1a 64 of the merges and the special token, and of the pre-tokenizer and the id
  // map where they are not version 1's: identifies the tokenizer in token files and
  // checkpoints. Stable across machines, releases and file-format versions.
  uint64_t hash() const;

  // Text format, version 1 for a gpumix-v1 tokenizer with canonical ids, else version 2
  // (see bpe.cpp for the grammar); written atomically. load() reads both, and a folder
  // holding GPT-2's vocab.json and merges.txt (load_gpt2).
  void save(const std::string& path) const;
  static Tokenizer load(const std::string& path);

  // GPT-2's files (nn/data/gpt2_vocab.cpp): vocab.json (token -> id, each byte written as
  // one character through GPT-2's bytes_to_unicode) and merges.txt ("#version: 0.2", then
  // one merge per line, "a b", by rank). Loading accepts exactly GPT-2's byte-level BPE:
  // every merge's parts exist before it, no result repeats, and the vocabulary is the 256
  // bytes, the merges' results and <|endoftext|> - anything else is an error naming the
  // file, the line or token and the fix. The tokenizer gets the gpt2 pre-tokenizer and
  // the files' ids. Saving writes this tokenizer's ids; both files atomically.
  void save_gpt2(const std::string& vocab_path, const std::string& merges_path) const;
  static Tokenizer load_gpt2(const std::string& vocab_path, const std::string& merges_path);

 private:
  int32_t rank_of(int32_t a, int32_t b) const;
  int32_t id_of(int32_t canonical) const { return ids_.empty() ? canonical : ids_[canonical]; }
  int32_t canonical_of(int32_t id) const {
    return ids_.empty() || id < 0 || id >= vocab_size() ? id : canonical_[id];
  }

  std::vector<Pair> merges_;
  Pretokenizer pretokenizer_ = Pretokenizer::gpt2;
  std::vector<int32_t> ids_, canonical_;  // canonical -> id and back; empty: identity
  std::vector<std::string> vocab_;  // canonical id -> bytes (the special token's text last)
  std::vector<uint64_t> rank_keys_;   // open-addressing table: pair key per slot
  std::vector<int32_t> rank_values_;  // rank per slot, -1 for empty
};

}  // namespace gpumix::data
