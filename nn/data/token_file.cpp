#include "nn/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>

#include "nn/data/file_util.h"

namespace gpumix::data {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian");

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t width;
  uint64_t vocab_size;
  uint64_t count;
  uint64_t tokenizer_hash;
  char reserved[24];
};
static_assert(sizeof(Header) == token_file_header_bytes, "token file header is 64 bytes");

const char* const fix_hint = " — make it again with `gpumix tokenizer encode`";

std::runtime_error bad_file(const std::string& path, const std::string& problem) {
  return std::runtime_error("token file '" + path + "': " + problem + fix_hint);
}

// The first token >= vocab_size, or -1.
long find_out_of_range(TokenView t, uint64_t vocab_size) {
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] < 0 || static_cast<uint64_t>(t[i]) >= vocab_size) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace

void write_token_file(const std::string& path, TokenView tokens, uint64_t vocab_size,
                      uint64_t tokenizer_hash) {
  if (tokens.empty()) {
    throw std::invalid_argument("cannot write token file '" + path + "': there are no tokens (is the corpus empty?)");
  }
  if (vocab_size == 0 || vocab_size > (uint64_t{1} << 31)) {
    throw std::invalid_argument("cannot write token file '" + path + "': vocabulary size " +
                                std::to_string(vocab_size) + " is not in [1, 2^31]");
  }
  const long bad = find_out_of_range(tokens, vocab_size);
  if (bad >= 0) {
    throw std::invalid_argument("cannot write token file '" + path + "': token " + std::to_string(tokens[bad]) +
                                " at position " + std::to_string(bad) + " is outside the vocabulary of " +
                                std::to_string(vocab_size));
  }
  const uint32_t width = vocab_size <= 65536 ? 2 : 4;
  Header h{};
  std::memcpy(h.magic, token_file_magic, sizeof h.magic);
  h.version = token_file_version;
  h.width = width;
  h.vocab_size = vocab_size;
  h.count = tokens.size();
  h.tokenizer_hash = tokenizer_hash;
  std::string bytes(sizeof h + tokens.size() * width, '\0');
  std::memcpy(&bytes[0], &h, sizeof h);
  char* body = &bytes[sizeof h];
  if (width == 2) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const uint16_t v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(body + 2 * i, &v, 2);
    }
  } else {
    tokens.copy_to(0, tokens.size(), reinterpret_cast<int32_t*>(body));
  }
  write_file_atomic(path, bytes);
}

bool is_token_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[8] = {};
  const bool ok = std::fread(magic, 1, 8, f) == 8 && std::memcmp(magic, token_file_magic, 8) == 0;
  std::fclose(f);
  return ok;
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    throw std::runtime_error("cannot open token file '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot stat token file '" + path + "': " + err);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < sizeof(Header)) {
    ::close(fd);
    throw bad_file(path, bytes == 0 ? std::string("the file is empty")
                                    : "the file has " + std::to_string(bytes) +
                                          " bytes, less than the 64-byte header");
  }
  map_ = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("cannot memory-map token file '" + path + "': " + std::strerror(errno));
  }
  map_bytes_ = bytes;
  try {
    Header h;
    std::memcpy(&h, map_, sizeof h);
    if (std::memcmp(h.magic, token_file_magic, sizeof h.magic) != 0) {
      throw bad_file(path, "wrong magic: not a GPUMix token file (a text corpus? pass it to "
                           "`gpumix tokenizer encode` first)");
    }
    if (h.version != token_file_version) {
      throw bad_file(path, "unsupported version " + std::to_string(h.version) + " (this build reads version " +
                               std::to_string(token_file_version) + ")");
    }
    if (h.width != 2 && h.width != 4) {
      throw bad_file(path, "token width " + std::to_string(h.width) + " bytes is not 2 or 4");
    }
    if (h.vocab_size == 0 || (h.width == 2 && h.vocab_size > 65536)) {
      throw bad_file(path, "vocabulary size " + std::to_string(h.vocab_size) + " does not fit " +
                               std::to_string(h.width) + "-byte tokens");
    }
    if (h.count == 0) throw bad_file(path, "it holds no tokens (was the corpus empty?)");
    const uint64_t body = bytes - sizeof h;
    if (h.count > body / h.width || body != h.count * h.width) {
      const uint64_t have = body / h.width;
      throw bad_file(path, "the header promises " + std::to_string(h.count) + " tokens of " +
                               std::to_string(h.width) + " bytes (" + std::to_string(sizeof h + h.count * h.width) +
                               " bytes in all) but the file has " + std::to_string(bytes) + " bytes (" +
                               std::to_string(have) + (have < h.count ? " tokens: truncated)" : " tokens: trailing bytes)"));
    }
    view_ = TokenView(static_cast<const char*>(map_) + sizeof h, h.count, static_cast<int>(h.width));
    vocab_size_ = h.vocab_size;
    tokenizer_hash_ = h.tokenizer_hash;
    const long bad = find_out_of_range(view_, vocab_size_);
    if (bad >= 0) {
      throw bad_file(path, "token " + std::to_string(view_[bad]) + " at position " + std::to_string(bad) +
                               " is not below the vocabulary size " + std::to_string(vocab_size_));
    }
  } catch (...) {
    release();
    throw;
  }
}

TokenFile::~TokenFile() { release(); }

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = other.map_;
    map_bytes_ = other.map_bytes_;
    vocab_size_ = other.vocab_size_;
    tokenizer_hash_ = other.tokenizer_hash_;
    view_ = other.view_;
    other.map_ = nullptr;
    other.map_bytes_ = 0;
    other.view_ = TokenView();
  }
  return *this;
}

void TokenFile::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  view_ = TokenView();
}

}  // namespace gpumix::data
