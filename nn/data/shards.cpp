#include "nn/data/shards.h"

#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "nn/data/llmc_format.h"

namespace gpumix::data {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i)
      if (fs::is_regular_file(g.gl_pathv[i])) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;  // glob sorts its matches by name
}

// The token width of an llm.c shard's header, 0 when the bytes do not start as one.
int llmc_width(const char* bytes, size_t size) {
  if (size < 8) return 0;
  int32_t magic, version;
  std::memcpy(&magic, bytes, 4);
  std::memcpy(&version, bytes + 4, 4);
  return llmc::token_width(magic, version);
}

// An llm.c shard's tokens, after checking its header against its size.
TokenView llmc_tokens(const std::string& path, const MappedFile& map) {
  const int width = llmc_width(map.data(), map.size());
  const auto bad = [&](const std::string& problem) {
    return std::runtime_error("llm.c shard '" + path + "': " + problem +
                              " — write it again with llm.c's dev/data scripts or `gpumix tokenizer encode`");
  };
  if (map.size() < (size_t)llmc::header_bytes)
    throw bad("the file has " + std::to_string(map.size()) + " bytes, less than the " +
              std::to_string(llmc::header_bytes) + "-byte header");
  int32_t count;
  std::memcpy(&count, map.data() + 8, 4);
  if (count <= 0) throw bad("the header's token count is " + std::to_string(count));
  const uint64_t body = map.size() - llmc::header_bytes;
  if (body != (uint64_t)count * width) {
    const uint64_t have = body / width;
    throw bad("the header promises " + with_commas(count) + " tokens of " + std::to_string(width) + " bytes but the file holds " +
              with_commas((int64_t)body) + " bytes after the header (" + with_commas((int64_t)have) +
              (have < (uint64_t)count ? " tokens: truncated)" : " tokens: trailing bytes)"));
  }
  return TokenView(map.data() + llmc::header_bytes, (size_t)count, width);
}

}  // namespace

std::vector<std::string> data_files(const std::string& spec, const std::string& flag) {
  std::vector<std::string> files;
  if (fs::is_directory(spec)) {
    for (const auto& e : fs::directory_iterator(spec))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw std::invalid_argument(flag + " " + spec + ": the folder holds no files; pass a folder of shards or text files");
    return files;
  }
  if (fs::exists(spec)) return {spec};
  if (spec.find_first_of("*?[") != std::string::npos) {
    files = glob_files(spec);
    if (files.empty())
      throw std::invalid_argument(flag + " '" + spec + "' matches no file; check the pattern (quote it so that the "
                                  "shell does not expand it)");
    return files;
  }
  throw std::invalid_argument(flag + " '" + spec + "' does not exist; pass a file, a folder or a glob ('data/*_train_*.bin')");
}

void write_llmc_shard(const std::string& path, TokenView tokens, int width) {
  if (width != 2 && width != 4) throw std::invalid_argument("llm.c shard '" + path + "': width " + std::to_string(width) + " is not 2 or 4");
  if (tokens.empty() || (int64_t)tokens.size() > llmc::max_tokens)
    throw std::invalid_argument("llm.c shard '" + path + "': " + with_commas((int64_t)tokens.size()) +
                                " tokens; a shard holds 1 to 2,147,483,647");
  const int64_t bad = find_token_outside(tokens, width == 2 ? 65536 : (uint64_t{1} << 31));
  if (bad >= 0)
    throw std::invalid_argument("llm.c shard '" + path + "': token " + std::to_string(tokens[bad]) + " at offset " +
                                with_commas(bad) + " does not fit " + std::to_string(width) + " bytes");
  int32_t header[llmc::header_ints] = {};
  header[0] = width == 2 ? llmc::magic_u16 : llmc::magic_u32;
  header[1] = width == 2 ? llmc::version_u16 : llmc::version_u32;
  header[2] = (int32_t)tokens.size();
  AtomicWriter out(path);
  out.write(header, sizeof header);
  std::vector<char> chunk;
  tokens.for_each_run([&](size_t, const TokenView& run) {
    for (size_t begin = 0; begin < run.size(); begin += 1 << 16) {
      const size_t n = std::min(run.size() - begin, size_t{1} << 16);
      chunk.resize(n * width);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t v = (uint32_t)run[begin + i];
        std::memcpy(chunk.data() + i * width, &v, width);  // little-endian: the low bytes first
      }
      out.write(chunk.data(), chunk.size());
    }
  });
  out.commit();
}

