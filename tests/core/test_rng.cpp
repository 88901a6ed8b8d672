// Counter-based RNG: stable keys, a Philox known answer, and ops::uniform_/normal_ giving
// the same numbers for the same (key, offset) whatever the split of the work.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "core/rng.h"
#include "kernels/philox.h"
#include "test_util.h"

namespace gpumix {
namespace {

TEST(Rng, KeysAreStable) {
  // Fixed values: a change here changes every initialisation and dropout mask of every run
  // (and breaks resuming from checkpoints); if it is deliberate, update these numbers.
  EXPECT_EQ(rng_key(42, "init", 0), 14810655446670159917ull);
  EXPECT_EQ(rng_key(0, "", 0), 569691920572281846ull);
  EXPECT_EQ(rng_key(1234, "gradcheck.projection", 7), 17823868645966604756ull);
  EXPECT_EQ(mix64(0), 0xE220A8397B1DCDAFull);  // splitmix64's first output from state 0
  EXPECT_EQ(rng_key(42, "init"), rng_key(42, "init", 0));
}

TEST(Rng, KeysSeparateSeedsNamesAndSteps) {
  const uint64_t k = rng_key(42, "init", 0);
  EXPECT_NE(k, rng_key(43, "init", 0));
  EXPECT_NE(k, rng_key(42, "inits", 0));
  EXPECT_NE(k, rng_key(42, "init", 1));
  EXPECT_NE(rng_key(42, "dropout", 1), rng_key(42, "dropout", 2));
  EXPECT_NE(rng_key(1, "a", 0), rng_key(0, "a", 1));  // seed and step do not commute
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123's known-answer vector for Philox4x32-10 with zero key and counter.
  const Philox4 r = philox4x32_10(0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

std::vector<float> fill_normal(const Shape& shape, uint64_t key, uint64_t offset) {
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, key, offset, 0.0f, 1.0f);
  return t.to_vector();
}

TEST(Rng, SameKeyAndOffsetGiveTheSameNumbers) {
  const uint64_t key = rng_key(7, "weights");
  EXPECT_TRUE(test::bitwise_equal("normal", fill_normal({333}, key, 5), fill_normal({333}, key, 5)));
  Tensor a = Tensor::empty({17, 3}), b = Tensor::empty({51});
  ops::uniform_(a, key, 9, -2.0f, 3.0f);
  ops::uniform_(b, key, 9, -2.0f, 3.0f);
  EXPECT_TRUE(test::bitwise_equal("uniform", a.to_vector(), b.to_vector()));
  // Element i is exactly element offset + i of the stream.
  const std::vector<float> v = fill_normal({100}, key, 3);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(v[i], philox_normal_at(key, 3 + i)) << i;
  const std::vector<float> u = a.to_vector();
  for (int i = 0; i < 51; ++i) ASSERT_EQ(u[i], -2.0f + 5.0f * philox_uniform_at(key, 9 + i)) << i;
}

TEST(Rng, AnySplitGivesTheSameNumbers) {
  const uint64_t key = rng_key(2024, "split");
  const int64_t rows = 37, cols = 27;  // odd sizes: splits land on odd offsets
  for (bool normal : {true, false}) {
    Tensor whole = Tensor::empty({rows, cols});
    if (normal)
      ops::normal_(whole, key, 11, 0.5f, 2.0f);
    else
      ops::uniform_(whole, key, 11, -1.0f, 1.0f);
    const std::vector<float> ref = whole.to_vector();
    for (int parts : {1, 2, 3, 5, 7}) {
      // Row split: part p fills rows [r0, r1) at offset 11 + r0 * cols.
      Tensor rows_t = Tensor::zeros({rows, cols});
      for (int p = 0; p < parts; ++p) {
        const int64_t r0 = rows * p / parts, r1 = rows * (p + 1) / parts;
        Tensor part = rows_t.slice(r0, r1);
        if (normal)
          ops::normal_(part, key, 11 + r0 * cols, 0.5f, 2.0f);
        else
          ops::uniform_(part, key, 11 + r0 * cols, -1.0f, 1.0f);
      }
      EXPECT_TRUE(test::bitwise_equal(normal ? "normal, row split" : "uniform, row split",
                                      rows_t.to_vector(), ref))
          << parts << " parts";
      // Flat split at arbitrary (odd) element boundaries.
      Tensor flat = Tensor::zeros({rows * cols});
      const int64_t n = rows * cols;
      for (int p = 0; p < parts; ++p) {
        const int64_t e0 = n * p / parts, e1 = n * (p + 1) / parts;
        Tensor part = flat.flat_slice(e0, e1 - e0);
        if (normal)
          ops::normal_(part, key, 11 + e0, 0.5f, 2.0f);
        else
          ops::uniform_(part, key, 11 + e0, -1.0f, 1.0f);
      }
      EXPECT_TRUE(test::bitwise_equal(normal ? "normal, flat split" : "uniform, flat split",
                                      flat.to_vector(), ref))
          << parts << " parts";
    }
  }
}

TEST(Rng, SameNumbersOnAnotherDeviceAndInBF16) {
  const uint64_t key = rng_key(5, "devices");
  const std::vector<float> host = fill_normal({1000}, key, 0);
  Tensor other = Tensor::empty({1000}, DType::f32, Device::cpu(50));
  ops::normal_(other, key, 0, 0.0f, 1.0f);
  EXPECT_TRUE(test::bitwise_equal("cpu:50 vs cpu:0", other.to_vector(), host));
  // bf16 tensors hold the fp32 numbers rounded to bf16.
  Tensor h = Tensor::empty({1000}, DType::bf16);
  ops::normal_(h, key, 0, 0.0f, 1.0f);
  const std::vector<float> expected = Tensor::from_vector(host, {1000}).to(DType::bf16).to_vector();
  EXPECT_TRUE(test::bitwise_equal("bf16", h.to_vector(), expected));
}

TEST(Rng, DifferentKeysAndOffsetsDiffer) {
  const std::vector<float> a = fill_normal({1000}, rng_key(1, "x"), 0);
  const std::vector<float> b = fill_normal({1000}, rng_key(2, "x"), 0);
  const std::vector<float> c = fill_normal({1000}, rng_key(1, "x"), 1000);
  int same_ab = 0, same_ac = 0;
  for (int i = 0; i < 1000; ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  EXPECT_LE(same_ab, 1);
  EXPECT_LE(same_ac, 1);
}

TEST(Rng, NormalMeanAndStd) {
  const int64_t n = 100000;
  const float mean = 2.0f, std = 3.0f;
  Tensor t = Tensor::empty({n});
  ops::normal_(t, rng_key(99, "stats"), 0, mean, std);
  const double m = ops::sum(t) / n;
  const double var = ops::sum_squares(t) / n - m * m;
  // Five standard errors: |mean error| < 5 std / sqrt(n), |std error| < 5 std / sqrt(2n).
  EXPECT_NEAR(m, mean, 5 * std / std::sqrt((double)n));
  EXPECT_NEAR(std::sqrt(var), std, 5 * std / std::sqrt(2.0 * n));
  // Tails: about 4.55% of samples lie beyond two standard deviations.
  int64_t beyond = 0;
  for (float v : t.to_vector()) beyond += std::fabs(v - mean) > 2 * std;
  EXPECT_NEAR((double)beyond / n, 0.0455, 0.005);
}

TEST(Rng, UniformRangeAndMean) {
  const int64_t n = 100000;
  Tensor t = Tensor::empty({n});
  ops::uniform_(t, rng_key(99, "uniform"), 0, -1.0f, 3.0f);
  double lo = 1e9, hi = -1e9;
  for (float v : t.to_vector()) {
    lo = std::min(lo, (double)v);
    hi = std::max(hi, (double)v);
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 3.0);
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 2.99);
  // Uniform on [a, b): std (b - a) / sqrt(12).
  EXPECT_NEAR(ops::sum(t) / n, 1.0, 5 * (4.0 / std::sqrt(12.0)) / std::sqrt((double)n));
}

TEST(Rng, IntegerTensorsAreRejected) {
  Tensor t = Tensor::zeros({4}, DType::i32);
  EXPECT_THROW_WITH(ops::normal_(t, 1, 0, 0.0f, 1.0f), Error, "normal_", "i32");
  EXPECT_THROW_WITH(ops::uniform_(t, 1, 0, 0.0f, 1.0f), Error, "uniform_", "i32");
  Tensor u;
  EXPECT_THROW_WITH(ops::normal_(u, 1, 0, 0.0f, 1.0f), Error, "normal_", "undefined");
}

}  // namespace
}  // namespace gpumix
