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
      ASSERT_LT(s, 190);  // N - T: the last window ends at token 199; shifted tilings reach it
      seen.insert(s);
    }
  }
  EXPECT_EQ(seen.size(), 190u);
}

TEST(Loader, PermuteIndexIsABijection) {
  for (uint64_t n : {1, 2, 3, 4, 5, 17, 64, 65, 1000, 4097}) {
    for (uint64_t key : {0ull, 1ull, 0xfeedull}) {
      std::set<uint64_t> seen;
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t p = permute_index(i, n, key);
        ASSERT_LT(p, n);
        seen.insert(p);
      }
      EXPECT_EQ(seen.size(), n) << "n " << n << ", key " << key;
    }
  }
  // A key chooses the order: two keys give two orders.
  std::vector<uint64_t> a, b;
  for (uint64_t i = 0; i < 100; ++i) {
    a.push_back(permute_index(i, 100, 1));
    b.push_back(permute_index(i, 100, 2));
  }
  EXPECT_NE(a, b);
}

// Every epoch reads each of its W windows once, on one tiling shifted per epoch, in an
// order of its own; a batch size that does not divide W carries an epoch across batches.
TEST(Loader, EachEpochReadsEveryWindowOnce) {
  const auto tokens = counting(1000);
  const int64_t T = 16, B = 7;
  const BatchLoader l(TokenView(tokens), T, B, 42);
  const int64_t W = l.windows_per_epoch();
  EXPECT_EQ(W, 62);  // (1000 - 1) / 16; the tiling leaves 999 - 62 * 16 = 7 tokens of slack
  std::vector<std::vector<int64_t>> orders;
  std::set<int64_t> offsets;
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    std::vector<int64_t> starts;
    for (int64_t g = epoch * W; g < (epoch + 1) * W; ++g) starts.push_back(l.window_start(g / B, g % B));
    const int64_t offset = starts[0] % T;
    offsets.insert(offset);
    EXPECT_LE(offset, 7);
    std::set<int64_t> windows;
    for (int64_t s : starts) {
      ASSERT_EQ(s % T, offset) << "epoch " << epoch << ": a start off its tiling";
      ASSERT_LE(s + T + 1, 1000);
      windows.insert(s / T);
    }
    EXPECT_EQ(windows.size(), (size_t)W) << "epoch " << epoch << " repeats a window";
    orders.push_back(starts);
  }
  EXPECT_GT(offsets.size(), 1u) << "the tiling never moved";
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
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

TEST(Loader, HashAndWindowOrderArePinned) {
  // A change reshuffles every run's data order: pinned so it is deliberate.
  EXPECT_EQ(hash_counter(0, 0, 0, 0), 0x2130748aaac80268ull);
  EXPECT_NE(hash_counter(1, 2, 3), hash_counter(1, 3, 2));
  const auto tokens = counting(1000);
  const BatchLoader l(TokenView(tokens), 16, 4, 42);
  std::vector<int64_t> starts;
  for (int64_t r = 0; r < 4; ++r) starts.push_back(l.window_start(0, r));
  EXPECT_EQ(starts, (std::vector<int64_t>{834, 66, 242, 706}));
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
