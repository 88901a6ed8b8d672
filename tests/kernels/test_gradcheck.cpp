// Finite-difference checks of the reference backward kernels against their reference
// forwards, so that a wrong backward (and with it the fast one that must match it) fails.
// The scalar checked is f(x) = sum_i r_i out_i(x) for a random projection r, accumulated
// in double; r is then the dout given to the backward. None of these ops has a kink.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ref.h"

namespace ref = gpumix::kernels::cpu::ref;
using gpumix::kernels::test::all_close;
using gpumix::kernels::test::random_floats;
using gpumix::kernels::test::random_ints;

namespace {

// Central differences with step h = 1e-2 (inputs are O(1)): the truncation error is
// O(h^2) ~ 1e-4, the fp32 rounding of the outputs contributes ~ eps sqrt(M) / h ~ 1e-4 for
// M ~ 1000 outputs; 1e-2 of the gradient's scale is well above both and well below the
// O(1) relative error of a missing or wrong term.
constexpr double k_fd_step = 1e-2;
constexpr double k_fd_rtol = 1e-2;

double project(const std::vector<float>& out, const std::vector<float>& r) {
  double acc = 0.0;
  for (size_t i = 0; i < out.size(); i++) acc += (double)out[i] * r[i];
  return acc;
}

// Compares grad against the central difference of f with respect to each element of x.
void check_fd(const char* what, std::vector<float>& x, const std::function<double()>& f,
              const std::vector<float>& grad) {
  std::vector<float> fd(x.size());
  for (size_t j = 0; j < x.size(); j++) {
    const float xj = x[j];
    x[j] = (float)(xj + k_fd_step);
    const double xp = x[j], fp = f();
    x[j] = (float)(xj - k_fd_step);
    const double xm = x[j], fm = f();
    x[j] = xj;
    fd[j] = (float)((fp - fm) / (xp - xm));  // the steps actually taken, after rounding
  }
  EXPECT_TRUE(all_close(what, grad, fd, k_fd_rtol));
}

}  // namespace

TEST(GradCheck, Matmul) {
  const int N = 5, C = 7, OC = 3;
  auto inp = random_floats(N * C, 1), w = random_floats(OC * C, 2), b = random_floats(OC, 3);
  const auto r = random_floats(N * OC, 4);
  std::vector<float> out(N * OC);
  auto f = [&] {
    ref::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return project(out, r);
  };
  std::vector<float> dinp(N * C, 0.0f), dw(OC * C, 0.0f), db(OC, 0.0f);
  ref::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  check_fd("matmul dinp", inp, f, dinp);
  check_fd("matmul dweight", w, f, dw);
  check_fd("matmul dbias", b, f, db);
}

TEST(GradCheck, BiasAdd) {
  const int N = 6, C = 5;
  const auto inp = random_floats(N * C, 1);
  auto b = random_floats(C, 2);
  const auto r = random_floats(N * C, 3);
  std::vector<float> out(N * C);
  auto f = [&] {
    ref::bias_add(out.data(), inp.data(), b.data(), N, C);
    return project(out, r);
  };
  std::vector<float> db(C, 0.0f);
  ref::bias_backward(db.data(), r.data(), N, C);
  check_fd("bias_backward", b, f, db);
}

TEST(GradCheck, LayerNorm) {
  const int N = 4, C = 9;
  auto inp = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3);
  const auto r = random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto f = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return project(out, r);
  };
  f();
  std::vector<float> dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  ref::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  check_fd("layernorm dinp", inp, f, dinp);
  check_fd("layernorm dweight", w, f, dw);
  check_fd("layernorm dbias", b, f, db);
}

TEST(GradCheck, Gelu) {
  const int n = 64;
  auto inp = random_floats(n, 1, -4.0f, 4.0f);
  const auto r = random_floats(n, 2);
  std::vector<float> out(n);
  auto f = [&] {
    ref::gelu_forward(out.data(), inp.data(), n);
    return project(out, r);
  };
  std::vector<float> dinp(n, 0.0f);
  ref::gelu_backward(dinp.data(), inp.data(), r.data(), n);
  check_fd("gelu dinp", inp, f, dinp);
}

TEST(GradCheck, Attention) {
  for (int T : {1, 3, 17}) {
    const int B = 2, C = 16, NH = 2;
    auto qkv = random_floats(B * T * 3 * C, 10 + T);
    const auto r = random_floats(B * T * C, 20 + T);
    std::vector<float> out(B * T * C), lse(B * NH * T);
    auto f = [&] {
      ref::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
      return project(out, r);
    };
    f();
    std::vector<float> dqkv(qkv.size(), 0.0f);
    ref::attention_backward(dqkv.data(), r.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    SCOPED_TRACE("T=" + std::to_string(T));
    check_fd("attention dqkv", qkv, f, dqkv);
  }
}

TEST(GradCheck, CrossEntropy) {
  const int N = 6, V = 11;
  const int32_t ignore = -1;
  auto logits = random_floats(N * V, 1, -3.0f, 3.0f);
  auto targets = random_ints(N, 2, 0, V - 1);
  targets[2] = ignore;
  const float dloss = 0.7f;
  std::vector<float> losses(N), lse(N);
  auto f = [&] {
    ref::crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, ignore);
    double acc = 0.0;
    for (float l : losses) acc += (double)dloss * l;
    return acc;
  };
  f();
  std::vector<float> dlogits(N * V, 0.0f);
  ref::crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, N, V, ignore);
  check_fd("crossentropy dlogits", logits, f, dlogits);
}

TEST(GradCheck, Embedding) {
  const int B = 2, T = 5, C = 3, V = 4;
  const auto tokens = random_ints(B * T, 1, 0, V - 1);
  auto wte = random_floats(V * C, 2), wpe = random_floats(T * C, 3);
  const auto r = random_floats(B * T * C, 4);
  std::vector<float> out(B * T * C);
  auto f = [&] {
    ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return project(out, r);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  ref::embedding_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  check_fd("embedding dwte", wte, f, dwte);
  check_fd("embedding dwpe", wpe, f, dwpe);
}
