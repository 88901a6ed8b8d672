// Token files: a 64-byte header, then the tokens, memory-mapped on read.
//
// Layout, version 1 (all integers little-endian):
//   offset  size  field
//        0     8  magic "GPMXTOK\0"
//        8     4  version (1)
//       12     4  token width in bytes: 2 (vocabulary <= 65536) or 4
//       16     8  vocabulary size: every token is < this
//       24     8  token count N (> 0)
//       32     8  tokenizer hash (Tokenizer::hash(); 0 when unknown)
//       40    24  reserved, zero
//       64 N*width tokens
// The file size must be exactly 64 + N * width.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nn/data/file_util.h"

namespace gpumix::data {

inline constexpr char token_file_magic[8] = {'G', 'P', 'M', 'X', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t token_file_version = 1;
inline constexpr size_t token_file_header_bytes = 64;

// A read-only view of tokens stored 2 or 4 bytes wide, read as int32: one run of memory,
// or several runs read one after the other as one sequence (the shards of a dataset,
// nn/data/shards.h; windows may cross from one into the next). Cheap to copy; does not own
// the tokens (a TokenFile, TokenShards or std::vector<int32_t> must outlive it).
class TokenView {
 public:
  TokenView() = default;
  TokenView(const int32_t* data, size_t size) : data_(data), size_(size), width_(4) {}
  explicit TokenView(const std::vector<int32_t>& v) : TokenView(v.data(), v.size()) {}
  TokenView(const void* data, size_t size, int width) : data_(data), size_(size), width_(width) {}
  // The parts one after the other (empty parts are dropped).
  static TokenView concat(const std::vector<TokenView>& parts);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The bytes per token (of the widest part).
  int width() const { return width_; }
  int32_t operator[](size_t i) const {
    if (!runs_) return width_ == 2 ? static_cast<const uint16_t*>(data_)[i] : static_cast<const int32_t*>(data_)[i];
    const Run& run = run_of(offset_ + i);
    return run.view()[offset_ + i - run.start];
  }
  // Copies tokens [begin, begin + n) to out as int32: the fast path for batches.
  void copy_to(size_t begin, size_t n, int32_t* out) const {
    if (n == 0) return;  // out may be null (an empty vector's data())
    if (runs_) return copy_runs(begin, n, out);
    if (width_ == 2) {
      const uint16_t* p = static_cast<const uint16_t*>(data_) + begin;
      for (size_t i = 0; i < n; ++i) out[i] = p[i];
    } else {
      std::memcpy(out, static_cast<const int32_t*>(data_) + begin, n * sizeof(int32_t));
    }
  }
  std::vector<int32_t> to_vector() const {
    std::vector<int32_t> v(size_);
    copy_to(0, size_, v.data());
    return v;
  }
  // Tokens [begin, end): one run of memory again when they lie in one.
  TokenView slice(size_t begin, size_t end) const;
  // Calls f(first, run) for each run of memory in order, `first` its tokens' position in
  // this view: scans over every token without a lookup per token.
  template <class F>
  void for_each_run(F&& f) const {
    if (!runs_) {
      if (size_ > 0) f(size_t{0}, *this);
      return;
    }
    for (size_t done = 0; done < size_;) {
      const Run& run = run_of(offset_ + done);
      const size_t from = offset_ + done - run.start;
      const size_t n = std::min(run.size - from, size_ - done);
      f(done, run.view().slice(from, from + n));
      done += n;
    }
  }

 private:
  struct Run {
    size_t start;  // position of its first token in the concatenation
    const void* data;
    size_t size;
    int width;
    TokenView view() const;
  };
  const Run& run_of(size_t position) const;  // the run holding token `position` of the concatenation
  void copy_runs(size_t begin, size_t n, int32_t* out) const;

  const void* data_ = nullptr;  // one run
  size_t size_ = 0;
  int width_ = 4;
  std::shared_ptr<const std::vector<Run>> runs_;  // several runs (data_ unused)
  size_t offset_ = 0;                             // this view's first token in the concatenation
};

inline TokenView TokenView::Run::view() const { return TokenView(data, size, width); }

// The position of the first token outside [0, vocab_size), or -1.
int64_t find_token_outside(TokenView tokens, uint64_t vocab_size);

// Writes tokens atomically (temp name + rename). Throws when tokens is empty or holds an
// id outside [0, vocab_size).
void write_token_file(const std::string& path, TokenView tokens, uint64_t vocab_size,
                      uint64_t tokenizer_hash = 0);

// True when the file starts with the token-file magic (text corpora do not).
bool is_token_file(const std::string& path);

// A memory-mapped token file, validated on open: magic, version, width, exact size, and
// every token < vocabulary size. Errors name the file, the numbers and the fix.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);

  TokenView tokens() const { return view_; }
  size_t size() const { return view_.size(); }
  uint64_t vocab_size() const { return vocab_size_; }
  uint64_t tokenizer_hash() const { return tokenizer_hash_; }
  int width() const { return view_.width(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  MappedFile map_;
  uint64_t vocab_size_ = 0;
  uint64_t tokenizer_hash_ = 0;
  TokenView view_;
};

}  // namespace gpumix::data
