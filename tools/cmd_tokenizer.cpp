// gpumix tokenizer: train a byte-level BPE tokenizer on a corpus, encode a corpus into
// llm.c shards or a token file, or decode a token file back to text.
//
//   gpumix tokenizer train  --data CORPUS --vocab N --out TOKENIZER
//   gpumix tokenizer encode --tokenizer TOKENIZER --data CORPUS --out PREFIX [--shard-tokens N]
//   gpumix tokenizer encode --tokenizer TOKENIZER --data CORPUS --out TOKENS.tok
//   gpumix tokenizer encode --bytes --data FILE --out TOKENS    (each byte one id, vocab 256)
//   gpumix tokenizer decode --tokenizer TOKENIZER --tokens TOKENS [--out TEXT]
//
// CORPUS is a text, JSONL or fortunes file (gzip-compressed or not), or a folder of them
// (see nn/data/corpus.h).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/corpus_encode.h"
#include "nn/data/file_util.h"
#include "nn/data/progress.h"
#include "nn/data/shards.h"
#include "nn/data/token_file.h"
#include "tools/command.h"

namespace {

using namespace gpumix::data;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CorpusFormat corpus_format = CorpusFormat::auto_detect;  // --format
std::string text_field = kDefaultTextField;              // --text-field

std::string read_text_corpus(const std::string& path, size_t* num_docs) {
  if (is_token_file(path)) {
    throw std::runtime_error("'" + path + "' is already a token file; pass the text corpus it was made from");
  }
  CorpusInfo info;
  const auto docs = read_documents(path, corpus_format, &info, text_field);
  *num_docs = docs.size();
  std::printf("format     %s (--format %s)\n", info.describe().c_str(), corpus_format_name(corpus_format));
  const std::string warning = info.warning(path);
  if (!warning.empty()) std::printf("warning    %s\n", warning.c_str());
  return join_documents(docs);
}

// Encodes in blocks of a few MB cut where pre-tokens cannot straddle (chunk_cuts), so
// the result equals one encode() call and a progress bar can follow it.
std::vector<int32_t> encode_with_progress(const Tokenizer& tok, std::string_view text) {
  constexpr size_t block_bytes = 8 << 20;
  const int blocks = static_cast<int>(text.size() / block_bytes) + 1;
  std::vector<size_t> cuts = chunk_cuts(text, blocks);
  cuts.push_back(text.size());
  Progress progress("encoding", static_cast<double>(text.size()) / 1e6, "MB");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  size_t begin = 0;
  for (size_t cut : cuts) {
    const auto part = tok.encode(text.substr(begin, cut - begin));
    ids.insert(ids.end(), part.begin(), part.end());
    begin = cut;
    progress.update(static_cast<double>(begin) / 1e6);
  }
  progress.finish();
  return ids;
}

int run_train(const std::string& data, int vocab, const std::string& out) {
  auto t0 = std::chrono::steady_clock::now();
  size_t docs = 0;
  const std::string text = read_text_corpus(data, &docs);
  std::printf("corpus     %s: %zu documents, %.2f MB\n", data.c_str(), docs, text.size() / 1e6);
  t0 = std::chrono::steady_clock::now();
  TrainOptions options;
  options.show_progress = true;
  const Tokenizer tok = Tokenizer::train(text, vocab, options);
  const double train_s = seconds_since(t0);
  tok.save(out);
  std::printf("trained    %d merges in %.2f s: vocabulary %d (256 bytes, the merges, <|endoftext|> = id %d)\n",
              tok.num_merges(), train_s, tok.vocab_size(), tok.eot_id());
  if (tok.vocab_size() < vocab) {
    std::printf("note       the corpus ran out of pairs to merge before vocabulary %d\n", vocab);
  }
  t0 = std::chrono::steady_clock::now();
  const auto ids = encode_with_progress(tok, text);
  std::printf("encoded    %zu tokens in %.2f s: %.3f bytes/token on the corpus\n", ids.size(), seconds_since(t0),
              static_cast<double>(text.size()) / ids.size());
  std::printf("wrote      %s (hash %016" PRIx64 ")\n", out.c_str(), tok.hash());
  return 0;
}

// The raw bytes of a file as ids 0..255 (vocabulary 256, no tokenizer): the tokens of a
// program that trains on bytes through the C API (tools/example), for the same run here.
int run_encode_bytes(const std::string& data, const std::string& out) {
  const std::string bytes = read_file(data);
  const std::vector<int32_t> ids(reinterpret_cast<const unsigned char*>(bytes.data()),
                                 reinterpret_cast<const unsigned char*>(bytes.data()) + bytes.size());
  write_token_file(out, TokenView(ids), 256);
  std::printf("wrote      %s: the %zu bytes of %s as ids (vocabulary 256)\n", out.c_str(), ids.size(), data.c_str());
  return 0;
}

// `tokenizer encode`: streamed and parallel (nn/data/corpus_encode.h), into llm.c shards of
// --shard-tokens, or one GPUMix token file when --out ends in .tok.
struct EncodeFlags {
  int64_t shard_tokens = 100'000'000;
  bool shard_tokens_given = false;
  int threads = 0;
  bool quiet = false;
};

int run_encode(const std::string& tokenizer, const std::string& data, const std::string& out, const EncodeFlags& f) {
  const Tokenizer tok = Tokenizer::load(tokenizer);
  if (is_token_file(data)) throw std::runtime_error("'" + data + "' is already a token file; pass the text corpus it was made from");
  const bool token_file = ends_with(out, ".tok");
  if (token_file && f.shard_tokens_given)
    throw std::invalid_argument("--shard-tokens is for llm.c shards, and --out " + out + " names one token file (.tok); "
                                "pass a shard prefix as --out (e.g. data/corpus_train) or drop --shard-tokens");
  CorpusEncodeOptions o;
  o.format = corpus_format;
  o.text_field = text_field;
  o.threads = f.threads;
  o.progress = !f.quiet;
  std::vector<int32_t> all;  // the token file's tokens
  std::optional<ShardWriter> shards;
  if (!token_file) shards.emplace(out, f.shard_tokens, tok.vocab_size());
  const CorpusEncodeStats s = encode_corpus(tok, data, o, [&](TokenView ids) {
    if (shards) {
      shards->add(ids);
    } else {
      const std::vector<int32_t> v = ids.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
  });
  const double mb = s.info.bytes / 1e6, rate = mb / std::max(s.seconds, 1e-9);
  std::printf("format     %s (--format %s)\n", s.info.describe().c_str(), corpus_format_name(corpus_format));
  const std::string warning = s.info.warning(data);
  if (!warning.empty()) std::printf("warning    %s\n", warning.c_str());
  std::printf("corpus     %s: %" PRId64 " documents, %.2f MB\n", data.c_str(), s.documents, mb);
  std::printf("encoded    %" PRId64 " tokens in %.2f s on %d thread%s (%.2f MB/s, %.2f MB/s a thread): %.3f bytes/token\n",
              s.tokens, s.seconds, s.threads, s.threads == 1 ? "" : "s", rate, rate / s.threads, s.info.bytes / (double)std::max<int64_t>(s.tokens, 1));
  if (token_file) {
    write_token_file(out, TokenView(all), static_cast<uint64_t>(tok.vocab_size()), tok.hash());
    std::printf("wrote      %s (vocabulary %d, %d-byte tokens, tokenizer hash %016" PRIx64 ")\n", out.c_str(),
                tok.vocab_size(), tok.vocab_size() <= 65536 ? 2 : 4, tok.hash());
    return 0;
  }
  const std::vector<std::string>& paths = shards->finish();
  std::printf("wrote      %zu llm.c shard%s %s%s%s (uint%d, up to %" PRId64 " tokens each); train with --data '%s_*.bin' "
              "--tokenizer %s\n", paths.size(), paths.size() == 1 ? "" : "s", paths.front().c_str(),
              paths.size() > 1 ? " .. " : "", paths.size() > 1 ? paths.back().c_str() : "", shards->width() * 8,
              f.shard_tokens, out.c_str(), tokenizer.c_str());
  return 0;
}

int run_decode(const std::string& tokenizer, const std::string& tokens, const std::string& out) {
  const Tokenizer tok = Tokenizer::load(tokenizer);
  const TokenFile file(tokens);
  if (file.tokenizer_hash() != 0 && file.tokenizer_hash() != tok.hash()) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "token file '%s' was made by the tokenizer with hash %016" PRIx64 ", but '%s' has hash %016" PRIx64
                  " — pass the tokenizer that encoded it",
                  tokens.c_str(), file.tokenizer_hash(), tokenizer.c_str(), tok.hash());
    throw std::runtime_error(buf);
  }
  const auto ids = file.tokens().to_vector();
  const std::string text = tok.decode(ids);
  if (out.empty() || out == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    write_file_atomic(out, text);
    std::fprintf(stderr, "decoded %zu tokens into %zu bytes: %s\n", ids.size(), text.size(), out.c_str());
  }
  return 0;
}

