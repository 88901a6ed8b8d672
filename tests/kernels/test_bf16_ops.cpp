// bf16 layernorm, GELU, cross-entropy, embedding, AdamW, elementwise kernels, reductions
// and conversions: the fast kernels (every instruction-set path) against the fp32
// reference twin on the widened inputs, outputs poisoned with NaN first; bit-exact where
// the kernel does one fp32 operation and one rounding.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/half_types.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ref.h"

using gpumix::bf16;

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using namespace gpumix::kernels::test;

class LayerNormBf16 : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(LayerNormBf16, ForwardMatchesRef) {
  const auto& params = GetParam();  // not a structured binding: clang 14 lambdas cannot capture one
  const int N = std::get<0>(params), C = std::get<1>(params);
  // An offset mean: a one-pass E[x^2] - E[x]^2 variance would lose digits here.
  const auto inp = random_bf16((size_t)N * C, 1, 2.0f, 5.0f);
  const auto w = random_bf16(C, 2), b = random_bf16(C, 3);
  std::vector<float> out_r((size_t)N * C), mean_r(N), rstd_r(N);
  ref::layernorm_forward(out_r.data(), mean_r.data(), rstd_r.data(), to_f32(inp).data(),
                         to_f32(w).data(), to_f32(b).data(), N, C);
  for_each_isa([&] {
    std::vector<bf16> out((size_t)N * C, k_bf16_nan);
    std::vector<float> mean(N, NAN), rstd(N, NAN);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    // Statistics in fp32 over C terms; out = (x - mean) * rstd * w + b: an error in the
    // mean is amplified by |mean| / std of the inputs, 3.5 / 0.87 ~ 4 for U(2, 5).
    EXPECT_TRUE(all_close("bf16 layernorm mean", mean, mean_r, fp32_rtol(C + 1)));
    EXPECT_TRUE(all_close("bf16 layernorm rstd", rstd, rstd_r, fp32_rtol(C + 1)));
    EXPECT_TRUE(all_close("bf16 layernorm out", out, out_r, bf16_out_rtol(0) + 4 * fp32_rtol(C + 1)));
    // mean and rstd may be null (cuda.h): out is the same.
    std::vector<bf16> out2((size_t)N * C, k_bf16_nan);
    cpu::layernorm_forward(out2.data(), nullptr, nullptr, inp.data(), w.data(), b.data(), N, C);
    EXPECT_EQ(out2, out);
  });
}

