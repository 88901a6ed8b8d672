// LayerNorm and GELU: fast against ref.
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

class LayerNorm : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(LayerNorm, ForwardMatchesRef) {
  const auto [N, C] = GetParam();
  // An offset mean: a one-pass E[x^2] - E[x]^2 variance would lose digits here.
  const auto inp = random_floats((size_t)N * C, 1, 2.0f, 5.0f);
  const auto w = random_floats(C, 2);
  const auto b = random_floats(C, 3);
  std::vector<float> out_f((size_t)N * C), mean_f(N), rstd_f(N);
  std::vector<float> out_r((size_t)N * C), mean_r(N), rstd_r(N);
  cpu::layernorm_forward(out_f.data(), mean_f.data(), rstd_f.data(), inp.data(), w.data(), b.data(), N, C);
  ref::layernorm_forward(out_r.data(), mean_r.data(), rstd_r.data(), inp.data(), w.data(), b.data(), N, C);
  // out = (x - mean) * rstd: an error in the mean is amplified by |mean| / std of the
  // inputs, 3.5 / 0.87 ~ 4 for U(2, 5).
  const double rtol = fp32_rtol(C + 1);
  EXPECT_TRUE(all_close("layernorm mean", mean_f, mean_r, rtol));
  EXPECT_TRUE(all_close("layernorm rstd", rstd_f, rstd_r, rtol));
  EXPECT_TRUE(all_close("layernorm out", out_f, out_r, 4 * rtol));
}

TEST_P(LayerNorm, BackwardMatchesRefWithNullsAndAccumulates) {
  const auto [N, C] = GetParam();
  const auto inp = random_floats((size_t)N * C, 4);
  const auto w = random_floats(C, 5);
  const auto b = random_floats(C, 6);
  const auto dout = random_floats((size_t)N * C, 7);
  std::vector<float> out((size_t)N * C), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  const auto dinp0 = random_floats((size_t)N * C, 8);
  const auto dw0 = random_floats(C, 9);
  const auto db0 = random_floats(C, 10);
  for (int mask = 1; mask < 8; mask++) {
    auto dinp_f = dinp0, dw_f = dw0, db_f = db0, dinp_r = dinp0, dw_r = dw0, db_r = db0;
    cpu::layernorm_backward(mask & 1 ? dinp_f.data() : nullptr, mask & 2 ? dw_f.data() : nullptr,
                            mask & 4 ? db_f.data() : nullptr, dout.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    ref::layernorm_backward(mask & 1 ? dinp_r.data() : nullptr, mask & 2 ? dw_r.data() : nullptr,
                            mask & 4 ? db_r.data() : nullptr, dout.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("layernorm dinp", dinp_f, dinp_r, fp32_rtol(C + 1))) << "mask " << mask;
    EXPECT_TRUE(all_close("layernorm dweight", dw_f, dw_r, fp32_rtol(N + 1))) << "mask " << mask;
    EXPECT_TRUE(all_close("layernorm dbias", db_f, db_r, fp32_rtol(N + 1))) << "mask " << mask;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNorm,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(3, 3),
                                           std::make_tuple(17, 33), std::make_tuple(33, 17),
                                           std::make_tuple(64, 768), std::make_tuple(300, 130)));

class Gelu : public ::testing::TestWithParam<int64_t> {};

TEST_P(Gelu, ForwardMatchesRefInPlace) {
  const int64_t n = GetParam();
  const auto inp = random_floats(n, 20, -6.0f, 6.0f);
  std::vector<float> out_f(n), out_r(n);
  cpu::gelu_forward(out_f.data(), inp.data(), n);
  ref::gelu_forward(out_r.data(), inp.data(), n);
  const double rtol = fp32_rtol(8);  // a few roundings of a short formula and tanh
  EXPECT_TRUE(all_close("gelu", out_f, out_r, rtol));
  auto inplace = inp;
  cpu::gelu_forward(inplace.data(), inplace.data(), n);
  EXPECT_TRUE(all_close("gelu in place", inplace, out_r, rtol));
}

TEST_P(Gelu, BackwardMatchesRefAndAccumulates) {
  const int64_t n = GetParam();
  const auto inp = random_floats(n, 21, -6.0f, 6.0f);
  const auto dout = random_floats(n, 22);
  const auto dinp0 = random_floats(n, 23);
  auto d_f = dinp0, d_r = dinp0;
  cpu::gelu_backward(d_f.data(), inp.data(), dout.data(), n);
  ref::gelu_backward(d_r.data(), inp.data(), dout.data(), n);
  EXPECT_TRUE(all_close("gelu dinp", d_f, d_r, fp32_rtol(8)));
}

INSTANTIATE_TEST_SUITE_P(Sizes, Gelu, ::testing::Values(1, 3, 17, 33, 100003));
