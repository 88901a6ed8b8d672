#include "nn/data/bpe.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#ifdef _OPENMP
#include <omp.h>
#endif

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "nn/data/file_util.h"
#include "nn/data/progress.h"

namespace gpumix::data {

namespace {

constexpr int format_version_v1 = 1;  // gpumix-v1 pre-tokenizer, canonical ids
constexpr int format_version = 2;
constexpr const char* format_magic = "gpumix-bpe-tokenizer";
constexpr const char* hash_tag = "gpumix-bpe";
constexpr size_t parallel_min_bytes = 1 << 20;  // below this, threads cost more than they save
constexpr size_t cache_max_piece = 64;          // longer pre-tokens are rare: not cached

// ---- the gpumix-v1 pre-tokenizer: byte classes (ASCII; bytes >= 0x80 are letters) --------
inline bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
inline bool is_letter(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
inline bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
inline bool is_other(unsigned char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
inline int32_t key_first(uint64_t k) { return static_cast<int32_t>(k >> 32); }
inline int32_t key_second(uint64_t k) { return static_cast<int32_t>(k & 0xffffffffu); }

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser: spreads pair keys over slots
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Length of the gpumix-v1 pre-token starting at text[i] (see the regex in bpe.h).
size_t scan_piece(std::string_view text, size_t i) {
  const size_t n = text.size();
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  // 's 't 'm 'd 're 've 'll (case-sensitive, as GPT-2)
  if (c == '\'' && i + 1 < n) {
    const unsigned char d = at(i + 1);
    if (d == 's' || d == 't' || d == 'm' || d == 'd') return 2;
    if (i + 2 < n) {
      const unsigned char e = at(i + 2);
      if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return 3;
    }
  }
  // ` ?letters`, ` ?digits`, ` ?other`: an optional single leading space.
  size_t j = i;
  if (c == ' ' && i + 1 < n && !is_space(at(i + 1))) j = i + 1;
  const unsigned char k = at(j);
  if (!is_space(k)) {
    bool (*same)(unsigned char) = is_letter(k) ? is_letter : is_digit(k) ? is_digit : is_other;
    size_t e = j + 1;
    while (e < n && same(at(e))) ++e;
    return e - i;
  }
  // Whitespace: `\s+(?!\S)` leaves the last space of a run to the next pre-token;
  // a single space before a non-space falls through to `\s+`.
  size_t e = i + 1;
  while (e < n && is_space(at(e))) ++e;
  if (e < n && e - i > 1) --e;
  return e - i;
}

// Calls fn(segment, is_special) for the text split on the special token.
template <class Fn>
void for_each_segment(std::string_view text, bool split_special, Fn&& fn) {
  size_t pos = 0;
  while (split_special) {
    const size_t hit = text.find(eot_text, pos);
    if (hit == std::string_view::npos) break;
    if (hit > pos) fn(text.substr(pos, hit - pos), false);
    fn(text.substr(hit, eot_text.size()), true);
    pos = hit + eot_text.size();
  }
  if (pos < text.size()) fn(text.substr(pos), false);
}

// ---- the gpt2 pre-tokenizer: GPT-2's regex through PCRE2 -------------------------------------

constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::runtime_error pcre2_failure(const char* what, int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof message);
  return std::runtime_error(std::string("GPT-2 pre-tokenizer: ") + what + ": " +
                            reinterpret_cast<const char*>(message));
}

// The compiled pattern, shared by every thread (PCRE2 code is read-only when matching).
// Invalid UTF-8 is allowed in the subject and matched by nothing.
const pcre2_code* gpt2_regex() {
  static const struct Compiled {
    pcre2_code* code;
    Compiled() {
      int error = 0;
      PCRE2_SIZE at = 0;
      code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(gpt2_pattern), PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &at, nullptr);
      if (!code) throw pcre2_failure("cannot compile the pattern", error);
      pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where the JIT is missing, the interpreter runs
    }
    ~Compiled() { pcre2_code_free(code); }
  } compiled;
  return compiled.code;
}

// Calls fn(piece) for each gpt2 pre-token of `segment`: the regex's matches, and each run
// of bytes between them (invalid UTF-8) as a piece of its own.
template <class Fn>
void for_each_gpt2_piece(std::string_view segment, Fn&& fn) {
  const pcre2_code* code = gpt2_regex();
  thread_local const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(segment.data());
  size_t i = 0;
  while (i < segment.size()) {
    const int rc = pcre2_match(code, subject, segment.size(), i, 0, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      fn(segment.substr(i));
      return;
    }
    if (rc < 0) throw pcre2_failure("matching failed", rc);
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    if (range[0] > i) fn(segment.substr(i, range[0] - i));
    fn(segment.substr(range[0], range[1] - range[0]));  // never empty: every branch takes a character
    i = range[1];
  }
}

template <class Fn>
void for_each_piece(std::string_view segment, Pretokenizer kind, Fn&& fn) {
  if (kind == Pretokenizer::gpt2) {
    for_each_gpt2_piece(segment, fn);
    return;
  }
  for (size_t i = 0; i < segment.size();) {
    const size_t len = scan_piece(segment, i);
    fn(segment.substr(i, len));
    i += len;
  }
}

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Splits text into up to n independently processed chunks (see chunk_cuts).
std::vector<std::string_view> split_chunks(std::string_view text, int n) {
  std::vector<std::string_view> chunks;
  size_t begin = 0;
  for (size_t cut : chunk_cuts(text, n)) {
    chunks.push_back(text.substr(begin, cut - begin));
    begin = cut;
  }
  chunks.push_back(text.substr(begin));
  return chunks;
}

// ---- training -----------------------------------------------------------------------------

struct WordCounts {
  std::vector<std::vector<int32_t>> words;  // unique pre-tokens as byte ids, sorted by bytes
  std::vector<int64_t> freq;
};

WordCounts count_words(std::string_view text, Pretokenizer kind, bool show_progress) {
  const int nt = text.size() >= parallel_min_bytes ? num_threads() : 1;
  // Many small chunks: balanced threads and a smooth progress bar.
  const int num_chunks = std::max<int>(nt * 4, static_cast<int>(text.size() >> 20));
  const auto chunks = split_chunks(text, num_chunks);
  std::vector<std::unordered_map<std::string_view, int64_t>> maps(nt);
  std::atomic<size_t> done{0};
  Progress progress("counting words", static_cast<double>(text.size()) / 1e6, "MB", show_progress);
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    auto& m = maps[omp_get_thread_num()];
#else
    auto& m = maps[0];
#endif
#pragma omp for schedule(dynamic, 1)
    for (long c = 0; c < static_cast<long>(chunks.size()); ++c) {
      for_each_segment(chunks[c], true, [&](std::string_view seg, bool special) {
        if (!special) for_each_piece(seg, kind, [&](std::string_view p) { ++m[p]; });
      });
      const size_t d = done += chunks[c].size();
      if (&m == &maps[0]) progress.update(static_cast<double>(d) / 1e6);  // one thread draws
    }
  }
  progress.finish();
  for (size_t c = 1; c < maps.size(); ++c) {
    for (const auto& [w, f] : maps[c]) maps[0][w] += f;
  }
  std::vector<std::pair<std::string_view, int64_t>> sorted(maps[0].begin(), maps[0].end());
  std::sort(sorted.begin(), sorted.end());
  WordCounts wc;
  wc.words.reserve(sorted.size());
  wc.freq.reserve(sorted.size());
  for (const auto& [w, f] : sorted) {
    wc.words.emplace_back(w.begin(), w.end());
    for (auto& id : wc.words.back()) id &= 0xff;  // char may be signed
    wc.freq.push_back(f);
  }
  return wc;
}

// Replaces each (a, b) in `word`, left to right, by `id`.
std::vector<int32_t> merge_word(const std::vector<int32_t>& word, int32_t a, int32_t b, int32_t id) {
  std::vector<int32_t> out;
  out.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
      out.push_back(id);
      ++i;
    } else {
      out.push_back(word[i]);
    }
  }
  return out;
}

