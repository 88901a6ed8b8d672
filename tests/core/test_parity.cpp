// One list of op cases (kCases), run through core/ops on every backend and 16-bit compute
// dtype this build has (the CPU in bf16; a GPU in bf16 and in f16), each against the CPU in
// fp32 on the same inputs (in the spirit of ggml's test-backend-ops). A new dtype or backend
// adds a row to kTargets, a new op a row to kCases; no parity code per op.
//
// Inputs: uniform values exactly representable in fp32, bf16 and f16 (rounded to bf16, tiny
// ones flushed to 0, so f16 holds them too). Each case names its outputs' roundings R in
// the compute dtype (0: an fp32 output, such as a parameter gradient) and its reduction
// length k; the allowance is test::half_rtol(dtype, R, k) of the output's scale
// (test::close_to_scale). Without a GPU the CUDA rows skip.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/precision.h"
#include "core/runtime.h"
#include "test_util.h"

namespace gpumix {
namespace {

// The tensors of one case on one device: inputs made by `input` (float values in the compute
// dtype, or fp32 where the op's contract wants fp32), outputs to compare.
struct Env {
  Device dev;
  DType dt;
  // Uniform [lo, hi) values of `shape` (the same for every target: a pure function of seed),
  // in the compute dtype (fp32 = false) or fp32.
  Tensor input(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f, bool fp32 = false) const {
    std::vector<float> v = test::bf16_values(shape.numel(), seed, lo, hi);
    for (float& x : v)
      if (std::fabs(x) < 1.0f / 16384) x = 0.0f;  // below f16's normals: not exact in both
    return Tensor::from_vector(v, shape).to(fp32 ? DType::f32 : dt).to(dev);
  }
  Tensor out(const Shape& shape, bool fp32 = false) const {
    return Tensor::full(shape, NAN, fp32 ? DType::f32 : dt, dev);  // poisoned
  }
};

struct Output {
  std::string name;
  Tensor t;
  int R;      // roundings in the compute dtype on the way to it
  int64_t k;  // reduction length
};

struct OpCase {
  const char* name;
  std::function<std::vector<Output>(const Env&)> run;
};

const std::vector<OpCase> kCases = {
    {"matmul_forward", [](const Env& e) {
       const int N = 13, C = 40, OC = 24;
       Tensor out = e.out({N, OC});
       ops::matmul_forward(out, e.input({N, C}, 1), e.input({OC, C}, 2), e.input({OC}, 3));
       return std::vector<Output>{{"out", out, 1, C + 1}};
     }},
    {"matmul_backward", [](const Env& e) {
       const int N = 13, C = 40, OC = 24;
       Tensor dinp = e.input({N, C}, 4), dw = e.input({OC, C}, 5, -1, 1, true), db = e.input({OC}, 6, -1, 1, true);
       ops::matmul_backward(dinp, dw, db, e.input({N, OC}, 7), e.input({N, C}, 1), e.input({OC, C}, 2));
       return std::vector<Output>{{"dinp", dinp, 2, OC + 1}, {"dweight", dw, 0, N + 1}, {"dbias", db, 0, N + 1}};
     }},
    {"gemm (fp32 result)", [](const Env& e) {
       Tensor c = e.out({2, 9, 16}, true);
       ops::gemm(c, e.input({2, 24, 9}, 8), e.input({2, 16, 24}, 9), true, true, 0.5f, 0.0f);
       return std::vector<Output>{{"c", c, 0, 24}};
     }},
    {"layernorm", [](const Env& e) {
       const int N = 11, C = 48;
       const Tensor x = e.input({N, C}, 10, -2, 2), w = e.input({C}, 11, 0.5f, 1.5f);
       Tensor out = e.out({N, C}), mean = e.out({N}, true), rstd = e.out({N}, true);
       ops::layernorm_forward(out, mean, rstd, x, w, e.input({C}, 12));
       Tensor dinp = e.input({N, C}, 13), dw = e.input({C}, 14, -1, 1, true), db = e.input({C}, 15, -1, 1, true);
       ops::layernorm_backward(dinp, dw, db, e.input({N, C}, 16), x, w, mean, rstd);
       return std::vector<Output>{{"out", out, 1, C},          {"mean", mean, 0, C},     {"rstd", rstd, 0, C},
                                  {"dinp", dinp, 2, 2 * C}, {"dweight", dw, 0, N}, {"dbias", db, 0, N}};
     }},
    {"gelu", [](const Env& e) {
       const Tensor x = e.input({517}, 17, -3, 3);
       Tensor out = e.out({517}), dinp = e.input({517}, 18);
       ops::gelu_forward(out, x);
       ops::gelu_backward(dinp, x, e.input({517}, 19));
       return std::vector<Output>{{"out", out, 1, 8}, {"dinp", dinp, 2, 8}};
     }},
    {"attention (head size 16)", [](const Env& e) {
       const int B = 2, T = 19, NH = 2, C = 32;
       const Tensor qkv = e.input({B, T, 3 * C}, 20);
       Tensor out = e.out({B, T, C}), lse = e.out({B, NH, T}, true);
       ops::attention_forward(out, lse, qkv, NH);
       // R = 2: the CPU's avx512_bf16 path rounds the probabilities to bf16 too.
       return std::vector<Output>{{"out", out, 2, 2 * T}, {"lse", lse, 0, 2 * T}};
     }},
    {"crossentropy", [](const Env& e) {
       const int N = 9, V = 40;
       std::vector<int32_t> t(N);
       for (int i = 0; i < N; ++i) t[i] = (i * 7) % V;
       const Tensor targets = Tensor::from_vector(t, {N}).to(e.dev), logits = e.input({N, V}, 21, -4, 4);
       Tensor losses = e.out({N}, true), lse = e.out({N}, true), dlogits = e.input({N, V}, 22);
       ops::crossentropy_forward(losses, lse, logits, targets);
       ops::crossentropy_backward(dlogits, logits, lse, targets, Tensor(), 0.5f);
       return std::vector<Output>{{"losses", losses, 0, 2 * V}, {"dlogits", dlogits, 2, 2 * V}};
     }},
    {"embedding", [](const Env& e) {
       const int B = 2, T = 7, V = 11, C = 16;
       std::vector<int32_t> tok(B * T);
       for (int i = 0; i < B * T; ++i) tok[i] = (i * 3) % V;
       const Tensor tokens = Tensor::from_vector(tok, {B, T}).to(e.dev);
       Tensor out = e.out({B, T, C}), dwte = e.input({V, C}, 23, -1, 1, true), dwpe = e.input({T, C}, 24, -1, 1, true);
       ops::embedding_forward(out, tokens, e.input({V, C}, 25), e.input({T, C}, 26));
       ops::embedding_backward(dwte, dwpe, e.input({B, T, C}, 27), tokens);
       return std::vector<Output>{{"out", out, 1, 2}, {"dwte", dwte, 0, B * T}, {"dwpe", dwpe, 0, B}};
     }},
    {"elementwise", [](const Env& e) {
       const Tensor a = e.input({300}, 28), b = e.input({300}, 29);
       Tensor sum = e.out({300}), scaled = e.out({300}), acc = e.input({300}, 30, -1, 1, true);
       ops::add(sum, a, b);
       ops::scale(scaled, a, 0.3f);
       ops::axpy(acc, a, -2.0f);  // fp32 accumulation of compute-dtype values
       return std::vector<Output>{{"add", sum, 1, 2}, {"scale", scaled, 1, 1}, {"axpy (fp32)", acc, 0, 2}};
     }},
};

// The backends and dtypes checked against the CPU in fp32.
struct Target {
  Device dev;
  DType dt;
};
const Target kTargets[] = {{Device::cpu(), DType::bf16}, {Device::cuda(0), DType::bf16}, {Device::cuda(0), DType::f16}};

void PrintTo(const Target& t, std::ostream* os) { *os << t.dev.str() << " " << dtype_name(t.dt); }

class Parity : public ::testing::TestWithParam<Target> {};

TEST_P(Parity, EveryOpCaseAgainstTheCpuInFp32) {
  const Target target = GetParam();
  if (target.dev.is_cuda()) {
    std::string why;
    if (!built_runtime(target.dev) || cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
  ASSERT_TRUE(backend_supports(target.dev, target.dt)) << target.dev.str() << " " << dtype_name(target.dt);
  for (const OpCase& c : kCases) {
    SCOPED_TRACE(std::string(c.name) + " on " + target.dev.str() + " in " + dtype_name(target.dt));
    const std::vector<Output> want = c.run(Env{Device::cpu(), DType::f32});
    const std::vector<Output> got = c.run(Env{target.dev, target.dt});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const double rtol = test::half_rtol(target.dt, got[i].R, got[i].k);
      EXPECT_TRUE(test::close_to_scale((std::string(c.name) + " " + got[i].name).c_str(), got[i].t.to_vector(),
                                       want[i].t.to_vector(), rtol));
    }
  }
}

std::string target_name(const ::testing::TestParamInfo<Target>& info) {
  return std::string(info.param.dev.is_cuda() ? "cuda" : "cpu") + "_" + dtype_name(info.param.dt);
}
INSTANTIATE_TEST_SUITE_P(Targets, Parity, ::testing::ValuesIn(kTargets), target_name);

}  // namespace
}  // namespace gpumix
