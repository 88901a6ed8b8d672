// Incremental decoding's attention (attention_decode: one query row against the cached
// rows 0..pos) against its reference twin, and the twin against row pos of the full
// causal attention's reference on the first pos + 1 rows: the same numbers a decode step
// must reproduce. The cache holds more rows than pos + 1 (Tc > pos + 1), filled with NaN
// past pos, so a read beyond the causal limit fails.
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
using gpumix::kernels::test::all_close;
using gpumix::kernels::test::bf16_out_rtol;
using gpumix::kernels::test::fp32_rtol;
using gpumix::kernels::test::k_bf16_nan;
using gpumix::kernels::test::random_bf16;
using gpumix::kernels::test::random_floats;
using gpumix::kernels::test::to_f32;

namespace {
// (B, Tc, C, NH, pos): pos 0 (one key), inside, and the cache's last row.
using DecodeShape = std::tuple<int, int, int, int, int>;

// Rows past pos poisoned: the kernel must not read them.
template <class T>
void poison_after(std::vector<T>& qkv, int B, int Tc, int C, int pos, T nan) {
  for (int b = 0; b < B; b++)
    for (int64_t i = ((int64_t)b * Tc + pos + 1) * 3 * C; i < ((int64_t)b + 1) * Tc * 3 * C; i++) qkv[i] = nan;
}

// Row pos of each batch of the full reference attention over rows 0..pos: (B, C).
std::vector<float> full_row(const std::vector<float>& qkv, int B, int Tc, int C, int NH, int pos) {
  const int T = pos + 1;
  std::vector<float> first((size_t)B * T * 3 * C);
  for (int b = 0; b < B; b++)
    std::copy(qkv.begin() + (int64_t)b * Tc * 3 * C, qkv.begin() + ((int64_t)b * Tc + T) * 3 * C,
              first.begin() + (int64_t)b * T * 3 * C);
  std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), row((size_t)B * C);
  ref::attention_forward(out.data(), lse.data(), first.data(), B, T, C, NH);
  for (int b = 0; b < B; b++)
    std::copy(out.begin() + ((int64_t)b * T + pos) * C, out.begin() + ((int64_t)b * T + pos + 1) * C,
              row.begin() + (int64_t)b * C);
  return row;
}
}  // namespace

class AttentionDecode : public ::testing::TestWithParam<DecodeShape> {};

TEST_P(AttentionDecode, Fp32MatchesRefAndTheFullAttentionsRow) {
  const auto [B, Tc, C, NH, pos] = GetParam();
  const int HS = C / NH;
  auto qkv = random_floats((size_t)B * Tc * 3 * C, 300 + pos, -2.0f, 2.0f);
  const std::vector<float> full = full_row(qkv, B, Tc, C, NH, pos);
  poison_after(qkv, B, Tc, C, pos, NAN);
  std::vector<float> fast((size_t)B * C, NAN), twin((size_t)B * C, NAN);
  cpu::attention_decode(fast.data(), qkv.data(), B, Tc, C, NH, pos);
  ref::attention_decode(twin.data(), qkv.data(), B, Tc, C, NH, pos);
  const double rtol = fp32_rtol(pos + 1 + HS);  // a softmax sum of pos + 1 HS-term dot products
  EXPECT_TRUE(all_close("decode vs its twin", fast, twin, rtol));
  EXPECT_TRUE(all_close("twin vs the full attention's row", twin, full, fp32_rtol(HS)));
}

TEST_P(AttentionDecode, Bf16MatchesTheTwinOnWidenedInputs) {
  const auto [B, Tc, C, NH, pos] = GetParam();
  const int HS = C / NH;
  auto qkv = random_bf16((size_t)B * Tc * 3 * C, 400 + pos, -2.0f, 2.0f);
  poison_after(qkv, B, Tc, C, pos, k_bf16_nan);
  std::vector<bf16> fast((size_t)B * C, k_bf16_nan), twin((size_t)B * C, k_bf16_nan);
  cpu::attention_decode(fast.data(), qkv.data(), B, Tc, C, NH, pos);
  ref::attention_decode(twin.data(), qkv.data(), B, Tc, C, NH, pos);
  // The reference unrounded: the fp32 twin on the widened inputs.
  std::vector<float> exact((size_t)B * C);
  ref::attention_decode(exact.data(), to_f32(qkv).data(), B, Tc, C, NH, pos);
  EXPECT_TRUE(all_close("bf16 decode", fast, exact, bf16_out_rtol(pos + 1 + HS)));
  EXPECT_TRUE(all_close("bf16 twin", twin, exact, bf16_out_rtol(1)));
}

TEST(AttentionDecodeShape, BadShapesThrow) {
  std::vector<float> qkv(3 * 8 * 4), out(8);
  EXPECT_THROW(cpu::attention_decode(out.data(), qkv.data(), 1, 4, 8, 3, 0), std::invalid_argument);  // C % NH
  EXPECT_THROW(cpu::attention_decode(out.data(), qkv.data(), 1, 4, 8, 2, 4), std::invalid_argument);  // pos >= Tc
  EXPECT_THROW(cpu::attention_decode(out.data(), qkv.data(), 1, 4, 8, 2, -1), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionDecode,
                         ::testing::Values(DecodeShape{1, 5, 8, 2, 0}, DecodeShape{2, 40, 32, 4, 17},
                                           DecodeShape{1, 130, 48, 2, 129}, DecodeShape{3, 70, 24, 3, 65},
                                           DecodeShape{1, 1100, 64, 4, 1030}));
