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

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gpumix::data {

inline constexpr char token_file_magic[8] = {'G', 'P', 'M', 'X', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t token_file_version = 1;
inline constexpr size_t token_file_header_bytes = 64;

// A read-only view of tokens stored 2 or 4 bytes wide, read as int32. Cheap to copy; does
// not own the memory (a TokenFile or a std::vector<int32_t> must outlive it).
class TokenView {
 public:
  TokenView() = default;
  TokenView(const int32_t* data, size_t size) : data_(data), size_(size), width_(4) {}
  explicit TokenView(const std::vector<int32_t>& v) : TokenView(v.data(), v.size()) {}
  TokenView(const void* data, size_t size, int width) : data_(data), size_(size), width_(width) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int width() const { return width_; }
  int32_t operator[](size_t i) const {
    if (width_ == 2) return static_cast<const uint16_t*>(data_)[i];
    return static_cast<const int32_t*>(data_)[i];
  }
  // Copies tokens [begin, begin + n) to out as int32: the fast path for batches.
  void copy_to(size_t begin, size_t n, int32_t* out) const {
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
  // Tokens [begin, end).
  TokenView slice(size_t begin, size_t end) const {
    return TokenView(static_cast<const char*>(data_) + begin * width_, end - begin, width_);
  }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  int width_ = 4;
};

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
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  TokenView tokens() const { return view_; }
  size_t size() const { return view_.size(); }
  uint64_t vocab_size() const { return vocab_size_; }
  uint64_t tokenizer_hash() const { return tokenizer_hash_; }
  int width() const { return view_.width(); }
  const std::string& path() const { return path_; }

 private:
  void release();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint64_t vocab_size_ = 0;
  uint64_t tokenizer_hash_ = 0;
  TokenView view_;
};

}  // namespace gpumix::data
