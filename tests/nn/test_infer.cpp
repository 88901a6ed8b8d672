// Sampling (nn/infer.h): the key/value cache against the full recompute (logits at every
// position; ids, greedy and seeded, through the window and past it, prompts of 1 and T ids),
// the bf16 rule, top-k then top-p on a known distribution, batches whose sequences depend
// neither on their number nor on the other prompts, stop ids, and bad options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "../core/test_util.h"
#include "nn/gpt.h"
#include "nn/infer.h"
#include "nn_test_util.h"

namespace gpumix {
namespace {

using test::bf16_rtol;
using test::close_to_scale;
using test::model_close;

// Head size 16, 4 heads, a window of 24. The weights are the initialisation scaled by 3, so
// that the distributions are peaked (a near-uniform one would put ids a rounding apart).
GPTConfig infer_config() {
  GPTConfig c = test::tiny_config();
  c.L = 2;
  c.NH = 4;
  c.C = 64;
  c.V = 97;
  c.T = 24;
  return c;
}

std::unique_ptr<GPT> make_model(DType dtype) {
  auto m = std::make_unique<GPT>(infer_config(), Device::cpu(), 11, dtype);
  float* p = m->params().data<float>();
  for (int64_t i = 0; i < m->num_params(); ++i) p[i] *= 3;
  m->sync_compute_params();
  return m;
}

std::vector<int32_t> prompt_of(int64_t n, uint64_t seed) {
  const Tensor t = test::random_tokens(1, n, infer_config().V, seed);
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + n);
}

// The last row of the full forward over the last T ids of `ids`: what predicts the next id.
std::vector<float> recomputed(const GPT& model, const std::vector<int32_t>& ids) {
  const int64_t T = std::min<int64_t>((int64_t)ids.size(), model.config().T), V = model.config().V;
  const std::vector<int32_t> w(ids.end() - T, ids.end());
  const std::vector<float> all = model.logits(Tensor::from_vector(w, {1, T})).to_vector();
  return std::vector<float>(all.end() - V, all.end());
}

// fp32: the same ops on fewer rows, sums in another order; the longest reduction is the
// MLP's 4C-term dot product.
double fp32_logit_rtol(const GPTConfig& c) { return bf16_rtol(0, 4 * c.C) * c.L; }

TEST(KVCache, LogitsMatchTheFullForwardAtEveryPosition) {
  const auto model = make_model(DType::f32);
  const GPTConfig& c = model->config();
  const std::vector<int32_t> ids = prompt_of(c.T, 3);
  KVCache cache(*model);
  std::vector<float> got = cache.prefill(ids.data(), 1);
  for (int64_t n = 1; n <= c.T; ++n) {
    EXPECT_EQ(cache.length(), n);
    const std::vector<int32_t> ctx(ids.begin(), ids.begin() + n);
    EXPECT_TRUE(close_to_scale(("position " + std::to_string(n - 1)).c_str(), got, recomputed(*model, ctx),
                               fp32_logit_rtol(c)));
    if (n < c.T) got = cache.step(ids[n]);
  }
  // A prompt of several rows at once, then steps after it.
  got = cache.prefill(ids.data(), 9);
  EXPECT_EQ(cache.length(), 9);
  got = cache.step(ids[9]);
  EXPECT_TRUE(close_to_scale("prefill 9 + step", got,
                             recomputed(*model, std::vector<int32_t>(ids.begin(), ids.begin() + 10)),
                             fp32_logit_rtol(c)));
  // The window is full: a step has no row left.
  cache.prefill(ids.data(), c.T);
  EXPECT_THROW_WITH(cache.step(1), Error, "KVCache::step", "holds 24 positions", "prefill the window again");
  EXPECT_THROW_WITH(cache.prefill(ids.data(), 0), Error, "KVCache::prefill", "0 ids", "24");
  cache.prefill(ids.data(), 2);
  EXPECT_THROW_WITH(cache.step(97), Error, "KVCache::step", "97");
}

struct Case {
  const char* name;
  int64_t prompt;
  float temperature;
  int top_k;
  float top_p;
};

// Greedy and seeded, prompts of 1 id, a few, exactly T and more than T; 2T + 5 new ids, so
// every case slides past the window.
TEST(Sampling, CachedIdsAreTheRecomputedOnesInFp32) {
  const auto model = make_model(DType::f32);
  const int T = model->config().T;
  for (const Case& k : {Case{"greedy, prompt 1", 1, 0, 0, 1}, Case{"greedy, prompt T", T, 0, 0, 1},
                        Case{"seeded, prompt 1", 1, 0.9f, 0, 1}, Case{"seeded top-k, prompt 5", 5, 0.8f, 20, 1},
                        Case{"seeded top-p, prompt T", T, 1.0f, 0, 0.9f},
                        Case{"seeded top-k + top-p, prompt T + 3", T + 3, 0.7f, 30, 0.8f}}) {
    SampleOptions o;
    o.tokens = 2 * T + 5;
    o.temperature = k.temperature;
    o.top_k = k.top_k;
    o.top_p = k.top_p;
    o.seed = 1234;
    std::vector<int32_t> cached = prompt_of(k.prompt, 7), full = cached;
    sample_tokens(*model, cached, o);
    o.kv_cache = false;
    sample_tokens(*model, full, o);
    EXPECT_EQ(cached.size(), (size_t)(k.prompt + o.tokens)) << k.name;
    EXPECT_EQ(cached, full) << k.name;
    // Not a constant sequence (the test would then say little; greedy may cycle).
    EXPECT_GE(std::set<int32_t>(cached.begin() + k.prompt, cached.end()).size(), 3u) << k.name;
  }
}

// bf16 (nn/infer.h): along the cached greedy sequence, the cached logits of each step are
// the recomputed ones within the bf16 allowance of two paths (each R roundings from the
// exact value), and each cached id is the recomputed argmax or within twice that
// allowance of it.
TEST(Sampling, Bf16IdsFollowTheStatedRule) {
  const auto model = make_model(DType::bf16);
  const GPTConfig& c = model->config();
  const int R = 2 * (11 * c.L + 3);
  const double rtol = bf16_rtol(R, 4 * c.C);
  for (int64_t prompt : {(int64_t)1, (int64_t)c.T}) {
    SampleOptions o;
    o.tokens = 2 * c.T + 5;
    o.temperature = 0;
    std::vector<int32_t> ids = prompt_of(prompt, 5);
    sample_tokens(*model, ids, o);
    // The cached logits of each step, replayed by sample_tokens' rule.
    KVCache cache(*model);
    int near_ties = 0;
    for (int i = 0; i < o.tokens; ++i) {
      const std::vector<int32_t> ctx(ids.begin(), ids.begin() + prompt + i);
      const int64_t w = std::min<int64_t>((int64_t)ctx.size(), c.T);
      const std::vector<float> got = i == 0 || cache.length() == c.T ? cache.prefill(ctx.data() + ctx.size() - w, w)
                                                                     : cache.step(ctx.back());
      const std::vector<float> ref = recomputed(*model, ctx);
      const std::string what = "prompt " + std::to_string(prompt) + ", step " + std::to_string(i);
      ASSERT_TRUE(model_close(what.c_str(), got, ref, R, 4 * c.C));
      const int32_t id = ids[prompt + i], best = (int32_t)(std::max_element(ref.begin(), ref.end()) - ref.begin());
      EXPECT_EQ(id, (int32_t)(std::max_element(got.begin(), got.end()) - got.begin())) << what;
      if (id == best) continue;
      double rms = 0;
      for (float r : ref) rms += (double)r * r;
      rms = std::sqrt(rms / (double)ref.size());
      EXPECT_LE(ref[best] - ref[id], 2 * rtol * (std::fabs(ref[best]) + rms)) << what << ": id " << id
                                                                             << " against the recomputed " << best;
      ++near_ties;
    }
    EXPECT_LT(near_ties, o.tokens / 4) << "prompt " << prompt;
  }
}

// Logits of the probabilities 0.5, 0.3, 0.15, 0.05 (ids 2, 0, 3, 1) at temperature 1.
TEST(Sampling, TopKThenTopPOnAKnownDistribution) {
  const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
  SampleOptions o;
  o.temperature = 1;
  o.top_k = 0;
  const auto frequencies = [&](const SampleOptions& s) {
    std::vector<int> n(4);
    const int draws = 10000;
    for (int i = 0; i < draws; ++i) n[pick_token(logits.data(), 4, s, (i + 0.5) / draws)]++;
    return n;
  };
  // No cut: the inverse of the cumulative sum in order 2, 0, 3, 1.
  o.top_p = 1;
  EXPECT_EQ(frequencies(o), (std::vector<int>{3000, 500, 5000, 1500}));
  // top-p 0.75: ids 2 and 0 (0.8 >= 0.75; 0.5 alone is not), renormalised to 5/8, 3/8.
  o.top_p = 0.75f;
  EXPECT_EQ(frequencies(o), (std::vector<int>{3750, 0, 6250, 0}));
  // top-p 0.4: the most likely id alone.
  o.top_p = 0.4f;
  EXPECT_EQ(frequencies(o), (std::vector<int>{0, 0, 10000, 0}));
  // top-k 3 first (0.5, 0.3, 0.15 renormalised over 0.95), then top-p 0.9: 0.8 / 0.95 =
  // 0.842 < 0.9, so all three stay.
  o.top_k = 3;
  o.top_p = 0.9f;
  EXPECT_EQ(frequencies(o), (std::vector<int>{3158, 0, 5263, 1579}));
  // top-k 3, top-p 0.8: 0.842 >= 0.8, so ids 2 and 0.
  o.top_p = 0.8f;
  EXPECT_EQ(frequencies(o), (std::vector<int>{3750, 0, 6250, 0}));
  // Greedy ignores both.
  o.temperature = 0;
  EXPECT_EQ(pick_token(logits.data(), 4, o, 0.99), 2);
}

TEST(Sampling, BatchSequencesDependOnNeitherTheirNumberNorTheOtherPrompts) {
  const auto model = make_model(DType::f32);
  SampleOptions o;
  o.tokens = 30;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.seed = 99;
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(3, 1), prompt_of(17, 2), prompt_of(1, 3)};
  std::vector<std::vector<int32_t>> three = prompts;
  sample_batch(*model, three, o);
  // Sequence j is sample_tokens with stream j; 0 is the single sequence's stream.
  for (int j = 0; j < 3; ++j) {
    std::vector<int32_t> alone = prompts[j];
    sample_tokens(*model, alone, o, j);
    EXPECT_EQ(three[j], alone) << "sequence " << j;
  }
  std::vector<int32_t> single = prompts[0];
  sample_tokens(*model, single, o);
  EXPECT_EQ(three[0], single);
  // Fewer sequences, another prompt in the middle: the others unchanged.
  std::vector<std::vector<int32_t>> two = {prompts[0], prompts[1]};
  sample_batch(*model, two, o);
  EXPECT_EQ(two[0], three[0]);
  EXPECT_EQ(two[1], three[1]);
  std::vector<std::vector<int32_t>> other = {prompts[0], prompt_of(9, 8), prompts[2]};
  sample_batch(*model, other, o);
  EXPECT_EQ(other[0], three[0]);
  EXPECT_EQ(other[2], three[2]);
  // The same prompt in two places gives two different samples (their own streams).
  std::vector<std::vector<int32_t>> same = {prompts[0], prompts[0]};
  sample_batch(*model, same, o);
  EXPECT_NE(same[0], same[1]);
}

