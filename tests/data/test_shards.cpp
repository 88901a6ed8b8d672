// Token data in shards: views over several runs of memory, llm.c's two shard formats,
// nanoGPT's headerless files, GPUMix token files, folders and globs, and every bad input
// named by file and offset.
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "nn/data/llmc_format.h"
#include "nn/data/loader.h"
#include "nn/data/shards.h"
#include "test_util.h"

namespace gpumix::data {
namespace {

using test::TempDir;

std::vector<int32_t> some_tokens(size_t n, int32_t modulo, uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = (int32_t)(gen() % (uint32_t)modulo);
  return v;
}

std::vector<int32_t> part(const std::vector<int32_t>& v, size_t begin, size_t end) {
  return std::vector<int32_t>(v.begin() + (long)begin, v.begin() + (long)end);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The tokens cut into shards of the given sizes, written alternately as uint16 and uint32
// llm.c shards train_000.bin, train_001.bin, ...
void write_shards(const TempDir& dir, const std::vector<int32_t>& tokens, const std::vector<size_t>& sizes) {
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "train_%03zu.bin", i);
    const std::vector<int32_t> piece = part(tokens, at, at + sizes[i]);
    write_llmc_shard(dir.file(name), TokenView(piece), i % 2 == 0 ? 2 : 4);
    at += sizes[i];
  }
  ASSERT_EQ(at, tokens.size());
}

TEST(TokenView, SeveralRunsReadAsOne) {
  const std::vector<int32_t> tokens = some_tokens(1000, 50000);
  // Runs of both widths and odd sizes, one of them empty.
  std::vector<uint16_t> narrow(tokens.begin() + 300, tokens.begin() + 650);
  const std::vector<TokenView> parts = {TokenView(tokens.data(), 300), TokenView(narrow.data(), narrow.size(), 2),
                                        TokenView(tokens.data() + 650, 0), TokenView(tokens.data() + 650, 1),
                                        TokenView(tokens.data() + 651, 349)};
  const TokenView all = TokenView::concat(parts);
  ASSERT_EQ(all.size(), tokens.size());
  EXPECT_EQ(all.to_vector(), tokens);
  for (size_t i = 0; i < tokens.size(); i += 37) EXPECT_EQ(all[i], tokens[i]) << i;
  // Every slice, within a run and across runs, and slices of slices.
  std::mt19937 gen(7);
  for (int trial = 0; trial < 500; ++trial) {
    size_t a = gen() % tokens.size(), b = gen() % (tokens.size() + 1);
    if (a > b) std::swap(a, b);
    const TokenView s = all.slice(a, b);
    ASSERT_EQ(s.to_vector(), part(tokens, a, b)) << a << ".." << b;
    if (b - a > 2) {
      EXPECT_EQ(s.slice(1, b - a - 1).to_vector(), part(tokens, a + 1, b - 1));
    }
    std::vector<int32_t> seen;
    s.for_each_run([&](size_t first, const TokenView& run) {
      EXPECT_EQ(first, seen.size());
      const auto v = run.to_vector();
      seen.insert(seen.end(), v.begin(), v.end());
    });
    EXPECT_EQ(seen, part(tokens, a, b));
  }
  // A window that crosses three runs, as the batch loader copies it.
  std::vector<int32_t> window(360);
  all.copy_to(290, 360, window.data());
  EXPECT_EQ(window, part(tokens, 290, 650));
}

TEST(TokenShards, LlmcShardsOfBothWidthsFromAGlobAndAFolder) {
  TempDir dir;
  const std::vector<int32_t> tokens = some_tokens(2000, 50257);
  write_shards(dir, tokens, {400, 17, 583, 1000});
  write_bytes(dir.file(".hidden"), "not a shard");
  for (const std::string& spec : {dir.file("train_*.bin"), dir.path().string()}) {
    const std::vector<std::string> files = data_files(spec);
    ASSERT_EQ(files.size(), 4u) << spec;  // the folder's hidden file is not read
    EXPECT_EQ(files.front(), dir.file("train_000.bin"));
    EXPECT_EQ(files.back(), dir.file("train_003.bin"));
    const TokenShards shards(spec, false, 50257);
    EXPECT_EQ(shards.num_files(), 4u);
    EXPECT_EQ(shards.vocab(), 50257);
    EXPECT_EQ(shards.tokens().to_vector(), tokens);
    EXPECT_EQ(shards.describe(), "4 llm.c shards (uint16 and uint32)");
  }
  // One shard, uint32: Llama 3's header.
  const std::vector<int32_t> wide = some_tokens(100, 128256);
  write_llmc_shard(dir.file("wide.bin"), TokenView(wide), 4);
  EXPECT_TRUE(has_token_header(dir.file("wide.bin")));
  const TokenShards one(dir.file("wide.bin"), false, 128256);
  EXPECT_EQ(one.tokens().to_vector(), wide);
  EXPECT_EQ(one.describe(), "llm.c shard (uint32)");
}

TEST(TokenShards, BatchesAcrossShardEdgesEqualOneFile) {
  // The batch loader over shards reads the windows it reads over the same tokens in one
  // file: the positions are the concatenation's, whatever the shard sizes.
  TempDir dir;
  const std::vector<int32_t> tokens = some_tokens(3000, 4096, 3);
  std::vector<size_t> sizes;
  for (size_t at = 0, i = 0; at < tokens.size(); ++i) {
    sizes.push_back(std::min<size_t>(tokens.size() - at, 23 + i % 17));
    at += sizes.back();
  }
  write_shards(dir, tokens, sizes);
  const TokenShards shards(dir.file("train_*.bin"), false, 4096);
  const int64_t T = 32, B = 8;
  const BatchLoader sharded(shards.tokens(), T, B, 42), whole(TokenView(tokens), T, B, 42);
  std::vector<int32_t> xa(B * T), ya(B * T), xb(B * T), yb(B * T);
  for (int64_t k = 0; k < 20; ++k) {
    sharded.get(k, 0, B, xa.data(), ya.data());
    whole.get(k, 0, B, xb.data(), yb.data());
    ASSERT_EQ(xa, xb) << "batch " << k;
    ASSERT_EQ(ya, yb) << "batch " << k;
  }
  const Split a = split_train_val(shards.tokens(), T), b = split_train_val(TokenView(tokens), T);
  EXPECT_EQ(a.val.to_vector(), b.val.to_vector());
  EXPECT_DOUBLE_EQ(unigram_cross_entropy(a.train, a.val, 4096), unigram_cross_entropy(b.train, b.val, 4096));
}

TEST(TokenShards, NanoGptBinAndGpumixTokenFiles) {
  TempDir dir;
  const std::vector<int32_t> tokens = some_tokens(500, 50257);
  std::string raw;
  for (int32_t t : tokens) raw.append(reinterpret_cast<const char*>(&t), 2);  // little-endian uint16
  write_bytes(dir.file("train.bin"), raw);
  const TokenShards nano(dir.file("train.bin"), true, 50257);
  EXPECT_EQ(nano.tokens().to_vector(), tokens);
  EXPECT_EQ(nano.describe(), "nanoGPT .bin (uint16)");
  // GPUMix token files say their vocabulary and tokenizer.
  write_token_file(dir.file("a.tok"), TokenView(part(tokens, 0, 200)), 50257, 99);
  write_token_file(dir.file("b.tok"), TokenView(part(tokens, 200, 500)), 50257, 99);
  const TokenShards own(dir.file("*.tok"), false, 0);
  EXPECT_EQ(own.vocab(), 50257);
  EXPECT_EQ(own.tokenizer_hash(), 99u);
  EXPECT_EQ(own.tokens().to_vector(), tokens);
  EXPECT_EQ(own.describe(), "2 token files (uint16)");
}

TEST(TokenShards, BadInputIsNamedByFileAndOffset) {
  TempDir dir;
  std::vector<int32_t> tokens = some_tokens(300, 1000);
  tokens[123] = 5000;
  write_llmc_shard(dir.file("s_0.bin"), TokenView(part(tokens, 0, 100)), 2);
  write_llmc_shard(dir.file("s_1.bin"), TokenView(part(tokens, 100, 300)), 2);
  EXPECT_ERROR_HAS(TokenShards(dir.file("s_*.bin"), false, 1000), "s_1.bin", "token 5000", "offset 23", "vocabulary of 1000", "--vocab-size");
  EXPECT_ERROR_HAS(TokenShards(dir.file("s_*.bin"), false, 0), "s_0.bin", "does not say its vocabulary", "--vocab-size");
  EXPECT_ERROR_HAS(data_files(dir.file("nothing_*.bin")), "nothing_*.bin", "matches no file");
  EXPECT_ERROR_HAS(data_files(dir.file("absent.bin")), "absent.bin", "does not exist");
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_ERROR_HAS(data_files(dir.file("empty")), "empty", "holds no files");
  // A truncated shard, and one with bytes past its tokens.
  std::string bytes = read_file(dir.file("s_0.bin"));
  write_bytes(dir.file("cut.bin"), bytes.substr(0, bytes.size() - 3));
  EXPECT_ERROR_HAS(TokenShards(dir.file("cut.bin"), false, 1000), "cut.bin", "promises 100 tokens of 2 bytes", "197 bytes after the header", "truncated");
  write_bytes(dir.file("long.bin"), bytes + "xy");
  EXPECT_ERROR_HAS(TokenShards(dir.file("long.bin"), false, 1000), "long.bin", "trailing bytes");
  // A header that is neither llm.c's nor GPUMix's; an llm.c magic with another version.
  write_bytes(dir.file("text.bin"), "hello world, this is not a shard");
  EXPECT_ERROR_HAS(TokenShards(dir.file("text.bin"), false, 1000), "text.bin", "is not token data", "--format nanogpt");
  bytes[4] = 9;  // version 9
  write_bytes(dir.file("v9.bin"), bytes);
  EXPECT_FALSE(has_token_header(dir.file("v9.bin")));
  // nanoGPT files are whole uint16 tokens.
  write_bytes(dir.file("odd.bin"), "abc");
  EXPECT_ERROR_HAS(TokenShards(dir.file("odd.bin"), true, 1000), "odd.bin", "3 bytes", "not a whole number");
  // Token files of two tokenizers.
  write_token_file(dir.file("x.tok"), TokenView(part(tokens, 0, 50)), 1000, 1);
  write_token_file(dir.file("y.tok"), TokenView(part(tokens, 0, 50)), 1000, 2);
  EXPECT_ERROR_HAS(TokenShards(dir.file("*.tok"), false, 0), "y.tok", "another tokenizer", "x.tok");
  // The shard writer refuses what llm.c's format cannot hold.
  const std::vector<int32_t> big = {70000};
  EXPECT_ERROR_HAS(write_llmc_shard(dir.file("w.bin"), TokenView(big), 2), "70000", "does not fit 2 bytes");
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.bin")));
}

TEST(Loader, GivenSplitsNeedAWindowEach) {
  const std::vector<int32_t> train = some_tokens(100, 10), val = some_tokens(16, 10);
  const Split s = given_split(TokenView(train), TokenView(val), 15);
  EXPECT_EQ(s.val.size(), 16u);
  EXPECT_ERROR_HAS(given_split(TokenView(train), TokenView(val), 16), "validation data (--val-data)", "16 tokens", "T + 1 = 17", "--seq");
}

}  // namespace
}  // namespace gpumix::data
