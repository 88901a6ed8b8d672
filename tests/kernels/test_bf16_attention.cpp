// bf16 fused causal attention (every instruction-set path) against the fp32 reference that
// stores the whole (T, T) matrix, on the widened inputs. Tolerance: the kernels may run
// their tile products on bf16-rounded probabilities and score gradients (the avx512_bf16
// path does), so each output sums up to T terms that carry 2^-8 relative error each:
// bf16_rtol(T) (kernel_test_util.h), plus the final rounding.
#include <gtest/gtest.h>

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
// (B, T, C, NH): T = 1, odd T and T crossing the 64-row tiles; head sizes 8, 24, 64, and
// an odd one (7: the bf16 tiles pad their pairs).
using AttnShape = std::tuple<int, int, int, int>;
}  // namespace

class AttentionBf16 : public ::testing::TestWithParam<AttnShape> {};

TEST_P(AttentionBf16, ForwardMatchesRef) {
  const auto& params = GetParam();  // not a structured binding: clang 14 lambdas cannot capture one
  const int B = std::get<0>(params), T = std::get<1>(params), C = std::get<2>(params), NH = std::get<3>(params);
  // Inputs in [-2, 2): scores up to ~HS, so the softmax is peaked and the online max
  // really moves between key blocks.
  const auto qkv = random_bf16((size_t)B * T * 3 * C, 100 + T, -2.0f, 2.0f);
  std::vector<float> out_r((size_t)B * T * C), lse_r((size_t)B * NH * T);
  ref::attention_forward(out_r.data(), lse_r.data(), to_f32(qkv).data(), B, T, C, NH);
  for_each_isa([&] {
    std::vector<bf16> out((size_t)B * T * C, k_bf16_nan);
    std::vector<float> lse((size_t)B * NH * T, NAN);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    EXPECT_TRUE(all_close("bf16 attention out", out, out_r, bf16_rtol(T)));
    // lse comes from the fp32 scores (q.k of exact bf16 inputs, HS terms) and fp32 sums.
    EXPECT_TRUE(all_close("bf16 attention lse", lse, lse_r, fp32_rtol(T + C / NH)));
  });
}

TEST_P(AttentionBf16, BackwardMatchesRefAndAccumulates) {
  const auto& params = GetParam();
  const int B = std::get<0>(params), T = std::get<1>(params), C = std::get<2>(params), NH = std::get<3>(params);
  const auto qkv = random_bf16((size_t)B * T * 3 * C, 200 + T, -2.0f, 2.0f);
  const auto dout = random_bf16((size_t)B * T * C, 300 + T);
  const auto dqkv0 = random_bf16(qkv.size(), 400 + T);  // nonzero: must be added to
  const auto qkv32 = to_f32(qkv), dout32 = to_f32(dout);
  std::vector<float> out32((size_t)B * T * C), lse((size_t)B * NH * T);
  ref::attention_forward(out32.data(), lse.data(), qkv32.data(), B, T, C, NH);
  const auto out = to_bf16(out32);  // what the forward hands the backward
  std::vector<float> z_r(qkv.size(), 0.0f);
  ref::attention_backward(z_r.data(), dout32.data(), qkv32.data(), out32.data(), lse.data(), B, T, C, NH);
  auto d_r = to_f32(dqkv0);
  for (size_t i = 0; i < d_r.size(); i++) d_r[i] += z_r[i];
  for_each_isa([&] {
    // From zero: the increments alone, every element of dqkv written.
    std::vector<bf16> z(qkv.size(), bf16{});
    cpu::attention_backward(z.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    // D_i = dout_i . out_i takes the bf16-rounded out: 2^-8 more on each score gradient.
    EXPECT_TRUE(all_close("bf16 attention dqkv from zero", z, z_r, bf16_rtol(T)));
    auto d = dqkv0;
    cpu::attention_backward(d.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    EXPECT_TRUE(all_close("bf16 attention dqkv accumulates", d, d_r, bf16_rtol(T)));
  });
}

TEST_P(AttentionBf16, FastForwardThenBackwardMatchesRef) {
  // The pair as training uses it: the fast backward consumes the fast forward's out, lse.
  const auto& params = GetParam();
  const int B = std::get<0>(params), T = std::get<1>(params), C = std::get<2>(params), NH = std::get<3>(params);
  const auto qkv = random_bf16((size_t)B * T * 3 * C, 500 + T, -2.0f, 2.0f);
  const auto dout = random_bf16((size_t)B * T * C, 600 + T);
  std::vector<float> d_r(qkv.size(), 0.0f), o32((size_t)B * T * C), l32((size_t)B * NH * T);
  ref::attention_backward(d_r.data(), to_f32(dout).data(), to_f32(qkv).data(), o32.data(), l32.data(),
                          B, T, C, NH);
  for_each_isa([&] {
    std::vector<bf16> out((size_t)B * T * C, k_bf16_nan);
    std::vector<float> lse((size_t)B * NH * T, NAN);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    std::vector<bf16> d(qkv.size(), bf16{});
    cpu::attention_backward(d.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    EXPECT_TRUE(all_close("bf16 attention dqkv (fast fwd + bwd)", d, d_r, bf16_rtol(T)));
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionBf16,
    ::testing::Values(AttnShape{1, 1, 16, 2}, AttnShape{2, 3, 16, 2}, AttnShape{1, 17, 48, 2},
                      AttnShape{2, 33, 16, 2}, AttnShape{1, 64, 64, 1}, AttnShape{2, 65, 48, 2},
                      AttnShape{2, 130, 128, 2}, AttnShape{1, 200, 72, 3}, AttnShape{2, 37, 21, 3},
                      AttnShape{1, 129, 21, 3}));