TEST(Sampling, AStopIdEndsOnlyItsSequence) {
  const auto model = make_model(DType::f32);
  SampleOptions o;
  o.tokens = 30;
  o.temperature = 1.0f;
  o.top_k = 0;
  std::vector<std::vector<int32_t>> free_run = {prompt_of(3, 1), prompt_of(5, 2)};
  sample_batch(*model, free_run, o);
  // Stop at the id sequence 0 draws 4th: it ends there (the id kept), sequence 1 goes on
  // until it draws the same id, if ever.
  const int32_t stop = free_run[0][3 + 3];
  o.stop = {stop};
  std::vector<std::vector<int32_t>> stopped = {prompt_of(3, 1), prompt_of(5, 2)};
  sample_batch(*model, stopped, o);
  const auto first = std::find(free_run[0].begin() + 3, free_run[0].end(), stop);
  EXPECT_EQ(stopped[0], std::vector<int32_t>(free_run[0].begin(), first + 1));
  const auto first1 = std::find(free_run[1].begin() + 5, free_run[1].end(), stop);
  EXPECT_EQ(stopped[1], std::vector<int32_t>(free_run[1].begin(), first1 == free_run[1].end() ? first1 : first1 + 1));
  // The same with the recompute.
  o.kv_cache = false;
  std::vector<std::vector<int32_t>> again = {prompt_of(3, 1), prompt_of(5, 2)};
  sample_batch(*model, again, o);
  EXPECT_EQ(again, stopped);
}

TEST(Sampling, BadOptionsAreRefusedWithTheirValues) {
  const auto model = make_model(DType::f32);
  std::vector<int32_t> ids = {1, 2};
  SampleOptions o;
  o.top_p = 0;
  EXPECT_THROW_WITH(sample_tokens(*model, ids, o), Error, "top-p must be in (0, 1]", "got 0");
  o.top_p = 1.5f;
  EXPECT_THROW_WITH(sample_tokens(*model, ids, o), Error, "top-p", "1.5");
  o.top_p = NAN;
  EXPECT_THROW_WITH(sample_tokens(*model, ids, o), Error, "top-p", "nan");
  o.top_p = 1;
  o.stop = {5, 200};
  EXPECT_THROW_WITH(sample_tokens(*model, ids, o), Error, "stop ids", "200", "position 1");
  o.stop = {};
  std::vector<std::vector<int32_t>> seqs = {{1}, {}};
  EXPECT_THROW_WITH(sample_batch(*model, seqs, o), Error, "prompt 1 of 2 is empty");
  seqs = {{1}, {3, 400}};
  EXPECT_THROW_WITH(sample_batch(*model, seqs, o), Error, "prompt 1", "400", "position 1");
}

}  // namespace
}  // namespace gpumix
