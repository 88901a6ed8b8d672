// Encoding a corpus at scale (`gpumix tokenizer encode`): streamed, in parallel, into llm.c
// shards or one token file.
//
// Documents are read in corpus order (nn/data/corpus.h's files and rules): a JSONL file line
// by line, through gzip when compressed; any other file whole (it is one document, or a
// fortunes file of small records). Memory holds a round of documents (a few MB per thread),
// their tokens, the largest document and one shard's tokens, never the whole corpus. Each
// round is joined with the end-of-text token between documents (and before the round's
// first, after the first round) and encoded by Tokenizer::encode on the OpenMP threads; the
// tokenizer segments at the end-of-text token first, so the tokens equal
// Tokenizer::encode(read_corpus(corpus)) whatever the thread count or round size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/token_file.h"

namespace gpumix::data {

struct CorpusEncodeOptions {
  CorpusFormat format = CorpusFormat::auto_detect;
  std::string text_field = kDefaultTextField;
  int threads = 0;              // 0: OpenMP's default (the cores, or OMP_NUM_THREADS)
  bool progress = true;         // a progress bar on stderr (nn/data/progress.h)
  int64_t round_bytes = 8 << 20;  // text read per thread before a round is encoded
};

struct CorpusEncodeStats {
  CorpusInfo info;              // what was read (files, records, bytes of text)
  int64_t documents = 0, tokens = 0;
  int threads = 0;
  double seconds = 0;
};

// Streams `corpus`'s tokens to `sink` in order, in pieces (one per round). Throws
// std::runtime_error as read_documents does (naming the file, and the line of a JSONL
// file), also when the corpus holds no text.
CorpusEncodeStats encode_corpus(const Tokenizer& tok, const std::string& corpus, const CorpusEncodeOptions& options,
                                const std::function<void(TokenView)>& sink);

// Writes tokens as llm.c shards of `shard_tokens` each (the last holds the rest), named
// PREFIX_000000.bin, PREFIX_000001.bin, ..., uint16 when `vocab` fits 16 bits, else uint32.
// Refuses (std::runtime_error) to start where a PREFIX_*.bin already exists; a writer
// destroyed before finish() (an error while encoding) removes the shards it wrote.
class ShardWriter {
 public:
  ShardWriter(std::string prefix, int64_t shard_tokens, int64_t vocab);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void add(TokenView tokens);
  // Writes the last shard; returns every shard's path.
  const std::vector<std::string>& finish();
  int width() const { return width_; }

 private:
  void flush();
  std::string prefix_;
  int64_t shard_tokens_;
  int width_;
  std::vector<unsigned char> buffer_;  // the current shard's tokens, `width_` bytes each
  std::vector<std::string> written_;
  bool finished_ = false;
};

// "PREFIX_000007.bin".
std::string shard_path(const std::string& prefix, int index);

}  // namespace gpumix::data
