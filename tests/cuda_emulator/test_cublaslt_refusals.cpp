// Every caller of cuBLASLt in kernels/cuda/matmul.cu, with the emulated heuristic made to
// refuse (cuda_emulator::set_cublaslt_refusals: 0 algorithms, NOT_SUPPORTED, INVALID_VALUE):
// a fused epilogue (BIAS, GELU_AUX_BIAS, DGELU, BGRADB) falls back to the unfused passes and
// gives the fused result (within the one extra bf16 rounding the split adds); a plain product,
// which has nothing to fall back to, fails with a message naming the GEMM and the answer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda_emulator/emulator.h"

namespace gpumix::kernels::cuda::detail {
void matmul_release_all();  // matmul.cu: forgets the cached plans (their heuristic answers)
}

namespace {

namespace cu = gpumix::kernels::cuda;
using cu::bf16;

constexpr int N = 16, C = 32, OC = 48;
const char* const kAnswers[] = {"none", "NOT_SUPPORTED", "INVALID_VALUE"};

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc((void**)&p, sizeof(T) * n), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, sizeof(T) * n), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<float> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = (float)h[i];
    return f;
  }
};

Dev<bf16>* random_bf16(size_t n, uint32_t seed) {
  std::vector<bf16> h(n);
  for (bf16& x : h) {
    seed = seed * 1664525u + 1013904223u;
    x = bf16((float)((int)(seed >> 9) % 2001 - 1000) / 1000.0f);
  }
  auto* d = new Dev<bf16>(n);
  EXPECT_EQ(cudaMemcpy(d->p, h.data(), 2 * n, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

// The refusal rules for what follows; the cached plans forgotten so that the heuristic is
// asked again.
void refuse(const char* rules) {
  cu::detail::matmul_release_all();
  cuda_emulator::set_cublaslt_refusals(rules);
}

// Two bf16 results agree to within the extra rounding the split adds: the fallback rounds the
// product (here at most about 2 in size) to bf16 before the epilogue's operation, and the
// result may then round the other way (a bf16 step of the result: 2^-7 of its size and more).
void expect_close(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], std::ldexp(2.0f * std::fabs(want[i]) + 2.0f, -7))
        << what << " element " << i;
}

class CublasLtRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    inp.reset(random_bf16((size_t)N * C, 1));
    w.reset(random_bf16((size_t)OC * C, 2));
    bias.reset(random_bf16(OC, 3));
    dout.reset(random_bf16((size_t)N * OC, 4));
  }
  void TearDown() override { refuse(nullptr); }
  std::unique_ptr<Dev<bf16>> inp, w, bias, dout;
};

TEST_F(CublasLtRefusal, BiasFallsBackToTheProductThenTheBias) {
  refuse("");
  Dev<bf16> fused((size_t)N * OC), split((size_t)N * OC);
  cu::matmul_forward(fused.p, inp->p, w->p, bias->p, N, C, OC);
  const std::vector<float> want = fused.get();
  for (const char* answer : kAnswers) {
    refuse(("BIAS=" + std::string(answer)).c_str());
    cu::matmul_forward(split.p, inp->p, w->p, bias->p, N, C, OC);
    expect_close(answer, split.get(), want);
  }
}

TEST_F(CublasLtRefusal, GeluAuxBiasFallsBackToBiasThenGelu) {
  refuse("");
  Dev<bf16> out((size_t)N * OC), pre((size_t)N * OC), out2((size_t)N * OC), pre2((size_t)N * OC);
  cu::matmul_gelu_forward(out.p, pre.p, inp->p, w->p, bias->p, N, C, OC);
  const std::vector<float> want_out = out.get(), want_pre = pre.get();
  for (const char* answer : kAnswers) {
    // The fallback's BIAS product refused too: its own fallback, the product then the bias.
    for (const std::string& rules : {"GELU_AUX_BIAS=" + std::string(answer),
                                     "GELU_AUX_BIAS=" + std::string(answer) + ",BIAS=" + answer}) {
      refuse(rules.c_str());
      cu::matmul_gelu_forward(out2.p, pre2.p, inp->p, w->p, bias->p, N, C, OC);
      expect_close(rules.c_str(), pre2.get(), want_pre);
      expect_close(rules.c_str(), out2.get(), want_out);
    }
  }
}

