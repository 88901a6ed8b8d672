// Small file helpers shared by the data layer: whole-file reads and atomic writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpumix::data {

// The whole file, as bytes. Throws std::runtime_error naming the file and the OS error.
std::string read_file(const std::string& path);

// Whether `s` ends with `suffix` (a file name's ".gz", ".jsonl", ".tok").
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A whole file memory-mapped read-only (an empty file maps to no bytes). Throws
// std::runtime_error naming `what` ("token file", "llm.c shard"), the path and the OS error.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return static_cast<const char*>(map_); }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

// A file written piece by piece to "<path>.tmp.<pid>", flushed to disk and renamed over
// `path` by commit(): a crash or an error mid-write leaves either the old file or the new
// one, never a half-written one (the destructor removes an uncommitted temporary).
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::string& path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  void write(const void* data, size_t size);  // throws std::runtime_error naming the file
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// The whole file through an AtomicWriter.
void write_file_atomic(const std::string& path, const void* data, size_t size);
inline void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

// 1234567 -> "1,234,567", for messages and the settings table.
std::string with_commas(int64_t n);

// FNV-1a, 64 bits: a stable content hash (tokenizer identity), not a cryptographic one.
inline uint64_t fnv1a64(const void* data, size_t size, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace gpumix::data
