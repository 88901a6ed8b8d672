// Token files: round trips at both widths, and every bad input named clearly.
#include <cstring>
#include <numeric>
#include <vector>

#include "nn/data/file_util.h"
#include "nn/data/token_file.h"
#include "test_util.h"

namespace gpumix::data {
namespace {

std::vector<int32_t> iota_tokens(size_t n, int32_t modulo) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919) % modulo);
  return v;
}

TEST(TokenFile, RoundTripNarrow) {
  test::TempDir dir;
  const auto tokens = iota_tokens(1000, 8192);
  write_token_file(dir.file("t.tok"), TokenView(tokens), 8192, 0x1234);
  EXPECT_TRUE(is_token_file(dir.file("t.tok")));
  const TokenFile f(dir.file("t.tok"));
  EXPECT_EQ(f.width(), 2);
  EXPECT_EQ(f.size(), tokens.size());
  EXPECT_EQ(f.vocab_size(), 8192u);
  EXPECT_EQ(f.tokenizer_hash(), 0x1234u);
  EXPECT_EQ(f.tokens().to_vector(), tokens);
  EXPECT_EQ(std::filesystem::file_size(dir.file("t.tok")), 64u + 2 * tokens.size());
  std::vector<int32_t> part(10);
  f.tokens().copy_to(500, 10, part.data());
  EXPECT_EQ(part, std::vector<int32_t>(tokens.begin() + 500, tokens.begin() + 510));
  EXPECT_EQ(f.tokens().slice(990, 1000).to_vector(), std::vector<int32_t>(tokens.begin() + 990, tokens.end()));
}

TEST(TokenFile, RoundTripWideAtTheWidthBoundary) {
  test::TempDir dir;
  std::vector<int32_t> tokens = {0, 65535, 65536, 69999};
  write_token_file(dir.file("w.tok"), TokenView(tokens), 70000);
  TokenFile f(dir.file("w.tok"));
  EXPECT_EQ(f.width(), 4);
  EXPECT_EQ(f.tokens().to_vector(), tokens);
  // Vocabulary 65536 still fits 2 bytes.
  tokens = {0, 65535};
  write_token_file(dir.file("n.tok"), TokenView(tokens), 65536);
  TokenFile g(dir.file("n.tok"));
  EXPECT_EQ(g.width(), 2);
  EXPECT_EQ(g.tokens()[1], 65535);
  // Moving keeps the mapping alive.
  TokenFile moved = std::move(g);
  EXPECT_EQ(moved.tokens()[1], 65535);
}

TEST(TokenFile, WriteRejectsBadTokens) {
  test::TempDir dir;
  const std::vector<int32_t> empty;
  EXPECT_ERROR_HAS(write_token_file(dir.file("e.tok"), TokenView(empty), 100), "e.tok", "no tokens");
  const std::vector<int32_t> big = {1, 2, 100};
  EXPECT_ERROR_HAS(write_token_file(dir.file("b.tok"), TokenView(big), 100), "b.tok", "token 100",
                   "position 2", "100");
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.tok")));
}

class BadTokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = iota_tokens(100, 50);
    write_token_file(dir_.file("good.tok"), TokenView(tokens_), 50);
    good_ = read_file(dir_.file("good.tok"));
  }
  std::string put(const std::string& name, const std::string& bytes) {
    write_file_atomic(dir_.file(name), bytes);
    return dir_.file(name);
  }
  test::TempDir dir_;
  std::vector<int32_t> tokens_;
  std::string good_;
};

TEST_F(BadTokenFile, Missing) {
  EXPECT_ERROR_HAS(TokenFile(dir_.file("nope.tok")), "nope.tok", "No such file");
  EXPECT_FALSE(is_token_file(dir_.file("nope.tok")));
}

TEST_F(BadTokenFile, Empty) {
  const auto p = put("empty.tok", "");
  EXPECT_ERROR_HAS(TokenFile{p}, "empty.tok", "empty", "gpumix tokenizer encode");
}

TEST_F(BadTokenFile, ShorterThanHeader) {
  const auto p = put("short.tok", good_.substr(0, 20));
  EXPECT_ERROR_HAS(TokenFile{p}, "short.tok", "20 bytes", "64-byte header");
}

TEST_F(BadTokenFile, WrongMagic) {
  std::string s = good_;
  s[0] = 'X';
  const auto p = put("magic.tok", s);
  EXPECT_ERROR_HAS(TokenFile{p}, "magic.tok", "wrong magic");
  EXPECT_FALSE(is_token_file(p));
  // A text corpus is not a token file either.
  const auto text = put("corpus.txt", std::string(100, 'a'));
  EXPECT_ERROR_HAS(TokenFile{text}, "corpus.txt", "wrong magic", "gpumix tokenizer encode");
}

TEST_F(BadTokenFile, UnsupportedVersion) {
  std::string s = good_;
  const uint32_t v = 7;
  std::memcpy(&s[8], &v, 4);
  const auto p = put("v7.tok", s);
  EXPECT_ERROR_HAS(TokenFile{p}, "v7.tok", "version 7", "version 1");
}

TEST_F(BadTokenFile, BadWidth) {
  std::string s = good_;
  const uint32_t w = 3;
  std::memcpy(&s[12], &w, 4);
  EXPECT_ERROR_HAS(TokenFile{put("w3.tok", s)}, "w3.tok", "width 3");
}

TEST_F(BadTokenFile, TruncatedBody) {
  const auto p = put("cut.tok", good_.substr(0, good_.size() - 10));
  EXPECT_ERROR_HAS(TokenFile{p}, "cut.tok", "100 tokens", "95 tokens: truncated", std::to_string(good_.size() - 10));
}

TEST_F(BadTokenFile, TrailingBytes) {
  const auto p = put("long.tok", good_ + "xx");
  EXPECT_ERROR_HAS(TokenFile{p}, "long.tok", "trailing");
}

TEST_F(BadTokenFile, ZeroTokens) {
  std::string s = good_.substr(0, 64);
  const uint64_t zero = 0;
  std::memcpy(&s[24], &zero, 8);
  EXPECT_ERROR_HAS(TokenFile{put("zero.tok", s)}, "zero.tok", "no tokens");
}

TEST_F(BadTokenFile, TokenOutsideVocabulary) {
  std::string s = good_;
  const uint16_t bad = 50;
  std::memcpy(&s[64 + 2 * 37], &bad, 2);
  const auto p = put("range.tok", s);
  EXPECT_ERROR_HAS(TokenFile{p}, "range.tok", "token 50", "position 37", "vocabulary size 50");
}

}  // namespace
}  // namespace gpumix::data
