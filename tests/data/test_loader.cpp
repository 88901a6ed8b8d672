// The batch loader (determinism across rank splits), the split helper and the unigram
// baseline.
#include <cmath>
#include <set>
#include <vector>

#include "nn/data/loader.h"
#include "test_util.h"

namespace gpumix::data {
namespace {

std::vector<int32_t> counting(size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i);
  return v;
}

struct Rows {
  std::vector<int32_t> x, y;
};

Rows read_rows(const BatchLoader& l, int64_t k, int64_t begin, int64_t end) {
  Rows r;
  r.x.resize((end - begin) * l.seq_len());
  r.y.resize(r.x.size());
  l.get(k, begin, end, r.x.data(), r.y.data());
  return r;
}

TEST(Loader, TargetsAreInputsShiftedByOne) {
  const auto tokens = counting(1000);
  const BatchLoader l(TokenView(tokens), 16, 4, 42);
  const Rows r = read_rows(l, 3, 0, 4);
  for (int64_t row = 0; row < 4; ++row) {
    const int32_t start = r.x[row * 16];
    EXPECT_EQ(start, l.window_start(3, row));
    EXPECT_LE(start + 16, 999);
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(r.x[row * 16 + t], start + t);
      EXPECT_EQ(r.y[row * 16 + t], start + t + 1);
    }
  }
}

TEST(Loader, BatchIsAFunctionOfSeedAndStep) {
  const auto tokens = counting(5000);
  const BatchLoader a(TokenView(tokens), 32, 8, 1234);
  const BatchLoader b(TokenView(tokens), 32, 8, 1234);
  const BatchLoader c(TokenView(tokens), 32, 8, 1235);
  // Read in different orders: no hidden generator state.
  const Rows b7 = read_rows(b, 7, 0, 8);
  const Rows a0 = read_rows(a, 0, 0, 8);
  const Rows a7 = read_rows(a, 7, 0, 8);
  EXPECT_EQ(a7.x, b7.x);
  EXPECT_EQ(a7.y, b7.y);
  EXPECT_NE(a0.x, a7.x);
  EXPECT_NE(read_rows(c, 7, 0, 8).x, a7.x);
}

TEST(Loader, SameRowsWhateverTheRankSplit) {
  const auto tokens = counting(3000);
  const int64_t B = 10, T = 8;
  const BatchLoader l(TokenView(tokens), T, B, 99);
  for (int64_t k : {0, 1, 17, 1000000}) {
    const Rows whole = read_rows(l, k, 0, B);
    for (int ranks : {1, 2, 5, 3}) {
      // Uneven shares too (3 ranks of 10 rows: 4, 3, 3), as heterogeneous plans give.
      std::vector<int32_t> x, y;
      int64_t begin = 0;
      for (int r = 0; r < ranks; ++r) {
        const int64_t rows = B / ranks + (r < B % ranks ? 1 : 0);
        const Rows part = read_rows(l, k, begin, begin + rows);
        x.insert(x.end(), part.x.begin(), part.x.end());
        y.insert(y.end(), part.y.begin(), part.y.end());
        begin += rows;
      }
      EXPECT_EQ(begin, B);
      EXPECT_EQ(x, whole.x) << "step " << k << ", " << ranks << " ranks";
      EXPECT_EQ(y, whole.y);
    }
  }
}

TEST(Loader, StartsSpreadOverTheWholeSplit) {
  const auto tokens = counting(200);
  const BatchLoader l(TokenView(tokens), 10, 50, 7);
  std::set<int64_t> seen;
  for (int64_t k = 0; k < 100; ++k) {
    for (int64_t r = 0; r < 50; ++r) {
      const int64_t s = l.window_start(k, r);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, 190);  // N - T: the last window ends at token 199
      seen.insert(s);
    }
  }
  EXPECT_EQ(seen.size(), 190u);
}