TEST_P(LayerNormBf16, BackwardMatchesRefWithNullsAndAccumulates) {
  const auto& params = GetParam();
  const int N = std::get<0>(params), C = std::get<1>(params);
  const auto inp = random_bf16((size_t)N * C, 4), w = random_bf16(C, 5), b = random_bf16(C, 6),
             dout = random_bf16((size_t)N * C, 7);
  std::vector<float> out((size_t)N * C), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), to_f32(inp).data(), to_f32(w).data(),
                         to_f32(b).data(), N, C);
  const auto dinp0 = random_bf16((size_t)N * C, 8);
  const auto dw0 = random_floats(C, 9), db0 = random_floats(C, 10);
  for_each_isa([&] {
    for (int mask = 1; mask < 8; mask++) {
      auto dinp = dinp0;
      auto dw = dw0, db = db0, dw_r = dw0, db_r = db0;
      auto dinp_r = to_f32(dinp0);
      cpu::layernorm_backward(mask & 1 ? dinp.data() : nullptr, mask & 2 ? dw.data() : nullptr,
                              mask & 4 ? db.data() : nullptr, dout.data(), inp.data(), w.data(),
                              mean.data(), rstd.data(), N, C);
      ref::layernorm_backward(mask & 1 ? dinp_r.data() : nullptr, mask & 2 ? dw_r.data() : nullptr,
                              mask & 4 ? db_r.data() : nullptr, to_f32(dout).data(), to_f32(inp).data(),
                              to_f32(w).data(), mean.data(), rstd.data(), N, C);
      EXPECT_TRUE(all_close("bf16 layernorm dinp", dinp, dinp_r, bf16_out_rtol(C + 1))) << "mask " << mask;
      EXPECT_TRUE(all_close("bf16 layernorm dweight", dw, dw_r, fp32_rtol(N + 1))) << "mask " << mask;
      EXPECT_TRUE(all_close("bf16 layernorm dbias", db, db_r, fp32_rtol(N + 1))) << "mask " << mask;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormBf16,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(1, 7),
                                           std::make_tuple(3, 17), std::make_tuple(33, 100),
                                           std::make_tuple(40, 768), std::make_tuple(300, 130)));

class Bf16Sizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(Bf16Sizes, GeluMatchesRef) {
  const int64_t n = GetParam();
  const auto x = random_bf16(n, 1, -6.0f, 6.0f), dy = random_bf16(n, 2), dx0 = random_bf16(n, 3);
  std::vector<float> y_r(n);
  ref::gelu_forward(y_r.data(), to_f32(x).data(), n);
  auto dx_r = to_f32(dx0);
  ref::gelu_backward(dx_r.data(), to_f32(x).data(), to_f32(dy).data(), n);
  for_each_isa([&] {
    std::vector<bf16> y(n, k_bf16_nan);
    cpu::gelu_forward(y.data(), x.data(), n);
    // exp_vec is within 2 ulp of exp: a few fp32 roundings before the bf16 one.
    EXPECT_TRUE(all_close("bf16 gelu", y, y_r, bf16_out_rtol(8)));
    auto inplace = x;
    cpu::gelu_forward(inplace.data(), inplace.data(), n);
    EXPECT_EQ(inplace, y);
    auto dx = dx0;
    cpu::gelu_backward(dx.data(), x.data(), dy.data(), n);
    EXPECT_TRUE(all_close("bf16 gelu dinp", dx, dx_r, bf16_out_rtol(8)));
  });
}

TEST_P(Bf16Sizes, ElementwiseAreTheRoundedFp32Results) {
  const int64_t n = GetParam();
  const auto a = random_bf16(n, 1), b = random_bf16(n, 2);
  const auto af = to_f32(a), bf = to_f32(b);
  std::vector<float> sum(n), prod(n);
  for (int64_t i = 0; i < n; i++) {
    sum[i] = af[i] + bf[i];
    prod[i] = af[i] * -1.7f;
  }
  for_each_isa([&] {
    // add and scale: one fp32 operation, one rounding: bit-exact.
    std::vector<bf16> out(n, k_bf16_nan);
    cpu::add(out.data(), a.data(), b.data(), n);
    EXPECT_EQ(out, to_bf16(sum));
    auto x = a;
    cpu::add(x.data(), x.data(), b.data(), n);  // out aliases a
    EXPECT_EQ(x, to_bf16(sum));
    std::fill(out.begin(), out.end(), k_bf16_nan);
    cpu::scale(out.data(), a.data(), -1.7f, n);
    EXPECT_EQ(out, to_bf16(prod));
    // axpy: out + s * a in fp32 (two roundings), then bf16.
    auto y = b;
    auto y_r = bf;
    cpu::axpy(y.data(), a.data(), 0.3f, n);
    ref::axpy(y_r.data(), af.data(), 0.3f, n);
    EXPECT_TRUE(all_close("bf16 axpy", y, y_r, bf16_out_rtol(2)));
    auto z = random_floats(n, 5), z_r = z;  // fp32 out += s * bf16 a
    cpu::axpy(z.data(), a.data(), 0.3f, n);
    ref::axpy(z_r.data(), af.data(), 0.3f, n);
    EXPECT_TRUE(all_close("fp32 += bf16 axpy", z, z_r, fp32_rtol(2)));
    // fill writes every element, rounding the value once.
    std::vector<bf16> f(n, k_bf16_nan);
    cpu::fill(f.data(), 1.0f / 3.0f, n);
    EXPECT_EQ(f, std::vector<bf16>(n, gpumix::bf16(1.0f / 3.0f)));
    std::vector<float> ff(n, NAN);
    cpu::fill(ff.data(), -2.5f, n);
    EXPECT_EQ(ff, std::vector<float>(n, -2.5f));
  });
}

TEST_P(Bf16Sizes, ReductionsMatchRefInDouble) {
  const int64_t n = GetParam();
  const auto a = random_bf16(n, 3, -1.0f, 3.0f);
  const auto af = to_f32(a);
  // Both accumulate in double: the order differs, the error is double rounding.
  const double tol_rel = 8 * DBL_EPSILON * std::sqrt((double)n);
  double abs_sum = 0.0;
  for (float v : af) abs_sum += std::fabs(v);
  const double s_r = ref::sum(af.data(), n), q_r = ref::sum_squares(af.data(), n);
  for_each_isa([&] {
    EXPECT_NEAR(cpu::sum(a.data(), n), s_r, tol_rel * abs_sum);
    EXPECT_NEAR(cpu::sum_squares(a.data(), n), q_r, tol_rel * q_r);
    EXPECT_NEAR(cpu::sum(af.data(), n), s_r, tol_rel * abs_sum);
  });
}

TEST_P(Bf16Sizes, AdamWMatchesRefAndWritesTheBf16Copy) {
  const int64_t n = GetParam();
  auto p = random_floats(n, 1), p_r = p;
  std::vector<float> m(n, 0.0f), v(n, 0.0f), m_r(n, 0.0f), v_r(n, 0.0f);
  for_each_isa([&] {
    for (int step = 1; step <= 3; step++) {
      const auto g = random_floats(n, 10 + step, -0.1f, 0.1f);
      std::vector<bf16> copy(n, k_bf16_nan);
      cpu::adamw_step(p.data(), copy.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      ref::adamw_step(p_r.data(), g.data(), m_r.data(), v_r.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      EXPECT_EQ(copy, to_bf16(p));  // the copy is exactly the new master weights, rounded
      // Each step rounds a handful of times; the update's size (lr) bounds the absolute error.
      EXPECT_TRUE(all_close("adamw param", p, p_r, fp32_rtol(3 * 8)));
      EXPECT_TRUE(all_close("adamw m", m, m_r, fp32_rtol(3 * 8)));
      EXPECT_TRUE(all_close("adamw v", v, v_r, fp32_rtol(3 * 8)));
      p_r = p, m_r = m, v_r = v;  // the next path starts where this one ended
    }
  });
}

INSTANTIATE_TEST_SUITE_P(N, Bf16Sizes, ::testing::Values(1, 3, 17, 33, 1000, 100003));

TEST(Bf16Conversion, BitExactOnEveryPathOverAllUpperHalves) {
  // Every bf16 value (all 2^16 upper halves, NaNs, infinities and subnormals included)
  // under lower halves at, around and away from the rounding ties, plus random words:
  // f32_to_bf16 equals kernels/half_types.h's scalar rounding on every path, and widening is
  // exact.
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 65536; hi++)
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u}) {
      const uint32_t u = hi << 16 | lo;
      float f;
      std::memcpy(&f, &u, 4);
      x.push_back(f);
    }
  std::mt19937 gen(5);
  for (int i = 0; i < 100000; i++) {
    const uint32_t u = gen();
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  const int64_t n = (int64_t)x.size();
  std::vector<bf16> expected(n);
  for (int64_t i = 0; i < n; i++) expected[i] = gpumix::bf16(x[i]);
  for_each_isa([&] {
    std::vector<bf16> h(n);
    cpu::f32_to_bf16(h.data(), x.data(), n);
    ASSERT_EQ(0, std::memcmp(h.data(), expected.data(), n * 2)) << "f32_to_bf16 differs from half_types.h";
    std::vector<float> back(n);
    cpu::bf16_to_f32(back.data(), h.data(), n);
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      std::memcpy(&u, &back[i], 4);
      ASSERT_EQ(u, (uint32_t)h[i].bits << 16) << i;
    }
  });
}