int target_merges(int vocab_size) {
  if (vocab_size < 257) {
    throw std::invalid_argument("vocabulary size " + std::to_string(vocab_size) +
                                " is too small: it must be at least 257 (256 bytes and "
                                "<|endoftext|>); typical values are 4096 to 50257");
  }
  return vocab_size - 257;
}

struct HeapEntry {
  int64_t count;
  uint64_t key;
  // Max-heap order: highest count first, then the smallest pair.
  bool operator<(const HeapEntry& o) const { return count < o.count || (count == o.count && key > o.key); }
};

}  // namespace

const char* pretokenizer_name(Pretokenizer kind) { return kind == Pretokenizer::gpt2 ? "gpt2" : "gpumix-v1"; }

std::vector<Piece> pretokenize(std::string_view text, Pretokenizer kind) {
  std::vector<Piece> pieces;
  for_each_piece(text, kind, [&](std::string_view p) {
    const size_t begin = static_cast<size_t>(p.data() - text.data());
    pieces.push_back({begin, begin + p.size()});
  });
  return pieces;
}

std::vector<size_t> chunk_cuts(std::string_view text, int n) {
  std::vector<size_t> cuts;
  const size_t len = text.size();
  size_t last = 0;
  for (int k = 1; k < n; ++k) {
    size_t p = std::max(last + 1, len * static_cast<size_t>(k) / static_cast<size_t>(n));
    // A ' ' after an ASCII non-space byte ends every pre-token kind and starts a new one
    // whose match does not look back, so both sides pre-tokenize as they would together.
    // (After a byte >= 0x80 it may not: U+00A0 is a space to the gpt2 regex.)
    const auto ascii_non_space = [](unsigned char c) { return c < 0x80 && !is_space(c); };
    while (p < len && !(text[p] == ' ' && ascii_non_space(static_cast<unsigned char>(text[p - 1])))) ++p;
    if (p >= len) break;
    cuts.push_back(p);
    last = p;
  }
  return cuts;
}

