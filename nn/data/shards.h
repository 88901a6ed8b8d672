// Token data as people prepare it: llm.c's shards (nn/data/llmc_format.h), nanoGPT's
// headerless uint16 train.bin / val.bin, and GPUMix's own token files (token_file.h); one
// file, a folder of them or a glob ('fineweb_train_*.bin'), memory-mapped (never read into
// memory) and read in name order as one sequence.
//
// The model's vocabulary V: a GPUMix token file carries its own; llm.c and nanoGPT files do
// not, so the caller passes it (gpumix train: --vocab-size, else the tokenizer's, else the
// preset's). Every token is checked below V on open, so a wrong V is an error naming the
// shard and the token's offset in it, never an out-of-range embedding row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nn/data/file_util.h"
#include "nn/data/token_file.h"

namespace gpumix::data {

// The files `spec` names: a file; a folder's regular files (not hidden ones, not those in
// subfolders); or a glob pattern ('*', '?', '[...]') of files. In name order. Throws
// std::invalid_argument naming `flag` and the spec when it names no file.
std::vector<std::string> data_files(const std::string& spec, const std::string& flag = "--data");

// True when the file starts as a token file GPUMix reads by its header: its own magic or an
// llm.c shard's (magic and version). nanoGPT's files have no header: see `headerless`.
bool has_token_header(const std::string& path);

// Writes tokens as one llm.c shard, atomically: uint16 (magic 20240520) when width is 2,
// uint32 (20240801) when 4. Throws std::invalid_argument when a token does not fit the
// width or the shard would hold none or more than llm.c's 2^31 - 1.
void write_llmc_shard(const std::string& path, TokenView tokens, int width);

class TokenShards {
 public:
  // Opens and checks every file of `spec`: each by its header (GPUMix or llm.c), or with
  // `headerless` each as nanoGPT's raw uint16 tokens. `vocab`: the vocabulary tokens must be
  // below (0: the GPUMix files' own, which must then be all of them and agree). Errors name
  // the file, the numbers and the fix.
  TokenShards(const std::string& spec, bool headerless, int64_t vocab, const std::string& flag = "--data");

  TokenView tokens() const { return tokens_; }
  int64_t vocab() const { return vocab_; }
  // The GPUMix files' tokenizer hash (0 when none is known); all files must agree.
  uint64_t tokenizer_hash() const { return tokenizer_hash_; }
  size_t num_files() const { return files_.size(); }
  // "token file", "3 llm.c shards (uint16)", "nanoGPT .bin (uint16)", ... for the settings.
  std::string describe() const;
  // The files read, in order.
  std::vector<std::string> paths() const;

 private:
  struct File {
    std::string path, kind;  // kind: "token file", "llm.c shard", "nanoGPT .bin"
    MappedFile map;                // an llm.c or nanoGPT file
    std::optional<TokenFile> own;  // a GPUMix token file
    TokenView tokens;
  };

  std::vector<File> files_;
  TokenView tokens_;
  int64_t vocab_ = 0;
  uint64_t tokenizer_hash_ = 0;
};

}  // namespace gpumix::data
