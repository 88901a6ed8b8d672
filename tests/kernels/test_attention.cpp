// Fused (flash-style) attention against the reference that stores the whole (T, T) matrix.
#include <gtest/gtest.h>

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

namespace {
// (B, T, C, NH): T crosses the 64-row tiles; HS = C / NH is 8 or 16 (or 24).
using AttnShape = std::tuple<int, int, int, int>;
}  // namespace

class Attention : public ::testing::TestWithParam<AttnShape> {};

TEST_P(Attention, ForwardMatchesRef) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  // Inputs in [-2, 2): scores up to ~HS, so the softmax is peaked and the online max
  // really moves between key blocks.
  const auto qkv = random_floats((size_t)B * T * 3 * C, 100 + T, -2.0f, 2.0f);
  std::vector<float> out_f((size_t)B * T * C), lse_f((size_t)B * NH * T);
  std::vector<float> out_r(out_f.size()), lse_r(lse_f.size());
  cpu::attention_forward(out_f.data(), lse_f.data(), qkv.data(), B, T, C, NH);
  ref::attention_forward(out_r.data(), lse_r.data(), qkv.data(), B, T, C, NH);
  const double rtol = fp32_rtol(T + HS);  // a softmax sum of T terms of HS-term dot products
  EXPECT_TRUE(all_close("attention out", out_f, out_r, rtol));
  EXPECT_TRUE(all_close("attention lse", lse_f, lse_r, rtol));
}

TEST_P(Attention, BackwardMatchesRefAndAccumulates) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  const auto qkv = random_floats((size_t)B * T * 3 * C, 200 + T, -2.0f, 2.0f);
  const auto dout = random_floats((size_t)B * T * C, 300 + T);
  const auto dqkv0 = random_floats(qkv.size(), 400 + T);  // nonzero: must be added to
  std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T);
  ref::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  auto d_f = dqkv0, d_r = dqkv0;
  cpu::attention_backward(d_f.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  ref::attention_backward(d_r.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  const double rtol = fp32_rtol(T + HS);
  EXPECT_TRUE(all_close("attention dqkv", d_f, d_r, rtol));
  // Without the starting values, the increments alone still agree (tests they are added
  // rather than overwritten, at a scale where the increments dominate).
  std::vector<float> z_f(qkv.size(), 0.0f), z_r(qkv.size(), 0.0f);
  cpu::attention_backward(z_f.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  ref::attention_backward(z_r.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  EXPECT_TRUE(all_close("attention dqkv from zero", z_f, z_r, rtol));
  for (size_t i = 0; i < z_f.size(); i++) z_f[i] += dqkv0[i];
  EXPECT_TRUE(all_close("attention dqkv accumulates", d_f, z_f, rtol));
}

TEST_P(Attention, FusedForwardThenBackwardMatchesRef) {
  // The pair as training uses it: the fast backward consumes the fast forward's out, lse.
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  const auto qkv = random_floats((size_t)B * T * 3 * C, 500 + T, -2.0f, 2.0f);
  const auto dout = random_floats((size_t)B * T * C, 600 + T);
  std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  std::vector<float> d_f(qkv.size(), 0.0f), d_r(qkv.size(), 0.0f);
  cpu::attention_backward(d_f.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  ref::attention_backward(d_r.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  EXPECT_TRUE(all_close("attention dqkv (fast fwd + bwd)", d_f, d_r, fp32_rtol(T + HS)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Attention,
    ::testing::Values(AttnShape{1, 1, 16, 2}, AttnShape{2, 3, 16, 2}, AttnShape{1, 17, 32, 2},
                      AttnShape{2, 33, 16, 2}, AttnShape{1, 64, 32, 2}, AttnShape{2, 64, 16, 1},
                      AttnShape{1, 65, 48, 2}, AttnShape{2, 130, 32, 4},
                      AttnShape{1, 200, 72, 3}, AttnShape{2, 37, 21, 3}));