Tokenizer::Tokenizer() : Tokenizer(std::vector<Pair>{}) {}

Tokenizer::Tokenizer(std::vector<Pair> merges, Pretokenizer pretokenizer, std::vector<int32_t> ids)
    : merges_(std::move(merges)), pretokenizer_(pretokenizer), ids_(std::move(ids)) {
  vocab_.reserve(256 + merges_.size() + 1);
  for (int b = 0; b < 256; ++b) vocab_.emplace_back(1, static_cast<char>(b));
  for (size_t r = 0; r < merges_.size(); ++r) {
    const auto [a, b] = merges_[r];
    const int32_t limit = static_cast<int32_t>(256 + r);
    if (a < 0 || b < 0 || a >= limit || b >= limit) {
      throw std::invalid_argument("BPE merge " + std::to_string(r) + " (" + std::to_string(a) + ", " +
                                  std::to_string(b) + ") uses an id that does not exist yet (must be < " +
                                  std::to_string(limit) + ")");
    }
    vocab_.push_back(vocab_[a] + vocab_[b]);
  }
  vocab_.emplace_back(eot_text);
  if (!ids_.empty()) {
    const int32_t v = vocab_size();
    if (static_cast<int64_t>(ids_.size()) != v) {
      throw std::invalid_argument("tokenizer id map has " + std::to_string(ids_.size()) + " entries but the vocabulary " +
                                  std::to_string(v));
    }
    canonical_.assign(v, -1);
    for (int32_t c = 0; c < v; ++c) {
      const int32_t id = ids_[c];
      if (id < 0 || id >= v || canonical_[id] >= 0) {
        throw std::invalid_argument("tokenizer id map: id " + std::to_string(id) + " of token " + std::to_string(c) +
                                    " is outside 0.." + std::to_string(v - 1) + " or given twice");
      }
      canonical_[id] = c;
    }
    bool identity = true;
    for (int32_t c = 0; c < v && identity; ++c) identity = ids_[c] == c;
    if (identity) ids_.clear(), canonical_.clear();  // one representation of canonical ids
  }
  // Open addressing at load <= 1/2: a lookup is about one probe.
  size_t slots = 16;
  while (slots < 2 * merges_.size()) slots *= 2;
  rank_keys_.assign(slots, 0);
  rank_values_.assign(slots, -1);
  for (size_t r = 0; r < merges_.size(); ++r) {
    const uint64_t key = pair_key(merges_[r].first, merges_[r].second);
    size_t s = mix64(key) & (slots - 1);
    while (rank_values_[s] >= 0 && rank_keys_[s] != key) s = (s + 1) & (slots - 1);
    if (rank_values_[s] >= 0) {
      throw std::invalid_argument("BPE merge " + std::to_string(r) + " repeats merge " +
                                  std::to_string(rank_values_[s]));
    }
    rank_keys_[s] = key;
    rank_values_[s] = static_cast<int32_t>(r);
  }
}

