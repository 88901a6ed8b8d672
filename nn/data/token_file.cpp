#include "nn/data/token_file.h"

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

}  // namespace

int64_t find_token_outside(TokenView t, uint64_t vocab_size) {
  int64_t bad = -1;
  t.for_each_run([&](size_t first, const TokenView& run) {
    for (size_t i = 0; i < run.size() && bad < 0; ++i)
      if (run[i] < 0 || static_cast<uint64_t>(run[i]) >= vocab_size) bad = static_cast<int64_t>(first + i);
  });
  return bad;
}

TokenView TokenView::concat(const std::vector<TokenView>& parts) {
  auto runs = std::make_shared<std::vector<Run>>();
  size_t total = 0;
  int width = 2;
  for (const TokenView& part : parts) {
    part.for_each_run([&](size_t, const TokenView& run) {
      runs->push_back({total, run.data_, run.size_, run.width_});
      total += run.size();
      width = std::max(width, run.width());
    });
  }
  if (runs->empty()) return TokenView();
  if (runs->size() == 1) return runs->front().view();
  TokenView v;
  v.size_ = total;
  v.width_ = width;
  v.runs_ = std::move(runs);
  return v;
}

const TokenView::Run& TokenView::run_of(size_t position) const {
  const std::vector<Run>& runs = *runs_;
  const auto after = std::upper_bound(runs.begin(), runs.end(), position,
                                      [](size_t p, const Run& r) { return p < r.start; });
  return *(after - 1);
}

void TokenView::copy_runs(size_t begin, size_t n, int32_t* out) const {
  slice(begin, begin + n).for_each_run([&](size_t first, const TokenView& run) {
    run.copy_to(0, run.size(), out + first);
  });
}

TokenView TokenView::slice(size_t begin, size_t end) const {
  if (!runs_) return TokenView(static_cast<const char*>(data_) + begin * width_, end - begin, width_);
  if (end == begin) return TokenView();
  const Run& first = run_of(offset_ + begin);
  if (offset_ + end <= first.start + first.size)
    return first.view().slice(offset_ + begin - first.start, offset_ + end - first.start);
  TokenView v = *this;
  v.offset_ = offset_ + begin;
  v.size_ = end - begin;
  return v;
}

void write_token_file(const std::string& path, TokenView tokens, uint64_t vocab_size,
                      uint64_t tokenizer_hash) {
  if (tokens.empty()) {
    throw std::invalid_argument("cannot write token file '" + path + "': there are no tokens (is the corpus empty?)");
  }
  if (vocab_size == 0 || vocab_size > (uint64_t{1} << 31)) {
    throw std::invalid_argument("cannot write token file '" + path + "': vocabulary size " +
                                std::to_string(vocab_size) + " is not in [1, 2^31]");
  }
  const int64_t bad = find_token_outside(tokens, vocab_size);
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

TokenFile::TokenFile(const std::string& path) : path_(path), map_(path, "token file") {
  const size_t bytes = map_.size();
  if (bytes < sizeof(Header)) {
    throw bad_file(path, bytes == 0 ? std::string("the file is empty")
                                    : "the file has " + std::to_string(bytes) +
                                          " bytes, less than the 64-byte header");
  }
  Header h;
  std::memcpy(&h, map_.data(), sizeof h);
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
  view_ = TokenView(map_.data() + sizeof h, h.count, static_cast<int>(h.width));
  vocab_size_ = h.vocab_size;
  tokenizer_hash_ = h.tokenizer_hash;
  const int64_t bad = find_token_outside(view_, vocab_size_);
  if (bad >= 0) {
    throw bad_file(path, "token " + std::to_string(view_[bad]) + " at position " + std::to_string(bad) +
                             " is not below the vocabulary size " + std::to_string(vocab_size_));
  }
}

}  // namespace gpumix::data
