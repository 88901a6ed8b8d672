// Encoding a corpus streamed and in parallel (nn/data/corpus_encode.h): the tokens of
// read_corpus + encode whatever the threads and rounds; llm.c shards written and refused.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/corpus_encode.h"
#include "nn/data/file_util.h"
#include "nn/data/shards.h"
#include "gzip_test_util.h"
#include "test_util.h"

namespace gpumix::data {
namespace {

namespace fs = std::filesystem;

// A folder of every kind of file, over 2 MB of text, so that rounds of 1.5 MB run the
// tokenizer's threads (it splits texts of 1 MB and more).
class CorpusEncodeTest : public ::testing::Test {
 protected:
  // The tiny corpus from `at` for about `n` bytes, both ends moved off UTF-8 continuation bytes.
  static std::string excerpt(size_t at, size_t n) {
    const std::string& tiny = test::tiny_corpus();
    const auto boundary = [&](size_t i) {
      while (i < tiny.size() && (tiny[i] & 0xC0) == 0x80) ++i;
      return std::min(i, tiny.size());
    };
    const size_t begin = boundary(at), end = boundary(at + n);
    return tiny.substr(begin, end - begin);
  }

  void SetUp() override {
    const std::string& tiny = test::tiny_corpus();
    std::string jsonl, fortunes;
    for (int i = 0; jsonl.size() < (2u << 20); ++i) {
      const size_t at = (size_t)i * 977 % (tiny.size() - 3000);
      jsonl += nlohmann::json({{"text", std::to_string(i) + " " + excerpt(at, 400 + i % 2500)}}).dump() + "\n";
      if (i % 7 == 0) jsonl += "\n";  // blank lines are skipped
    }
    for (int i = 0; i < 50; ++i) fortunes += excerpt((size_t)i * 331, 200) + "\n%\n";
    write_file_atomic(dir_.file("a.jsonl.gz"), test::gzip_compress(jsonl));
    write_file_atomic(dir_.file("b_quotes"), fortunes);
    write_file_atomic(dir_.file("c.txt"), tiny);
    tok_ = Tokenizer::train(tiny, 700);
  }

  std::vector<int32_t> encode(const CorpusEncodeOptions& o, CorpusEncodeStats* stats = nullptr) {
    std::vector<int32_t> out;
    const CorpusEncodeStats s = encode_corpus(tok_, dir_.path().string(), o, [&](TokenView ids) {
      const std::vector<int32_t> v = ids.to_vector();
      out.insert(out.end(), v.begin(), v.end());
    });
    if (stats) *stats = s;
    return out;
  }

  test::TempDir dir_;
  Tokenizer tok_;
};

TEST_F(CorpusEncodeTest, TheTokensOfReadCorpusWhateverTheThreadsAndRounds) {
  CorpusInfo info;
  const std::vector<std::string> docs = read_documents(dir_.path().string(), CorpusFormat::auto_detect, &info);
  const std::vector<int32_t> expected = tok_.encode(join_documents(docs));
  ASSERT_GT(info.bytes, 2 << 20);
  for (const int threads : {1, 2}) {
    for (const int64_t round : {int64_t{1000}, int64_t{3} << 19, int64_t{8} << 20}) {
      CorpusEncodeOptions o;
      o.threads = threads;
      o.round_bytes = round;
      o.progress = false;
      CorpusEncodeStats s;
      EXPECT_TRUE(encode(o, &s) == expected) << threads << " threads, rounds of " << round << " bytes a thread";
      EXPECT_EQ(s.documents, (int64_t)docs.size());
      EXPECT_EQ(s.tokens, (int64_t)expected.size());
      EXPECT_EQ(s.threads, threads);
      EXPECT_EQ(s.info.describe(), info.describe());
      EXPECT_EQ(s.info.bytes, info.bytes);
    }
  }
}

TEST_F(CorpusEncodeTest, ErrorsNameTheFileAndLine) {
  write_file_atomic(dir_.file("d.jsonl"), "{\"text\": \"fine\"}\n{\"txt\": \"typo\"}\n");
  CorpusEncodeOptions o;
  o.progress = false;
  EXPECT_ERROR_HAS(encode(o), "d.jsonl", "line 2", "no field \"text\"", "\"txt\" (string)", "--text-field");
  const std::string packed = read_file(dir_.file("a.jsonl.gz"));
  write_file_atomic(dir_.file("a.jsonl.gz"), packed.substr(0, packed.size() / 2));
  EXPECT_ERROR_HAS(encode(o), "a.jsonl.gz", "damaged", "ends early");
  test::TempDir empty;
  EXPECT_ERROR_HAS(encode_corpus(tok_, empty.path().string(), o, [](TokenView) {}), "holds no text");
}

TEST_F(CorpusEncodeTest, ShardsOfTheGivenSizeReadBackAsTheTokens) {
  CorpusEncodeOptions o;
  o.progress = false;
  const std::vector<int32_t> tokens = encode(o);
  const std::string prefix = dir_.file("out/corpus");
  const int64_t per_shard = (int64_t)tokens.size() / 3 + 1;  // three shards, the last shorter
  {
    ShardWriter w(prefix, per_shard, tok_.vocab_size());
    w.add(TokenView(tokens.data(), 1000));
    w.add(TokenView(tokens.data() + 1000, tokens.size() - 1000));
    EXPECT_EQ(w.finish(), (std::vector<std::string>{shard_path(prefix, 0), shard_path(prefix, 1), shard_path(prefix, 2)}));
    EXPECT_EQ(w.width(), 2);
  }
  EXPECT_EQ(fs::file_size(shard_path(prefix, 0)), (uintmax_t)(1024 + per_shard * 2));
  const TokenShards back(prefix + "_*.bin", false, tok_.vocab_size());
  EXPECT_TRUE(back.tokens().to_vector() == tokens);
  // A second set beside the first is refused; an unfinished one leaves nothing.
  EXPECT_ERROR_HAS(ShardWriter(prefix, per_shard, tok_.vocab_size()), "corpus_000000.bin", "already exist");
  const std::string other = dir_.file("out/other");
  {
    ShardWriter w(other, 100, 100000);  // a vocabulary past 16 bits: uint32 tokens
    EXPECT_EQ(w.width(), 4);
    w.add(TokenView(tokens.data(), 250));
    EXPECT_TRUE(fs::exists(shard_path(other, 1)));
  }
  EXPECT_FALSE(fs::exists(shard_path(other, 0)));
  EXPECT_FALSE(fs::exists(shard_path(other, 1)));
  EXPECT_ERROR_HAS(ShardWriter(other, 0, 512), "--shard-tokens 0", "1 to 2,147,483,647");
}

}  // namespace
}  // namespace gpumix::data