TEST(Loader, ReadsNarrowTokenViews) {
  const std::vector<uint16_t> narrow = {5, 6, 7, 8, 9, 10};
  const BatchLoader l(TokenView(narrow.data(), narrow.size(), 2), 5, 1, 0);
  const Rows r = read_rows(l, 0, 0, 1);
  EXPECT_EQ(r.x, (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(r.y, (std::vector<int32_t>{6, 7, 8, 9, 10}));
}

TEST(Loader, EvalWindowsTileTheSplit) {
  const auto tokens = counting(100);
  const BatchLoader l(TokenView(tokens), 10, 4, 0);
  EXPECT_EQ(l.num_eval_windows(), 9);  // 9 windows of 11 tokens, overlapping by one
  std::vector<int32_t> x(10), y(10);
  l.eval_window(8, x.data(), y.data());
  EXPECT_EQ(x.front(), 80);
  EXPECT_EQ(y.back(), 90);
  EXPECT_ERROR_HAS(l.eval_window(9, x.data(), y.data()), "9");
}

TEST(Loader, Errors) {
  const auto tokens = counting(10);
  EXPECT_ERROR_HAS(BatchLoader(TokenView(tokens), 10, 1, 0), "10 tokens", "T + 1 = 11");
  EXPECT_ERROR_HAS(BatchLoader(TokenView(tokens), 0, 1, 0), "sequence length 0");
  const BatchLoader l(TokenView(tokens), 4, 3, 0);
  std::vector<int32_t> x(16), y(16);
  EXPECT_ERROR_HAS(l.get(0, 2, 4, x.data(), y.data()), "[2, 4)", "3 rows");
}

TEST(Loader, HashCounterIsPinned) {
  // A change reshuffles every run's data order: pinned so it is deliberate.
  EXPECT_EQ(hash_counter(0, 0, 0, 0), 0x2130748aaac80268ull);
  EXPECT_NE(hash_counter(1, 2, 3), hash_counter(1, 3, 2));
}

TEST(Split, HoldsOutTheTail) {
  const auto tokens = counting(1000);
  const Split s = split_train_val(TokenView(tokens), 16, 0.1);
  EXPECT_EQ(s.train.size(), 900u);
  EXPECT_EQ(s.val.size(), 100u);
  EXPECT_EQ(s.val[0], 900);
  EXPECT_EQ(s.train[899], 899);
}

TEST(Split, ValidationGetsAtLeastOneWindow) {
  const auto tokens = counting(100);
  const Split s = split_train_val(TokenView(tokens), 20, 0.05);
  EXPECT_EQ(s.val.size(), 21u);
  EXPECT_EQ(s.train.size(), 79u);
}

TEST(Split, TooSmallCorpusNamesTheNumbersAndTheFix) {
  const auto tokens = counting(40);
  EXPECT_ERROR_HAS(split_train_val(TokenView(tokens), 32, 0.05), "40 tokens", "T + 1 = 33", "66",
                   "shorter sequence length");
  EXPECT_ERROR_HAS(split_train_val(TokenView(tokens), 4, 0.0), "fraction");
}

TEST(Unigram, HandComputed) {
  // Train counts: 0 x2, 1 x1, 2 x0; V = 3, add-one: p = 3/6, 2/6, 1/6.
  const std::vector<int32_t> train = {0, 0, 1};
  const std::vector<int32_t> val = {0, 1, 2};
  const double expected = -(std::log(3.0 / 6) + std::log(2.0 / 6) + std::log(1.0 / 6)) / 3;
  EXPECT_NEAR(unigram_cross_entropy(TokenView(train), TokenView(val), 3), expected, 1e-12);
}

TEST(Unigram, UniformDataGivesLogV) {
  std::vector<int32_t> train;
  for (int i = 0; i < 4000; ++i) train.push_back(i % 4);
  const double ce = unigram_cross_entropy(TokenView(train), TokenView(train), 4);
  EXPECT_NEAR(ce, std::log(4.0), 1e-9);
}

TEST(Unigram, RejectsOutOfRangeTokens) {
  const std::vector<int32_t> t = {0, 5};
  EXPECT_ERROR_HAS(unigram_cross_entropy(TokenView(t), TokenView(t), 3), "5", "vocabulary of 3");
}

}  // namespace
}  // namespace gpumix::data