int32_t Tokenizer::rank_of(int32_t a, int32_t b) const {
  const uint64_t key = pair_key(a, b);
  const size_t mask = rank_keys_.size() - 1;
  for (size_t s = mix64(key) & mask;; s = (s + 1) & mask) {
    if (rank_values_[s] < 0) return -1;
    if (rank_keys_[s] == key) return rank_values_[s];
  }
}

Tokenizer Tokenizer::train(std::string_view text, int vocab_size, const TrainOptions& options) {
  const int target = target_merges(vocab_size);
  WordCounts wc = count_words(text, options.pretokenizer, options.show_progress);
  auto& words = wc.words;
  const auto& freq = wc.freq;

  // Pair counts over all words, and for each pair the words that may hold it (a superset:
  // entries go stale as words change and are skipped by a rescan).
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& word = words[w];
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const uint64_t key = pair_key(word[i], word[i + 1]);
      counts[key] += freq[w];
      auto& list = where[key];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
    }
  }
  // Lazy invalidation: an entry is live only while its count equals the pair's count.
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, c] : counts) heap.push({c, key});

  std::vector<Pair> merges;
  merges.reserve(target);
  std::vector<int32_t> seen(words.size(), -1);  // merge step that last rewrote each word
  std::vector<std::pair<uint64_t, int64_t>> deltas;
  Progress progress("training tokenizer", target, "merges", options.show_progress);

  while (static_cast<int>(merges.size()) < target) {
    while (!heap.empty()) {
      const auto it = counts.find(heap.top().key);
      if (it != counts.end() && it->second == heap.top().count) break;
      heap.pop();
    }
    if (heap.empty()) break;
    const uint64_t best = heap.top().key;
    heap.pop();
    const int32_t a = key_first(best), b = key_second(best);
    const int32_t id = static_cast<int32_t>(256 + merges.size());
    const int32_t step = static_cast<int32_t>(merges.size());
    merges.emplace_back(a, b);

    // Rewrite each word holding (a, b); collect the pair-count changes as deltas:
    // -freq for every pair of the old word, +freq for every pair of the new one.
    deltas.clear();
    std::vector<int32_t> holders = std::move(where[best]);
    where.erase(best);
    for (const int32_t w : holders) {
      if (seen[w] == step) continue;
      seen[w] = step;
      auto& word = words[w];
      std::vector<int32_t> merged = merge_word(word, a, b, id);
      if (merged.size() == word.size()) continue;  // stale entry
      const int64_t f = freq[w];
      for (size_t i = 0; i + 1 < word.size(); ++i) deltas.emplace_back(pair_key(word[i], word[i + 1]), -f);
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        const uint64_t key = pair_key(merged[i], merged[i + 1]);
        deltas.emplace_back(key, f);
        // Only pairs with the new id are new to this word; the others are listed already.
        if (merged[i] == id || merged[i + 1] == id) {
          auto& list = where[key];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      word = std::move(merged);
    }
    std::sort(deltas.begin(), deltas.end());
    for (size_t i = 0; i < deltas.size();) {
      const uint64_t key = deltas[i].first;
      int64_t d = 0;
      for (; i < deltas.size() && deltas[i].first == key; ++i) d += deltas[i].second;
      if (d == 0) continue;
      int64_t& c = counts[key];
      c += d;
      if (c > 0) {
        heap.push({c, key});
      } else {
        counts.erase(key);
      }
    }
    counts.erase(best);  // every occurrence was merged
    progress.update(static_cast<double>(merges.size()));
  }
  progress.finish();
  return Tokenizer(std::move(merges), options.pretokenizer);
}

Tokenizer Tokenizer::train_naive(std::string_view text, int vocab_size, Pretokenizer pretokenizer) {
  const int target = target_merges(vocab_size);
  WordCounts wc = count_words(text, pretokenizer, false);
  std::vector<Pair> merges;
  for (int r = 0; r < target; ++r) {
    std::unordered_map<uint64_t, int64_t> counts;
    for (size_t w = 0; w < wc.words.size(); ++w) {
      const auto& word = wc.words[w];
      for (size_t i = 0; i + 1 < word.size(); ++i) counts[pair_key(word[i], word[i + 1])] += wc.freq[w];
    }
    if (counts.empty()) break;
    HeapEntry best{0, 0};
    bool any = false;
    for (const auto& [key, c] : counts) {
      const HeapEntry e{c, key};
      if (!any || best < e) best = e;
      any = true;
    }
    const int32_t a = key_first(best.key), b = key_second(best.key);
    for (auto& word : wc.words) word = merge_word(word, a, b, 256 + r);
    merges.emplace_back(a, b);
  }
  return Tokenizer(std::move(merges), pretokenizer);
}