TEST_F(CublasLtRefusal, DgeluFallsBackToTheProductThenGeluBackward) {
  refuse("");
  Dev<bf16> fused((size_t)N * C), split((size_t)N * C);
  // dpre (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(pre (N,C)), pre = inp here.
  cu::matmul_backward_dgelu(fused.p, dout->p, w->p, inp->p, N, C, OC);
  const std::vector<float> want = fused.get();
  for (const char* answer : kAnswers) {
    refuse(("DGELU=" + std::string(answer)).c_str());
    cu::matmul_backward_dgelu(split.p, dout->p, w->p, inp->p, N, C, OC);
    expect_close(answer, split.get(), want);
  }
}

TEST_F(CublasLtRefusal, BgradbFallsBackToTheProductThenTheColumnSums) {
  refuse("");
  Dev<float> dw((size_t)OC * C), db(OC), dw2((size_t)OC * C), db2(OC);
  cu::matmul_backward(nullptr, dw.p, db.p, dout->p, inp->p, w->p, N, C, OC, nullptr, false, true);
  const std::vector<float> want_w = dw.get(), want_b = db.get();
  for (const char* answer : kAnswers) {
    refuse(("BGRADB=" + std::string(answer)).c_str());
    cu::matmul_backward(nullptr, dw2.p, db2.p, dout->p, inp->p, w->p, N, C, OC, nullptr, false,
                        true);
    const std::vector<float> got_w = dw2.get(), got_b = db2.get();
    for (int i = 0; i < OC * C; ++i) ASSERT_NEAR(got_w[i], want_w[i], 1e-5f) << answer << " dw " << i;
    for (int i = 0; i < OC; ++i) ASSERT_NEAR(got_b[i], want_b[i], 1e-4f) << answer << " db " << i;
  }
}

TEST_F(CublasLtRefusal, APlainProductFailsNamingTheGemmAndTheAnswer) {
  Dev<bf16> out((size_t)N * OC);
  Dev<float> dw((size_t)OC * C);
  const char* const said[] = {"the heuristic returned 0 algorithms",
                              "the heuristic returned CUBLAS_STATUS_NOT_SUPPORTED",
                              "the heuristic returned CUBLAS_STATUS_INVALID_VALUE"};
  for (int i = 0; i < 3; ++i) {
    refuse(("DEFAULT=" + std::string(kAnswers[i])).c_str());
    try {
      cu::matmul_forward(out.p, inp->p, w->p, nullptr, N, C, OC);
      ADD_FAILURE() << kAnswers[i] << ": matmul_forward without a bias did not throw";
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cuBLASLt refused gemm(trans_a=0, trans_b=1, m=16, n=48, k=32"),
                std::string::npos) << msg;
      EXPECT_NE(msg.find("epilogue DEFAULT"), std::string::npos) << msg;
      EXPECT_NE(msg.find(said[i]), std::string::npos) << msg;
    }
  }
  // A layout: every product with a transposed A (our B: matmul_backward's dweight, dout^T)
  refuse("TRANSB=NOT_SUPPORTED,TRANSA=NOT_SUPPORTED");
  try {
    cu::matmul_backward(nullptr, dw.p, nullptr, dout->p, inp->p, w->p, N, C, OC);
    ADD_FAILURE() << "a transposed product did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cuBLASLt refused gemm(trans_a=1"), std::string::npos)
        << e.what();
  }
}

TEST(CublasLtRefusalDeathTest, ABadRuleIsRefusedByName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(cuda_emulator::set_cublaslt_refusals("DGELU=sometimes"),
               "set_cublaslt_refusals: the rule 'DGELU=sometimes' is not WHAT=HOW .*e.g. "
               "DGELU=none");
  EXPECT_DEATH(cuda_emulator::set_cublaslt_refusals("RELU=none"), "the rule 'RELU=none'");
}

}  // namespace