bool has_token_header(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char head[8] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  return (n == 8 && std::memcmp(head, token_file_magic, 8) == 0) || llmc_width(head, n) != 0;
}

TokenShards::TokenShards(const std::string& spec, bool headerless, int64_t vocab, const std::string& flag)
    : vocab_(vocab) {
  std::vector<TokenView> parts;
  for (const std::string& path : data_files(spec, flag)) {
    File f;
    f.path = path;
    if (!headerless && is_token_file(path)) {
      f.kind = "token file";
      f.own.emplace(path);
      f.tokens = f.own->tokens();
      const int64_t own_vocab = (int64_t)f.own->vocab_size();
      if (vocab == 0) {
        if (vocab_ != 0 && vocab_ != own_vocab)
          throw std::invalid_argument(flag + ": token file '" + path + "' has vocabulary " + std::to_string(own_vocab) +
                                      " but '" + files_.front().path + "' has " + std::to_string(vocab_) +
                                      "; pass token files of one tokenizer");
        vocab_ = own_vocab;
      }
      const uint64_t hash = f.own->tokenizer_hash();
      if (hash != 0 && tokenizer_hash_ != 0 && hash != tokenizer_hash_)
        throw std::invalid_argument(flag + ": token file '" + path + "' was encoded by another tokenizer than '" +
                                    files_.front().path + "' (their tokenizer hashes differ); pass files of one tokenizer");
      if (hash != 0) tokenizer_hash_ = hash;
    } else {
      f.map = MappedFile(path, headerless ? "nanoGPT .bin" : "token shard");
      if (headerless) {
        f.kind = "nanoGPT .bin";
        if (f.map.size() == 0 || f.map.size() % 2 != 0)
          throw std::invalid_argument(flag + " '" + path + "' (--format nanogpt: uint16 tokens) has " +
                                      std::to_string(f.map.size()) + " bytes, " +
                                      (f.map.size() == 0 ? "no tokens" : "not a whole number of tokens") +
                                      "; pass nanoGPT's train.bin / val.bin as its prepare.py wrote them");
        f.tokens = TokenView(f.map.data(), f.map.size() / 2, 2);
      } else if (llmc_width(f.map.data(), f.map.size()) != 0) {
        f.kind = "llm.c shard";
        f.tokens = llmc_tokens(path, f.map);
      } else {
        throw std::invalid_argument(flag + ": '" + path + "' is not token data: it starts with neither GPUMix's "
                                    "token-file magic nor an llm.c shard header (magic 20240520 or 20240801); "
                                    "pass --format nanogpt for nanoGPT's headerless .bin files, or text files alone");
      }
      if (vocab == 0)
        throw std::invalid_argument(flag + ": " + f.kind + " '" + path + "' does not say its vocabulary; pass --vocab-size");
    }
    const int64_t bad = find_token_outside(f.tokens, (uint64_t)vocab_);
    if (bad >= 0)
      throw std::invalid_argument(flag + ": " + f.kind + " '" + path + "' holds token " + std::to_string(f.tokens[bad]) +
                                  " at offset " + with_commas(bad) + " (tokens from its start), not below the model's "
                                  "vocabulary of " + std::to_string(vocab_) +
                                  "; pass the vocabulary it was encoded with (--vocab-size, 50257 for GPT-2's)");
    parts.push_back(f.tokens);
    files_.push_back(std::move(f));
  }
  tokens_ = TokenView::concat(parts);
}

std::vector<std::string> TokenShards::paths() const {
  std::vector<std::string> out;
  for (const File& f : files_) out.push_back(f.path);
  return out;
}

std::string TokenShards::describe() const {
  const File& f = files_.front();
  bool one_kind = true, narrow = false, wide = false;
  for (const File& g : files_) {
    one_kind = one_kind && g.kind == f.kind;
    (g.tokens.width() == 2 ? narrow : wide) = true;
  }
  const std::string widths = narrow && wide ? " (uint16 and uint32)" : narrow ? " (uint16)" : " (uint32)";
  if (files_.size() == 1) return f.kind + widths;
  const std::string kinds = !one_kind ? "token files of several formats"
                            : f.kind == "nanoGPT .bin" ? "nanoGPT .bin files" : f.kind + "s";
  return std::to_string(files_.size()) + " " + kinds + widths;
}

}  // namespace gpumix::data