// ---- encoding -----------------------------------------------------------------------------

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  // Merge the lowest-ranked adjacent pair first (leftmost on ties) until none is ranked.
  // A linked list and a min-heap of (rank, position) keep this O(n log n) on long pieces
  // (a run of 10,000 dashes), where rescanning would be quadratic. Merges create only
  // pairs of higher rank, so ranks pop in order and the result is the training one.
  const int n = static_cast<int>(piece.size());
  if (n == 0) return;
  thread_local std::vector<int32_t> ids, next, prev;
  thread_local std::vector<uint64_t> heap;
  ids.resize(n);
  next.resize(n);
  prev.resize(n);
  heap.clear();
  const auto push = [&](int32_t rank, int pos) {
    heap.push_back((static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos));
    std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
  };
  for (int i = 0; i < n; ++i) {
    ids[i] = static_cast<unsigned char>(piece[i]);
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  for (int i = 0; i + 1 < n; ++i) {
    const int32_t r = rank_of(ids[i], ids[i + 1]);
    if (r >= 0) push(r, i);
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const int32_t r = static_cast<int32_t>(top >> 32);
    const int i = static_cast<int>(top & 0xffffffffu);
    const int j = next[i];
    if (ids[i] < 0 || j < 0 || rank_of(ids[i], ids[j]) != r) continue;  // stale
    ids[i] = 256 + r;
    ids[j] = -1;  // removed
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) {
      const int32_t rl = rank_of(ids[prev[i]], ids[i]);
      if (rl >= 0) push(rl, prev[i]);
    }
    if (next[i] >= 0) {
      const int32_t rr = rank_of(ids[i], ids[next[i]]);
      if (rr >= 0) push(rr, i);
    }
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(id_of(ids[i]));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  const int nt = text.size() >= parallel_min_bytes ? num_threads() : 1;
  const auto chunks = split_chunks(text, nt * 4);
  std::vector<std::vector<int32_t>> parts(chunks.size());
#pragma omp parallel num_threads(nt)
  {
    // Per-thread cache of pre-token -> ids: natural text repeats few distinct words.
    std::unordered_map<std::string_view, std::vector<int32_t>> cache;
#pragma omp for schedule(dynamic, 1)
    for (long c = 0; c < static_cast<long>(chunks.size()); ++c) {
      auto& out = parts[c];
      out.reserve(chunks[c].size() / 3);
      for_each_segment(chunks[c], allow_special, [&](std::string_view seg, bool special) {
        if (special) {
          out.push_back(eot_id());
          return;
        }
        for_each_piece(seg, pretokenizer_, [&](std::string_view p) {
          if (p.size() > cache_max_piece) {
            encode_piece(p, out);
            return;
          }
          auto it = cache.find(p);
          if (it == cache.end()) {
            std::vector<int32_t> ids;
            encode_piece(p, ids);
            it = cache.emplace(p, std::move(ids)).first;
          }
          out.insert(out.end(), it->second.begin(), it->second.end());
        });
      });
    }
  }
  if (parts.size() == 1) return std::move(parts[0]);
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<int32_t> out;
  out.reserve(total);
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  out.reserve(n * 4);
  const int32_t v = vocab_size();
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= v) {
      throw std::out_of_range("cannot decode token " + std::to_string(ids[i]) + " at position " +
                              std::to_string(i) + ": the tokenizer's vocabulary has " +
                              std::to_string(v) + " ids (0.." + std::to_string(v - 1) +
                              "); were these tokens made by another tokenizer?");
    }
    out += vocab_[canonical_of(ids[i])];
  }
  return out;
}

// ---- identity and files -------------------------------------------------------------------

