// The reference kernels on tiny cases computed by hand: the oracles are checked too.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ref.h"

namespace ref = gpumix::kernels::cpu::ref;

namespace {
constexpr float k_tol = 1e-6f;  // a few fp32 roundings of O(1) values
}

TEST(RefHand, Gemm2x2) {
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  float c[] = {1, 1, 1, 1};
  // C = 2 * A @ B + 1 * C: A@B = [[19, 22], [43, 50]]
  ref::gemm(false, false, 2, 2, 2, 2.0f, a, 2, b, 2, 1.0f, c, 2);
  EXPECT_EQ(c[0], 39.0f);
  EXPECT_EQ(c[1], 45.0f);
  EXPECT_EQ(c[2], 87.0f);
  EXPECT_EQ(c[3], 101.0f);
  // A^T @ B^T = (B A)^T: B A = [[23, 34], [31, 46]], transposed [[23, 31], [34, 46]].
  ref::gemm(true, true, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  EXPECT_EQ(c[0], 23.0f);
  EXPECT_EQ(c[1], 31.0f);
  EXPECT_EQ(c[2], 34.0f);
  EXPECT_EQ(c[3], 46.0f);
}

TEST(RefHand, MatmulWithBias) {
  const float inp[] = {1, 2}, w[] = {3, 4, 5, 6}, bias[] = {0.5f, -1};
  float out[2];
  ref::matmul_forward(out, inp, w, bias, 1, 2, 2);
  EXPECT_EQ(out[0], 11.5f);  // 1*3 + 2*4 + 0.5
  EXPECT_EQ(out[1], 16.0f);  // 1*5 + 2*6 - 1
}

TEST(RefHand, LayerNormOf123) {
  const float x[] = {1, 2, 3}, w[] = {1, 1, 1}, b[] = {0, 0, 0};
  float out[3], mean, rstd;
  ref::layernorm_forward(out, &mean, &rstd, x, w, b, 1, 3);
  // mean 2, biased variance 2/3, rstd = 1/sqrt(2/3 + 1e-5)
  const double r = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  EXPECT_NEAR(mean, 2.0f, k_tol);
  EXPECT_NEAR(rstd, r, k_tol);
  EXPECT_NEAR(out[0], -r, k_tol);
  EXPECT_NEAR(out[1], 0.0f, k_tol);
  EXPECT_NEAR(out[2], r, k_tol);
}

TEST(RefHand, GeluValues) {
  const float x[] = {0.0f, 1.0f, -1.0f, 3.0f};
  float y[4];
  ref::gelu_forward(y, x, 4);
  EXPECT_EQ(y[0], 0.0f);
  // 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.841192
  EXPECT_NEAR(y[1], 0.8411920f, k_tol);
  EXPECT_NEAR(y[2], -0.1588080f, k_tol);
  EXPECT_NEAR(y[3], 2.9963627f, 4 * k_tol);
  float d[1] = {0.0f};
  const float one = 1.0f, zero = 0.0f;
  ref::gelu_backward(d, &zero, &one, 1);
  EXPECT_NEAR(d[0], 0.5f, k_tol);  // GELU'(0) = 1/2
}

TEST(RefHand, CrossEntropyOfKnownLogits) {
  const float logits[] = {1, 2, 3, 1, 2, 3};
  const int32_t targets[] = {2, -1};
  float losses[2], lse[2];
  ref::crossentropy_forward(losses, lse, logits, targets, 2, 3, -1);
  // lse = 3 + log(1 + e^-1 + e^-2); loss = lse - 3
  const double l = 3.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2.0));
  EXPECT_NEAR(lse[0], l, k_tol * 4);
  EXPECT_NEAR(losses[0], 0.40760596f, k_tol);
  EXPECT_EQ(losses[1], 0.0f);  // ignored row
  EXPECT_NEAR(lse[1], l, k_tol * 4);  // still written
  float dl[6] = {0, 0, 0, 0, 0, 0};
  ref::crossentropy_backward(dl, logits, lse, targets, 1.0f, 2, 3, -1);
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(dl[0], std::exp(1.0) / s, k_tol);
  EXPECT_NEAR(dl[1], std::exp(2.0) / s, k_tol);
  EXPECT_NEAR(dl[2], std::exp(3.0) / s - 1.0, k_tol);
  for (int v = 3; v < 6; v++) EXPECT_EQ(dl[v], 0.0f);
}

