// Cross-entropy and embedding: fast against ref.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ref.h"

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using gpumix::kernels::test::all_close;
using gpumix::kernels::test::fp32_rtol;
using gpumix::kernels::test::random_floats;
using gpumix::kernels::test::random_ints;

namespace {
constexpr int32_t k_ignore = -100;
}

class CrossEntropy : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CrossEntropy, ForwardBackwardMatchRefWithIgnoreIndex) {
  const auto [N, V] = GetParam();
  // Logits around 1000: without the max subtraction exp() would overflow to inf.
  auto logits = random_floats((size_t)N * V, 1, -8.0f, 8.0f);
  for (auto& x : logits) x += 1000.0f;
  auto targets = random_ints(N, 2, 0, V - 1);
  for (int i = 0; i < N; i += 3) targets[i] = k_ignore;
  std::vector<float> loss_f(N, NAN), lse_f(N, NAN), loss_r(N), lse_r(N);
  cpu::crossentropy_forward(loss_f.data(), lse_f.data(), logits.data(), targets.data(), N, V, k_ignore);
  ref::crossentropy_forward(loss_r.data(), lse_r.data(), logits.data(), targets.data(), N, V, k_ignore);
  // loss = lse - logit: both ~1000, so rounding is relative to 1000, not to the loss.
  const double rtol = fp32_rtol(V + 1);
  EXPECT_TRUE(all_close("crossentropy lse", lse_f, lse_r, rtol));
  for (int i = 0; i < N; i++) {
    EXPECT_TRUE(std::isfinite(loss_f[i])) << i;
    if (targets[i] == k_ignore) {
      EXPECT_EQ(loss_f[i], 0.0f) << i;
    }
    EXPECT_NEAR(loss_f[i], loss_r[i], rtol * 1008.0) << i;
  }
  const float dloss = 0.37f;
  const auto d0 = random_floats((size_t)N * V, 3);  // nonzero: must be added to
  auto d_f = d0, d_r = d0;
  cpu::crossentropy_backward(d_f.data(), logits.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore);
  ref::crossentropy_backward(d_r.data(), logits.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore);
  // Given the same lse, logit - lse is exact in fp32 (Sterbenz), so only exp() rounds.
  EXPECT_TRUE(all_close("crossentropy dlogits", d_f, d_r, fp32_rtol(4)));
  for (int i = 0; i < N; i += 3)  // ignored rows untouched
    for (int v = 0; v < V; v++) EXPECT_EQ(d_f[(size_t)i * V + v], d0[(size_t)i * V + v]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropy,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(3, 17),
                                           std::make_tuple(17, 3), std::make_tuple(33, 33),
                                           std::make_tuple(64, 1000), std::make_tuple(5, 50257)));

class Embedding : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Embedding, ForwardBackwardMatchRefWithRepeatsAndNulls) {
  const auto [B, T, C] = GetParam();
  const int V = 7;  // few tokens: many repeats, the race a naive parallel scatter has
  const auto tokens = random_ints((size_t)B * T, 1, 0, V - 1);
  const auto wte = random_floats((size_t)V * C, 2);
  const auto wpe = random_floats((size_t)T * C, 3);
  std::vector<float> out_f((size_t)B * T * C), out_r(out_f.size());
  cpu::embedding_forward(out_f.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  ref::embedding_forward(out_r.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(all_close("embedding out", out_f, out_r, fp32_rtol(1)));
  const auto dout = random_floats((size_t)B * T * C, 4);
  const auto dwte0 = random_floats((size_t)V * C, 5);
  const auto dwpe0 = random_floats((size_t)T * C, 6);
  for (int mask = 1; mask < 4; mask++) {
    auto dwte_f = dwte0, dwpe_f = dwpe0, dwte_r = dwte0, dwpe_r = dwpe0;
    cpu::embedding_backward(mask & 1 ? dwte_f.data() : nullptr, mask & 2 ? dwpe_f.data() : nullptr,
                            dout.data(), tokens.data(), B, T, C);
    ref::embedding_backward(mask & 1 ? dwte_r.data() : nullptr, mask & 2 ? dwpe_r.data() : nullptr,
                            dout.data(), tokens.data(), B, T, C);
    EXPECT_TRUE(all_close("embedding dwte", dwte_f, dwte_r, fp32_rtol(B * T + 1))) << mask;
    EXPECT_TRUE(all_close("embedding dwpe", dwpe_f, dwpe_r, fp32_rtol(B + 1))) << mask;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Embedding,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(3, 17, 33),
                                           std::make_tuple(2, 33, 3), std::make_tuple(4, 64, 256)));
