// The fused classifier (softmax, loss and dlogits in one pass, dlogits over the logits) on
// a padded vocabulary: against the unfused cross-entropy on the V real columns, and against
// its reference twin, in fp32 and bf16, on every instruction-set path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ref.h"

using gpumix::bf16;

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using namespace gpumix::kernels::test;

namespace {

constexpr int32_t k_ignore = -100;

// (N, Vp) logits around 100 (the max subtraction matters), the padding columns far above
// every class: a padding column that entered the softmax would dominate it.
std::vector<float> padded_logits(int N, int V, int Vp) {
  auto x = random_floats((size_t)N * Vp, 11, -8.0f, 8.0f);
  for (int i = 0; i < N; i++)
    for (int v = 0; v < Vp; v++) x[(size_t)i * Vp + v] += v < V ? 100.0f : 200.0f;
  return x;
}

// The first V columns of each (Vp)-wide row.
template <class T>
std::vector<T> classes(const std::vector<T>& x, int N, int V, int Vp) {
  std::vector<T> out((size_t)N * V);
  for (int i = 0; i < N; i++)
    for (int v = 0; v < V; v++) out[(size_t)i * V + v] = x[(size_t)i * Vp + v];
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, (double)std::fabs(x));
  return m;
}

template <class T>
void expect_padding_zero(const std::vector<T>& d, int N, int V, int Vp) {
  for (int i = 0; i < N; i++)
    for (int v = V; v < Vp; v++) ASSERT_EQ(d[(size_t)i * Vp + v], T(0)) << "row " << i << " padding column " << v;
}

}  // namespace

class Classifier : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Classifier, Fp32MatchesUnfusedAndRef) {
  const int N = std::get<0>(GetParam()), V = std::get<1>(GetParam()), Vp = std::get<2>(GetParam());
  const auto x = padded_logits(N, V, Vp);
  auto targets = random_ints(N, 2, 0, V - 1);
  for (int i = 0; i < N; i += 3) targets[i] = k_ignore;
  const float scale = 0.37f;
  // Unfused: cross-entropy over the V classes alone, its gradient written (dloss = scale).
  const auto xv = classes(x, N, V, Vp);
  std::vector<float> loss_r(N), lse_r(N);
  auto d_r = x;
  ref::classifier_forward(loss_r.data(), lse_r.data(), d_r.data(), targets.data(), scale, N, V, Vp, k_ignore, true);
  const double rtol = fp32_rtol(V + 1);
  // Against the reference, each side's own lse (off by up to rtol * |lse|) enters every
  // probability as exp(x - lse): a relative error of that size, besides exp's own.
  const double d_rtol = fp32_rtol(4) + rtol * max_abs(lse_r);
  for_each_isa([&] {
    // The unfused kernels on the same path (their exp is the path's).
    std::vector<float> loss_u(N), lse_u(N), d_u((size_t)N * V, 0.0f);
    cpu::crossentropy_forward(loss_u.data(), lse_u.data(), xv.data(), targets.data(), N, V, k_ignore);
    cpu::crossentropy_backward(d_u.data(), xv.data(), lse_u.data(), targets.data(), scale, N, V, k_ignore);
    std::vector<float> loss(N, NAN), lse(N, NAN);
    auto d = x;
    cpu::classifier_forward(loss.data(), lse.data(), d.data(), targets.data(), scale, N, V, Vp, k_ignore, true);
    EXPECT_TRUE(all_close("classifier lse vs unfused", lse, lse_u, rtol));
    EXPECT_TRUE(all_close("classifier lse vs ref", lse, lse_r, rtol));
    for (int i = 0; i < N; i++) {  // loss = lse - logit: rounding at the scale of lse (~108)
      EXPECT_NEAR(loss[i], loss_u[i], rtol * 108.0) << i;
      EXPECT_NEAR(loss[i], loss_r[i], rtol * 108.0) << i;
    }
    EXPECT_TRUE(all_close("classifier dlogits vs unfused", classes(d, N, V, Vp), d_u, fp32_rtol(4)));
    EXPECT_TRUE(all_close("classifier dlogits vs ref", d, d_r, d_rtol));
    expect_padding_zero(d, N, V, Vp);
    // Without a gradient the logits are left as they are.
    auto same = x;
    cpu::classifier_forward(loss.data(), lse.data(), same.data(), targets.data(), scale, N, V, Vp, k_ignore, false);
    EXPECT_EQ(same, x);
    EXPECT_TRUE(all_close("classifier lse (no grad)", lse, lse_u, rtol));
  });
}

TEST_P(Classifier, Bf16MatchesUnfusedAndRef) {
  const int N = std::get<0>(GetParam()), V = std::get<1>(GetParam()), Vp = std::get<2>(GetParam());
  const auto x = to_bf16(padded_logits(N, V, Vp));
  auto targets = random_ints(N, 2, 0, V - 1);
  for (int i = 0; i < N; i += 3) targets[i] = k_ignore;
  const float scale = 0.37f;
  const auto xv = classes(x, N, V, Vp);
  std::vector<float> loss_r(N), lse_r(N);
  auto d_r = x;
  ref::classifier_forward(loss_r.data(), lse_r.data(), d_r.data(), targets.data(), scale, N, V, Vp, k_ignore, true);
  const double rtol = fp32_rtol(V + 1);
  // Against the reference, each side's own lse (off by up to rtol * |lse|) enters every
  // probability as exp(x - lse): a relative error of that size, besides exp's own.
  const double d_rtol = fp32_rtol(4) + rtol * max_abs(lse_r);
  for_each_isa([&] {
    std::vector<float> loss_u(N), lse_u(N);
    std::vector<bf16> d_u((size_t)N * V, k_bf16_nan);
    cpu::crossentropy_forward(loss_u.data(), lse_u.data(), xv.data(), targets.data(), N, V, k_ignore);
    cpu::crossentropy_backward(d_u.data(), xv.data(), lse_u.data(), targets.data(), scale, N, V, k_ignore, false);
    std::vector<float> loss(N, NAN), lse(N, NAN);
    auto d = x;
    cpu::classifier_forward(loss.data(), lse.data(), d.data(), targets.data(), scale, N, V, Vp, k_ignore, true);
    EXPECT_TRUE(all_close("bf16 classifier lse vs unfused", lse, lse_u, rtol));
    EXPECT_TRUE(all_close("bf16 classifier lse vs ref", lse, lse_r, rtol));
    for (int i = 0; i < N; i++) {
      EXPECT_NEAR(loss[i], loss_u[i], rtol * 108.0) << i;
      EXPECT_NEAR(loss[i], loss_r[i], rtol * 108.0) << i;
    }
    // Both round an fp32 gradient once: the unfused one's and the reference's.
    EXPECT_TRUE(all_close("bf16 classifier dlogits vs unfused", classes(d, N, V, Vp), to_f32(d_u), bf16_out_rtol(4)));
    EXPECT_TRUE(all_close("bf16 classifier dlogits vs ref", d, to_f32(d_r), bf16_out_rtol(4) + d_rtol));
    expect_padding_zero(d, N, V, Vp);
  });
}

// (N, V, Vp): unpadded, a padding narrower and wider than a vector, gpt2's 50257 -> 50304.
INSTANTIATE_TEST_SUITE_P(Shapes, Classifier,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(4, 17, 17),
                                           std::make_tuple(5, 17, 24), std::make_tuple(9, 301, 384),
                                           std::make_tuple(7, 1000, 1024), std::make_tuple(3, 50257, 50304)));