class CrossEntropyBf16 : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CrossEntropyBf16, ForwardBackwardMatchRefWithIgnoreIndex) {
  constexpr int32_t k_ignore = -100;
  const auto& params = GetParam();
  const int N = std::get<0>(params), V = std::get<1>(params);
  // Logits around 100: without the max subtraction exp() would overflow to inf.
  auto lf = random_floats((size_t)N * V, 1, -8.0f, 8.0f);
  for (auto& x : lf) x += 100.0f;
  const auto logits = to_bf16(lf);
  const auto logits32 = to_f32(logits);
  auto targets = random_ints(N, 2, 0, V - 1);
  for (int i = 0; i < N; i += 3) targets[i] = k_ignore;
  std::vector<float> loss_r(N), lse_r(N);
  ref::crossentropy_forward(loss_r.data(), lse_r.data(), logits32.data(), targets.data(), N, V, k_ignore);
  const float dloss = 0.37f;
  const auto d0 = random_bf16((size_t)N * V, 3);
  auto d_r = to_f32(d0);
  ref::crossentropy_backward(d_r.data(), logits32.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore);
  std::vector<float> fresh_r((size_t)N * V, 0.0f);
  ref::crossentropy_backward(fresh_r.data(), logits32.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore);
  for_each_isa([&] {
    std::vector<float> loss(N, NAN), lse(N, NAN);
    cpu::crossentropy_forward(loss.data(), lse.data(), logits.data(), targets.data(), N, V, k_ignore);
    // lse ~ 100 in fp32 over V terms; loss = lse - logit is judged at the scale of lse.
    EXPECT_TRUE(all_close("bf16 crossentropy lse", lse, lse_r, fp32_rtol(V + 1)));
    for (int i = 0; i < N; i++) {
      if (targets[i] == k_ignore) {
        EXPECT_EQ(loss[i], 0.0f) << i;
      }
      EXPECT_NEAR(loss[i], loss_r[i], fp32_rtol(V + 1) * 108.0) << i;
    }
    // Accumulating: dlogits += ...; ignored rows keep their values exactly.
    auto d = d0;
    cpu::crossentropy_backward(d.data(), logits.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore);
    EXPECT_TRUE(all_close("bf16 dlogits (accumulate)", d, d_r, bf16_out_rtol(4)));
    for (int i = 0; i < N; i += 3)
      EXPECT_EQ(0, std::memcmp(d.data() + (size_t)i * V, d0.data() + (size_t)i * V, V * 2)) << i;
    // Writing: every element written (poisoned first), ignored rows zero.
    std::vector<bf16> w((size_t)N * V, k_bf16_nan);
    cpu::crossentropy_backward(w.data(), logits.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore, false);
    EXPECT_TRUE(all_close("bf16 dlogits (write)", w, fresh_r, bf16_out_rtol(4)));
    // ... also in place over the logits.
    auto alias = logits;
    cpu::crossentropy_backward(alias.data(), alias.data(), lse_r.data(), targets.data(), dloss, N, V, k_ignore, false);
    EXPECT_EQ(alias, w);
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyBf16,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(1, 2),
                                           std::make_tuple(4, 17), std::make_tuple(9, 301),
                                           std::make_tuple(33, 1000), std::make_tuple(64, 8193)));

class EmbeddingBf16 : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(EmbeddingBf16, ForwardIsTheRoundedSumBackwardMatchesRef) {
  const auto& params = GetParam();
  const int B = std::get<0>(params), T = std::get<1>(params), C = std::get<2>(params), V = std::get<3>(params);
  const auto wte = random_bf16((size_t)V * C, 1), wpe = random_bf16((size_t)T * C, 2);
  auto tokens = random_ints((size_t)B * T, 3, 0, V - 1);
  tokens[0] = tokens.back();  // a repeated token: its gradient rows add up
  std::vector<float> sum((size_t)B * T * C);
  const auto e = to_f32(wte), p = to_f32(wpe);
  for (int i = 0; i < B * T; i++)
    for (int c = 0; c < C; c++)
      sum[(size_t)i * C + c] = e[(size_t)tokens[i] * C + c] + p[(size_t)(i % T) * C + c];
  const auto dout = random_bf16((size_t)B * T * C, 4);
  const auto dwte0 = random_floats((size_t)V * C, 5), dwpe0 = random_floats((size_t)T * C, 6);
  auto dwte_r = dwte0, dwpe_r = dwpe0;
  ref::embedding_backward(dwte_r.data(), dwpe_r.data(), to_f32(dout).data(), tokens.data(), B, T, C);
  for_each_isa([&] {
    std::vector<bf16> out((size_t)B * T * C, k_bf16_nan);
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    EXPECT_EQ(out, to_bf16(sum));
    auto dwte = dwte0, dwpe = dwpe0;
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    // Deterministic and in the reference's order: sums in position order.
    EXPECT_TRUE(all_close("bf16 dwte", dwte, dwte_r, fp32_rtol(B * T + 1)));
    EXPECT_TRUE(all_close("bf16 dwpe", dwpe, dwpe_r, fp32_rtol(B + 1)));
    auto dwte2 = dwte0;
    cpu::embedding_backward(dwte2.data(), nullptr, dout.data(), tokens.data(), B, T, C);
    EXPECT_EQ(dwte2, dwte);
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingBf16,
                         ::testing::Values(std::make_tuple(1, 1, 1, 1), std::make_tuple(2, 3, 17, 5),
                                           std::make_tuple(3, 37, 96, 301), std::make_tuple(4, 64, 130, 1000)));

TEST(RefBf16Twins, AreTheRoundedFp32Twins) {
  // The bf16 reference twins widen, run the fp32 twin and round once: spot checks of
  // that contract on two ops with bf16 outputs (the rest share the same helpers).
  const int N = 7, C = 33, OC = 9;
  const auto x = random_bf16((size_t)N * C, 1), w = random_bf16((size_t)OC * C, 2), b = random_bf16(OC, 3);
  std::vector<bf16> out((size_t)N * OC);
  std::vector<float> out_r((size_t)N * OC);
  ref::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  ref::matmul_forward(out_r.data(), to_f32(x).data(), to_f32(w).data(), to_f32(b).data(), N, C, OC);
  EXPECT_EQ(out, to_bf16(out_r));
  std::vector<bf16> g((size_t)N * C);
  std::vector<float> g_r((size_t)N * C);
  ref::gelu_forward(g.data(), x.data(), (int64_t)N * C);
  ref::gelu_forward(g_r.data(), to_f32(x).data(), (int64_t)N * C);
  EXPECT_EQ(g, to_bf16(g_r));
}