uint64_t Tokenizer::hash() const {
  // Identity is the merges and the special token only, not the file format: a new file
  // version that stores the same tokenizer keeps its hash.
  uint64_t h = fnv1a64(hash_tag, std::strlen(hash_tag));
  for (const auto& [a, b] : merges_) {
    const uint32_t ab[2] = {static_cast<uint32_t>(a), static_cast<uint32_t>(b)};
    h = fnv1a64(ab, sizeof ab, h);  // little-endian hosts only, as the token files
  }
  const uint32_t eot = static_cast<uint32_t>(256 + num_merges());
  h = fnv1a64(eot_text.data(), eot_text.size(), h);
  h = fnv1a64(&eot, sizeof eot, h);
  // Version 1's tokenizers end here (their hashes are in checkpoints and token files).
  if (pretokenizer_ != Pretokenizer::gpumix_v1) {
    const std::string tag = std::string("pretokenizer ") + pretokenizer_name(pretokenizer_);
    h = fnv1a64(tag.data(), tag.size(), h);
  }
  if (!ids_.empty()) h = fnv1a64(ids_.data(), ids_.size() * sizeof ids_[0], h);
  return h;
}

// Format (text, one item per line), version 2:
//   gpumix-bpe-tokenizer 2
//   vocab_size <V>                  256 + merges + 1
//   merges <M>
//   special <|endoftext|> <id>      eot_id()
//   pretokenizer <gpt2|gpumix-v1>
//   ids <canonical|mapped>
//   hash <16 hex digits>            Tokenizer::hash(), checked on load
//   <a> <b>                         M lines: merge r creates canonical id 256 + r from a and b
//   <id>                            with `ids mapped`, V lines: the id of canonical id 0, 1, ...
// Version 1 (still written for a gpumix-v1 tokenizer with canonical ids, byte for byte as
// before) has no pretokenizer and ids lines: gpumix-v1, canonical, special id V - 1.
void Tokenizer::save(const std::string& path) const {
  const bool v1 = pretokenizer_ == Pretokenizer::gpumix_v1 && ids_.empty();
  std::string s;
  char line[96];
  std::snprintf(line, sizeof line, "%s %d\n", format_magic, v1 ? format_version_v1 : format_version);
  s += line;
  s += "vocab_size " + std::to_string(vocab_size()) + "\n";
  s += "merges " + std::to_string(num_merges()) + "\n";
  s += "special " + std::string(eot_text) + " " + std::to_string(eot_id()) + "\n";
  if (!v1) {
    s += std::string("pretokenizer ") + pretokenizer_name(pretokenizer_) + "\n";
    s += ids_.empty() ? "ids canonical\n" : "ids mapped\n";
  }
  std::snprintf(line, sizeof line, "hash %016" PRIx64 "\n", hash());
  s += line;
  for (const auto& [a, b] : merges_) {
    std::snprintf(line, sizeof line, "%d %d\n", a, b);
    s += line;
  }
  for (const int32_t id : ids_) s += std::to_string(id) + "\n";
  write_file_atomic(path, s);
}