int cmd_tokenizer(int argc, char** argv) {
  CLI::App app{"Train a byte-level BPE tokenizer, encode a corpus into a token file, or decode one.\n"
               "CORPUS: a text file, a fortunes file (records between '%' lines), or a folder of them.",
               "gpumix tokenizer"};
  app.require_subcommand(1);

  std::string data, out, tokenizer, tokens;
  int vocab = 8192;

  auto* train = app.add_subcommand("train", "learn BPE merges from a corpus and write the tokenizer file");
  train->add_option("--data", data, "corpus: text, JSONL or fortunes file (gzip-compressed or not) or a folder of them")->required();
  train->add_option("--vocab", vocab, "vocabulary size: 256 bytes + merges + <|endoftext|>")
      ->check(CLI::Range(257, 1 << 24))
      ->capture_default_str();
  train->add_option("--out", out, "tokenizer file to write")->required();
  std::string format = "auto";
  const std::string format_help = std::string("how the corpus is read: ") + kTextFormatsHelp;
  const char* text_field_help = "the field of a JSONL line that holds its text";
  train->add_option("--format", format, format_help);
  train->add_option("--text-field", text_field, text_field_help)->capture_default_str();

  auto* encode = app.add_subcommand("encode", "encode a corpus into llm.c shards or a token file, streamed, on every core");
  bool bytes = false;
  auto* encode_tokenizer = encode->add_option("--tokenizer", tokenizer, "tokenizer file (from `tokenizer train`)");
  encode->add_flag("--bytes", bytes, "no tokenizer: each byte of the file is one id (vocabulary 256)")
      ->excludes(encode_tokenizer);
  encode->add_option("--data", data, "corpus: text, JSONL or fortunes file (gzip-compressed or not) or a folder of them")->required();
  encode->add_option("--out", out, "shard prefix: llm.c shards PREFIX_000000.bin, ...; or one token file NAME.tok")
      ->required();
  EncodeFlags encode_flags;
  encode->add_option("--shard-tokens", encode_flags.shard_tokens, "tokens per llm.c shard (the last holds the rest)")
      ->capture_default_str()
      ->each([&](const std::string&) { encode_flags.shard_tokens_given = true; });
  encode->add_option("--threads", encode_flags.threads, "threads encoding (default: the cores)");
  encode->add_flag("--quiet", encode_flags.quiet, "no progress bar");
  encode->add_option("--format", format, format_help);
  encode->add_option("--text-field", text_field, text_field_help)->capture_default_str();

  auto* decode = app.add_subcommand("decode", "decode a token file back to text");
  decode->add_option("--tokenizer", tokenizer, "tokenizer file")->required();
  decode->add_option("--tokens", tokens, "token file (from `tokenizer encode`)")->required();
  decode->add_option("--out", out, "text file to write (default: standard output)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the problem (or the help); a usage error exits 2, as in main.cpp.
    return app.exit(e) == 0 ? 0 : 2;
  }
  corpus_format = parse_corpus_format(format);
  if (train->parsed()) return run_train(data, vocab, out);
  if (encode->parsed() && bytes) return run_encode_bytes(data, out);
  if (encode->parsed() && tokenizer.empty())
    throw std::invalid_argument("tokenizer encode needs --tokenizer FILE (from `tokenizer train`), or --bytes");
  if (encode->parsed()) return run_encode(tokenizer, data, out, encode_flags);
  return run_decode(tokenizer, tokens, out);
}

}  // namespace

GPUMIX_COMMAND("tokenizer", "train a BPE tokenizer or encode a corpus", cmd_tokenizer);