TEST(RefHand, AttentionT1ReturnsV) {
  const int C = 4, NH = 2;
  const float qkv[] = {1, 2, 3, 4, /*k*/ 5, 6, 7, 8, /*v*/ 9, 10, 11, 12};
  float out[4], lse[2];
  ref::attention_forward(out, lse, qkv, 1, 1, C, NH);
  for (int c = 0; c < C; c++) EXPECT_EQ(out[c], qkv[2 * C + c]);
  // One key per row: lse is that row's only scaled score, q.k / sqrt(HS).
  EXPECT_NEAR(lse[0], (1 * 5 + 2 * 6) / std::sqrt(2.0), 4 * k_tol * 12);
  EXPECT_NEAR(lse[1], (3 * 7 + 4 * 8) / std::sqrt(2.0), 4 * k_tol * 37);
}

TEST(RefHand, AttentionEqualScoresAverageV) {
  // T = 2, one head of size 1, q = 0: both keys score 0, so row 1 averages v0 and v1,
  // while row 0 (causal) sees only v0.
  const float qkv[] = {0, 1, 2, /*t=1*/ 0, 5, 6};
  float out[2], lse[2];
  ref::attention_forward(out, lse, qkv, 1, 2, 1, 1);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 4.0f);
  EXPECT_NEAR(lse[1], std::log(2.0), k_tol);
}

TEST(RefHand, EmbeddingAndBackward) {
  const int32_t tokens[] = {1, 1};
  const float wte[] = {0, 0, 1, 2}, wpe[] = {10, 20, 30, 40};
  float out[4];
  ref::embedding_forward(out, tokens, wte, wpe, 1, 2, 2);
  EXPECT_EQ(out[0], 11.0f);
  EXPECT_EQ(out[3], 42.0f);
  float dwte[4] = {0, 0, 0, 0}, dwpe[4] = {0, 0, 0, 0};
  const float dout[] = {1, 2, 3, 4};
  ref::embedding_backward(dwte, dwpe, dout, tokens, 1, 2, 2);
  EXPECT_EQ(dwte[2], 4.0f);  // token 1 twice: 1 + 3
  EXPECT_EQ(dwte[3], 6.0f);
  EXPECT_EQ(dwpe[3], 4.0f);
}

TEST(RefHand, AdamWFirstStep) {
  // Step 1: mhat = g, vhat = g^2, so the update is lr * g / (|g| + eps) ~ lr * sign(g),
  // after the decoupled decay p *= 1 - lr * wd.
  float p = 2.0f, m = 0.0f, v = 0.0f;
  const float g = -0.5f, lr = 0.1f, wd = 0.01f;
  ref::adamw_step(&p, &g, &m, &v, 1, lr, 0.9f, 0.999f, 1e-8f, wd, 1);
  EXPECT_NEAR(p, 2.0 * (1.0 - 0.1 * 0.01) + 0.1 * 0.5 / (0.5 + 1e-8), k_tol * 4);
  EXPECT_NEAR(m, -0.05f, k_tol);
  EXPECT_NEAR(v, 0.00025f, k_tol);
}

TEST(RefHand, Reductions) {
  const float a[] = {1, 2, 3};
  EXPECT_EQ(ref::sum(a, 3), 6.0);
  EXPECT_EQ(ref::sum_squares(a, 3), 14.0);
  EXPECT_EQ(ref::sum(a, 0), 0.0);
}