Tokenizer Tokenizer::load(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    const std::filesystem::path dir(path);
    for (const char* file : {"vocab.json", "merges.txt"}) {
      if (!std::filesystem::is_regular_file(dir / file)) {
        throw std::runtime_error("tokenizer folder '" + path + "' has no " + file +
                                 ": a folder given as a tokenizer holds GPT-2's vocab.json and merges.txt");
      }
    }
    return load_gpt2((dir / "vocab.json").string(), (dir / "merges.txt").string());
  }
  const std::string text = read_file(path);
  std::istringstream in(text);
  int line_no = 0;
  const auto fail = [&](const std::string& problem) -> std::runtime_error {
    return std::runtime_error("tokenizer file '" + path + "', line " + std::to_string(line_no) + ": " +
                              problem + " — make it again with `gpumix tokenizer train`");
  };
  std::string line;
  const auto next_line = [&](const char* what) -> std::istringstream {
    if (!std::getline(in, line)) {
      throw fail(std::string("the file ends early, expected ") + what);
    }
    ++line_no;
    return std::istringstream(line);
  };
  int version = 0;
  {
    auto ls = next_line("the header");
    std::string magic;
    ls >> magic >> version;
    if (magic != format_magic) {
      throw fail("not a GPUMix tokenizer (first line should start with '" + std::string(format_magic) + "')");
    }
    if (version != format_version_v1 && version != format_version) {
      throw fail("unsupported format version " + std::to_string(version) + " (this build reads versions " +
                 std::to_string(format_version_v1) + " and " + std::to_string(format_version) + ")");
    }
  }
  const auto read_field = [&](const char* name) -> int64_t {
    auto ls = next_line(name);
    std::string key;
    int64_t value = -1;
    if (!(ls >> key >> value) || key != name) throw fail(std::string("expected '") + name + " <number>'");
    return value;
  };
  const auto read_word = [&](const char* name, std::initializer_list<const char*> allowed) -> std::string {
    auto ls = next_line(name);
    std::string key, value, list;
    ls >> key >> value;
    for (const char* a : allowed) {
      if (key == name && value == a) return value;
      list += std::string(list.empty() ? "" : " or ") + a;
    }
    throw fail(std::string("expected '") + name + " <" + list + ">'");
  };
  const int64_t vocab = read_field("vocab_size");
  const int64_t m = read_field("merges");
  // Ids are int32: bound m before any arithmetic on it (256 + m + 1 could overflow) and
  // before reserving room for m merges taken from the file.
  if (m < 0 || m > INT32_MAX - 257 || vocab != 256 + m + 1) {
    throw fail("vocab_size " + std::to_string(vocab) + " does not equal 256 + merges (" + std::to_string(m) + ") + 1");
  }
  int64_t special_id = -1;
  const int special_line = line_no + 1;
  {
    auto ls = next_line("the special token");
    std::string key, tok;
    if (!(ls >> key >> tok >> special_id) || key != "special" || tok != eot_text || special_id < 0 ||
        special_id >= vocab || (version == format_version_v1 && special_id != vocab - 1)) {
      throw fail("expected 'special " + std::string(eot_text) + " " +
                 (version == format_version_v1 ? std::to_string(vocab - 1) : "<id below " + std::to_string(vocab) + ">") +
                 "'");
    }
  }
  Pretokenizer kind = Pretokenizer::gpumix_v1;
  bool mapped = false;
  if (version == format_version) {
    kind = read_word("pretokenizer", {"gpt2", "gpumix-v1"}) == "gpt2" ? Pretokenizer::gpt2 : Pretokenizer::gpumix_v1;
    mapped = read_word("ids", {"canonical", "mapped"}) == "mapped";
  }
  uint64_t stored_hash = 0;
  {
    auto ls = next_line("the hash");
    std::string key, hex;
    if (!(ls >> key >> hex) || key != "hash" || hex.size() != 16 ||
        hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
      throw fail("expected 'hash <16 hex digits>'");
    }
    stored_hash = std::stoull(hex, nullptr, 16);
  }
  std::vector<Pair> merges;
  merges.reserve(m);
  for (int64_t r = 0; r < m; ++r) {
    auto ls = next_line("a merge line");
    int64_t a = -1, b = -1;
    if (!(ls >> a >> b)) throw fail("expected a merge '<a> <b>'");
    if (a < 0 || b < 0 || a >= 256 + r || b >= 256 + r) {
      throw fail("merge " + std::to_string(r) + " uses id " + std::to_string(std::max(a, b)) +
                 ", which does not exist before it (ids must be < " + std::to_string(256 + r) + ")");
    }
    merges.emplace_back(static_cast<int32_t>(a), static_cast<int32_t>(b));
  }
  std::vector<int32_t> ids;
  if (mapped) {
    std::vector<bool> taken(vocab, false);
    ids.reserve(vocab);
    for (int64_t c = 0; c < vocab; ++c) {
      auto ls = next_line("an id line");
      int64_t id = -1;
      if (!(ls >> id) || id < 0 || id >= vocab || taken[id]) {
        throw fail("expected the id of token " + std::to_string(c) + ": a number below " + std::to_string(vocab) +
                   " not given before");
      }
      taken[id] = true;
      ids.push_back(static_cast<int32_t>(id));
    }
  }
  Tokenizer tok(std::move(merges), kind, std::move(ids));
  if (tok.eot_id() != special_id) {
    line_no = special_line;
    throw fail("the special token's id " + std::to_string(special_id) + " is not the id map's " +
               std::to_string(tok.eot_id()));
  }
  if (tok.hash() != stored_hash) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "content hash %016" PRIx64 " does not match the stored %016" PRIx64
                  " (the file was edited or damaged)", tok.hash(), stored_hash);
    throw fail(buf);
  }
  return tok;
}

}  // namespace gpumix::data
