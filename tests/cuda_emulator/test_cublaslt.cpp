// The emulated cuBLASLt (kernels/cuda_emulator/cublaslt.cpp) against a naive column-major
// reference in double written from the definition: D(i,j) = alpha sum_p op(A)(i,p)
// op(B)(p,j) + beta C(i,j) [+ bias(i)], element (i, j) of a matrix at i + j * ld. A wrong
// leading dimension or a wrong transpose in the call fails the comparison (or is rejected
// with CUBLAS_STATUS_INVALID_VALUE); the bias epilogue, strided batches, in-place C == D,
// bf16 rounding of D, alignment promises and the refusals.
//
// Tolerance: fp32 accumulation of k bf16 products: k * 2^-24 * sum_p |a b| (the sum's
// rounding, one half-ulp per addition) plus, for a bf16 D, half an ulp of bf16 (2^-8
// relative) of the result.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda_emulator/emulator.h"

namespace {

using gpumix::bf16_bits_to_f32;
using gpumix::f32_to_bf16_bits;

#define LT(expr) ASSERT_EQ((expr), CUBLAS_STATUS_SUCCESS) << #expr
#define CU(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct Problem {
  bool ta = false, tb = false;
  int m = 5, n = 7, k = 9;
  int64_t lda = 0, ldb = 0, ldc = 0;  // 0: rows of the stored matrix (+ pad)
  int pad = 3;                        // extra rows in every leading dimension
  int batch = 1;
  bool bias = false;
  bool d_f32 = false;
  float alpha = 1.0f, beta = 0.0f;
};

struct Data {
  std::vector<uint16_t> a, b, bias;
  std::vector<float> c_f32;  // C as given (fp32 values; bf16 when !d_f32)
  int64_t lda, ldb, ldc, sa, sb, sc;
};

Data make_data(const Problem& p, uint32_t seed) {
  Data d;
  const int ar = p.ta ? p.k : p.m, ac = p.ta ? p.m : p.k;  // stored A
  const int br = p.tb ? p.n : p.k, bc = p.tb ? p.k : p.n;  // stored B
  d.lda = p.lda ? p.lda : ar + p.pad;
  d.ldb = p.ldb ? p.ldb : br + p.pad;
  d.ldc = p.ldc ? p.ldc : p.m + p.pad;
  auto round8 = [](int64_t v) { return (v + 7) / 8 * 8; };  // 16-byte aligned batches
  d.sa = round8(d.lda * ac) + 8;  // batch strides beyond each matrix
  d.sb = round8(d.ldb * bc) + 16;
  d.sc = round8(d.ldc * p.n) + 8;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  d.a.resize((size_t)(d.sa * p.batch));
  d.b.resize((size_t)(d.sb * p.batch));
  d.c_f32.resize((size_t)(d.sc * p.batch));
  d.bias.resize((size_t)p.m);
  for (auto& x : d.a) x = f32_to_bf16_bits(u(rng));
  for (auto& x : d.b) x = f32_to_bf16_bits(u(rng));
  for (auto& x : d.c_f32) x = p.d_f32 ? u(rng) : bf16_bits_to_f32(f32_to_bf16_bits(u(rng)));
  for (auto& x : d.bias) x = f32_to_bf16_bits(u(rng));
  return d;
}

// The definition, in double; also the allowance per element.
void naive(const Problem& p, const Data& d, std::vector<double>* out, std::vector<double>* tol) {
  out->assign(d.c_f32.size(), 0.0);
  tol->assign(d.c_f32.size(), 0.0);
  for (int q = 0; q < p.batch; ++q)
    for (int j = 0; j < p.n; ++j)
      for (int i = 0; i < p.m; ++i) {
        double s = 0, mag = 0;
        for (int l = 0; l < p.k; ++l) {
          const double av = bf16_bits_to_f32(d.a[(size_t)(q * d.sa + (p.ta ? l + i * d.lda : i + l * d.lda))]);
          const double bv = bf16_bits_to_f32(d.b[(size_t)(q * d.sb + (p.tb ? j + l * d.ldb : l + j * d.ldb))]);
          s += av * bv;
          mag += std::fabs(av * bv);
        }
        const size_t at = (size_t)(q * d.sc + i + j * d.ldc);
        double v = p.alpha * s + p.beta * (double)d.c_f32[at];
        if (p.bias) v += bf16_bits_to_f32(d.bias[(size_t)i]);
        (*out)[at] = v;
        (*tol)[at] = p.k * std::ldexp(1.0, -24) * mag * std::fabs(p.alpha) + 1e-7 +
                     (p.d_f32 ? 0.0 : std::fabs(v) * std::ldexp(1.0, -8));
      }
}

template <class T>
T* to_device(const std::vector<T>& h) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, h.size() * sizeof(T) + 256), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

struct Lt {
  cublasLtHandle_t h = nullptr;
  cudaStream_t s = nullptr;
  Lt() {
    EXPECT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  ~Lt() {
    cudaStreamDestroy(s);
    cublasLtDestroy(h);
  }
};

void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
  const int32_t count = batch;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
            CUBLAS_STATUS_SUCCESS);
}

// Runs the problem through cuBLASLt as a caller would; the descriptors say `call`, which a
// test may get wrong on purpose (ld, trans). Returns the status of the heuristic/matmul and
// D (as doubles, the whole buffer with its padding).
struct Call {
  bool ta, tb;
  int64_t lda, ldb, ldc;
  bool flip_tb_attribute_only = false;  // TRANSB wrong, B's layout right
};

cublasStatus_t run(const Problem& p, const Data& d, const Call& call, std::vector<double>* got,
                   std::vector<uint32_t>* raw = nullptr) {
  Lt lt;
  const cudaDataType ct = p.d_f32 ? CUDA_R_32F : CUDA_R_16BF;
  uint16_t* A = to_device(d.a);
  uint16_t* B = to_device(d.b);
  uint16_t* bias = to_device(d.bias);
  void* C = nullptr;
  if (p.d_f32) {
    C = to_device(d.c_f32);
  } else {
    std::vector<uint16_t> cb(d.c_f32.size());
    for (size_t i = 0; i < cb.size(); ++i) cb[i] = f32_to_bf16_bits(d.c_f32[i]);
    C = to_device(cb);
  }
  // cudaMemcpy from pageable memory may return before the copy lands (it is staged, on the
  // legacy stream): the matmul's non-blocking stream must not start before it has.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cublasLtMatmulDesc_t op;
  EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int32_t opa = call.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t opb = (call.tb != call.flip_tb_attribute_only) ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  const uint32_t epi = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (p.bias) {
    const int32_t bt = CUDA_R_16BF;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    const void* bp = bias;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
  }
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, call.ta ? p.k : p.m, call.ta ? p.m : p.k, call.lda);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, call.tb ? p.n : p.k, call.tb ? p.k : p.n, call.ldb);
  cublasLtMatrixLayoutCreate(&lc, ct, p.m, p.n, call.ldc);
  if (p.batch > 1) {
    set_batch(la, p.batch, d.sa);
    set_batch(lb, p.batch, d.sb);
    set_batch(lc, p.batch, d.sc);
  }
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t max_ws = 4 << 20;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
  const uint32_t al = 16;  // batch strides are multiples of 8 elements
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al);
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.h, op, la, lb, lc, lc, pref, 1, &r, &found);
  if (st == CUBLAS_STATUS_SUCCESS) {
    EXPECT_EQ(found, 1);
    EXPECT_LE(r.workspaceSize, max_ws);
    void* ws = nullptr;
    EXPECT_EQ(cudaMalloc(&ws, r.workspaceSize), cudaSuccess);
    st = cublasLtMatmul(lt.h, op, &p.alpha, A, la, B, lb, &p.beta, C, lc, C, lc, &r.algo, ws,
                        r.workspaceSize, lt.s);
    EXPECT_EQ(cudaStreamSynchronize(lt.s), cudaSuccess);
    cudaFree(ws);
  }
  got->assign(d.c_f32.size(), 0.0);
  if (raw) raw->assign(d.c_f32.size(), 0);
  if (p.d_f32) {
    std::vector<float> h(d.c_f32.size());
    cudaMemcpy(h.data(), C, h.size() * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < h.size(); ++i) {
      (*got)[i] = h[i];
      if (raw) memcpy(&(*raw)[i], &h[i], 4);
    }
  } else {
    std::vector<uint16_t> h(d.c_f32.size());
    cudaMemcpy(h.data(), C, h.size() * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < h.size(); ++i) {
      (*got)[i] = bf16_bits_to_f32(h[i]);
      if (raw) (*raw)[i] = h[i];
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(bias);
  return st;
}

// Worst element over the allowance; > 1 fails. Padding (outside the m x n matrices) must be
// left as C had it.
double worst(const Problem& p, const Data& d, const std::vector<double>& got, std::string* where) {
  std::vector<double> ref, tol;
  naive(p, d, &ref, &tol);
  double w = 0;
  for (int q = 0; q < p.batch; ++q)
    for (int j = 0; j < p.n; ++j)
      for (int i = 0; i < p.m; ++i) {
        const size_t at = (size_t)(q * d.sc + i + j * d.ldc);
        const double r = std::isnan(got[at]) ? 1e30 : std::fabs(got[at] - ref[at]) / tol[at];
        if (r > w) {
          w = r;
          *where = "batch " + std::to_string(q) + " (" + std::to_string(i) + "," + std::to_string(j) +
                   "): got " + std::to_string(got[at]) + ", reference " + std::to_string(ref[at]) +
                   ", allowance " + std::to_string(tol[at]);
        }
      }
  for (int q = 0; q < p.batch; ++q)
    for (int j = 0; j < p.n; ++j)
      for (int i = p.m; i < d.ldc; ++i) {
        const size_t at = (size_t)(q * d.sc + i + j * d.ldc);
        if (at < got.size() && got[at] != (double)d.c_f32[at]) {
          *where = "padding row " + std::to_string(i) + " was written";
          return 1e30;
        }
      }
  return w;
}

Call right(const Data& d, const Problem& p) { return Call{p.ta, p.tb, d.lda, d.ldb, d.ldc}; }

TEST(CublasLt, EveryTransposeMatchesTheDefinition) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int f32 = 0; f32 < 2; ++f32) {
        Problem p;
        p.ta = ta;
        p.tb = tb;
        p.d_f32 = f32;
        p.alpha = 0.75f;
        p.beta = 0.5f;
        const Data d = make_data(p, 1 + ta * 2 + tb + 4 * f32);
        std::vector<double> got;
        ASSERT_EQ(run(p, d, right(d, p), &got), CUBLAS_STATUS_SUCCESS);
        std::string where;
        EXPECT_LE(worst(p, d, got, &where), 1.0) << "ta " << ta << " tb " << tb << " f32 " << f32 << ": " << where;
      }
}

TEST(CublasLt, WrongLeadingDimensionFails) {
  Problem p;
  const Data d = make_data(p, 11);
  Call c = right(d, p);
  c.lda = d.lda - 1;  // still >= rows: accepted, and wrong
  std::vector<double> got;
  ASSERT_EQ(run(p, d, c, &got), CUBLAS_STATUS_SUCCESS);
  std::string where;
  EXPECT_GT(worst(p, d, got, &where), 1.0) << "a wrong lda went unnoticed";
  // Below the rows: rejected as the real library does.
  c = right(d, p);
  c.ldb = p.k - 1;
  EXPECT_EQ(run(p, d, c, &got), CUBLAS_STATUS_INVALID_VALUE);
}

TEST(CublasLt, WrongTransposeFails) {
  Problem p;
  p.m = p.k = 6;  // square A: a wrong TRANSA is a valid call with a wrong result
  const Data d = make_data(p, 12);
  Call c = right(d, p);
  c.ta = !c.ta;
  std::vector<double> got;
  ASSERT_EQ(run(p, d, c, &got), CUBLAS_STATUS_SUCCESS);
  std::string where;
  EXPECT_GT(worst(p, d, got, &where), 1.0) << "a wrong TRANSA went unnoticed";
  // Not square: the shapes disagree.
  Problem q;
  const Data e = make_data(q, 13);
  c = right(e, q);
  c.flip_tb_attribute_only = true;
  EXPECT_EQ(run(q, e, c, &got), CUBLAS_STATUS_INVALID_VALUE);
}

TEST(CublasLt, BiasEpilogueAddsPerRowOfD) {
  Problem p;
  p.bias = true;
  p.tb = true;  // matmul.cu's forward
  const Data d = make_data(p, 21);
  std::vector<double> got;
  ASSERT_EQ(run(p, d, right(d, p), &got), CUBLAS_STATUS_SUCCESS);
  std::string where;
  EXPECT_LE(worst(p, d, got, &where), 1.0) << where;
  // Without the bias in the reference the result is off: the epilogue did add it.
  Problem nob = p;
  nob.bias = false;
  EXPECT_GT(worst(nob, d, got, &where), 1.0);
}

TEST(CublasLt, StridedBatches) {
  for (int f32 = 0; f32 < 2; ++f32) {
    Problem p;
    p.batch = 3;
    p.ta = true;
    p.d_f32 = f32;
    p.beta = 1.0f;  // C == D accumulates
    const Data d = make_data(p, 31 + f32);
    std::vector<double> got;
    ASSERT_EQ(run(p, d, right(d, p), &got), CUBLAS_STATUS_SUCCESS);
    std::string where;
    EXPECT_LE(worst(p, d, got, &where), 1.0) << where;
  }
}

TEST(CublasLt, BetaZeroDoesNotReadC) {
  Problem p;
  Data d = make_data(p, 41);
  for (auto& x : d.c_f32) x = NAN;  // C (= D) poisoned, as fresh device memory
  std::vector<double> got;
  ASSERT_EQ(run(p, d, right(d, p), &got), CUBLAS_STATUS_SUCCESS);
  for (int j = 0; j < p.n; ++j)
    for (int i = 0; i < p.m; ++i) EXPECT_FALSE(std::isnan(got[(size_t)(i + j * d.ldc)]));
}

TEST(CublasLt, Bf16DRoundsToNearestEven) {
  // k = 2, m = n = 1: D = a0 b0 + a1 b1 exactly representable in fp32, halfway between two
  // bf16 values: ties go to the even mantissa.
  Problem p;
  p.m = p.n = 1;
  p.k = 2;
  p.pad = 0;
  Data d = make_data(p, 51);
  d.a = {f32_to_bf16_bits(1.0f), f32_to_bf16_bits(1.0f)};
  const float tie_down = std::ldexp(1.0f, -8);                          // 1 + 2^-8 -> 1
  const float tie_up = std::ldexp(1.0f, -7) + std::ldexp(1.0f, -8);     // 1 + 3 2^-8 -> 1 + 2^-6
  for (auto [second, want] : {std::pair<float, float>{tie_down, 1.0f},
                              std::pair<float, float>{tie_up, 1.0f + std::ldexp(1.0f, -6)}}) {
    // b1 = second is exact in bf16 here (a power of two, or two bits)
    d.b = {f32_to_bf16_bits(1.0f), f32_to_bf16_bits(second)};
    ASSERT_EQ(bf16_bits_to_f32(d.b[1]), second);
    std::vector<double> got;
    std::vector<uint32_t> raw;
    ASSERT_EQ(run(p, d, right(d, p), &got, &raw), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(raw[0], f32_to_bf16_bits(want)) << "1 + " << second;
    EXPECT_EQ(got[0], want);
  }
}

TEST(CublasLt, HeuristicAndStatusNames) {
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STRNE(cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "");
}

// ---- training epilogues -------------------------------------------------------------------
// Each against the plain product in double followed by the separate op (GELU, its derivative,
// the column or row sum). D = op(A) op(B) with A m x k (N) and B stored n x k (T), matmul.cu's
// forward layout; aux and D of D's type, aux with its own leading dimension.

double gelu_d(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_grad_d(double x) {
  const double s = 0.7978845608028654, t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

struct EpiResult {
  cublasStatus_t status;
  std::vector<double> d, aux, bias;  // D (m x n, ld m), aux (ld aux_ld), bias vector
};

// Runs `epi` on random data (seed); aux_in: the aux given to a backward epilogue.
EpiResult run_epilogue(uint32_t epi, bool d_f32, int m, int n, int k, int64_t aux_ld,
                       const std::vector<float>& a, const std::vector<float>& b,
                       const std::vector<float>& bias_in, const std::vector<float>& aux_in) {
  Lt lt;
  const cudaDataType ct = d_f32 ? CUDA_R_32F : CUDA_R_16BF;
  const size_t es = d_f32 ? 4 : 2;
  auto typed = [&](const std::vector<float>& v) {  // host values in D's type, on the device
    std::vector<uint8_t> raw(v.size() * es + 16);
    for (size_t i = 0; i < v.size(); ++i) {
      if (d_f32) memcpy(&raw[i * 4], &v[i], 4);
      else { const uint16_t h = f32_to_bf16_bits(v[i]); memcpy(&raw[i * 2], &h, 2); }
    }
    return to_device(raw);
  };
  auto bf = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16_bits(v[i]);
    return to_device(h);
  };
  uint16_t* A = bf(a);
  uint16_t* B = bf(b);
  const size_t blen = epi == CUBLASLT_EPILOGUE_BGRADB ? (size_t)n : (size_t)m;
  uint8_t* bias = typed(bias_in.empty() ? std::vector<float>(blen, NAN) : bias_in);
  uint8_t* aux = typed(aux_in.empty() ? std::vector<float>((size_t)(aux_ld * n), NAN) : aux_in);
  uint8_t* D = typed(std::vector<float>((size_t)(m * n), NAN));  // beta 0: C is not read
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cublasLtMatmulDesc_t op;
  EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int32_t opt = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opt, sizeof opt);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  const void* bp = bias;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
  void* ap = aux;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof ap);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, k, n);
  cublasLtMatrixLayoutCreate(&ld, ct, m, n, m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint32_t al = 2;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al);
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  EpiResult res;
  res.status = cublasLtMatmulAlgoGetHeuristic(lt.h, op, la, lb, ld, ld, pref, 1, &r, &found);
  const float one = 1.0f, zero = 0.0f;
  if (res.status == CUBLAS_STATUS_SUCCESS)
    res.status = cublasLtMatmul(lt.h, op, &one, A, la, B, lb, &zero, D, ld, D, ld, &r.algo, nullptr, 0, lt.s);
  EXPECT_EQ(cudaStreamSynchronize(lt.s), cudaSuccess);
  auto back = [&](uint8_t* p, size_t count) {
    std::vector<uint8_t> raw(count * es);
    cudaMemcpy(raw.data(), p, raw.size(), cudaMemcpyDeviceToHost);
    std::vector<double> v(count);
    for (size_t i = 0; i < count; ++i) {
      if (d_f32) { float f; memcpy(&f, &raw[i * 4], 4); v[i] = f; }
      else { uint16_t h; memcpy(&h, &raw[i * 2], 2); v[i] = bf16_bits_to_f32(h); }
    }
    return v;
  };
  res.d = back(D, (size_t)(m * n));
  res.aux = back(aux, (size_t)(aux_ld * n));
  res.bias = back(bias, blen);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  for (void* q : {(void*)A, (void*)B, (void*)bias, (void*)aux, (void*)D}) cudaFree(q);
  return res;
}

std::vector<float> uniform(size_t count, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(count);
  for (auto& x : v) x = bf16_bits_to_f32(f32_to_bf16_bits(u(rng)));  // exact in bf16
  return v;
}

TEST(CublasLt, TrainingEpiloguesMatchTheProductAndTheSeparateOps) {
  const int m = 12, n = 7, k = 9;
  const int64_t aux_ld = 16;  // divisible by 8, >= m
  const std::vector<float> a = uniform((size_t)(m * k), -1, 1, 61), b = uniform((size_t)(n * k), -1, 1, 62);
  const std::vector<float> bias = uniform((size_t)m, -1, 1, 63);
  std::vector<float> pre_in = uniform((size_t)(aux_ld * n), -3, 3, 64);  // a forward's GELU input
  // The plain product P = A B^T in double and its allowance (fp32 sum of k products).
  std::vector<double> P((size_t)(m * n)), Ptol((size_t)(m * n));
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0, mag = 0;
      for (int p = 0; p < k; ++p) {
        s += (double)a[(size_t)(i + p * m)] * b[(size_t)(j + p * n)];
        mag += std::fabs((double)a[(size_t)(i + p * m)] * b[(size_t)(j + p * n)]);
      }
      P[(size_t)(i + j * m)] = s;
      Ptol[(size_t)(i + j * m)] = (k + 2) * std::ldexp(1.0, -24) * mag + 1e-6;
    }
  for (int f32 = 0; f32 < 2; ++f32) {
    const double half_ulp = f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);  // D's rounding
    auto check = [&](double got, double want, double tol, const char* what, int i, int j) {
      EXPECT_LE(std::fabs(got - want), tol + half_ulp * std::fabs(want))
          << what << " (" << i << ", " << j << ") " << (f32 ? "fp32" : "bf16") << ": got " << got
          << ", want " << want;
    };
    {  // GELU_AUX_BIAS: aux = P + bias, D = GELU(P + bias)
      EpiResult r = run_epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, f32, m, n, k, aux_ld, a, b, bias, {});
      ASSERT_EQ(r.status, CUBLAS_STATUS_SUCCESS);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          const double x = P[(size_t)(i + j * m)] + bias[(size_t)i], t = Ptol[(size_t)(i + j * m)];
          check(r.aux[(size_t)(i + j * aux_ld)], x, t, "aux", i, j);
          check(r.d[(size_t)(i + j * m)], gelu_d(x), 1.2 * t + 1e-6, "GELU", i, j);
        }
    }
    std::vector<float> aux_in = pre_in;
    if (!f32)  // the aux a bf16 forward stored
      for (auto& x : aux_in) x = bf16_bits_to_f32(f32_to_bf16_bits(x));
    for (uint32_t epi : {(uint32_t)CUBLASLT_EPILOGUE_DGELU, (uint32_t)CUBLASLT_EPILOGUE_DGELU_BGRAD}) {
      // D = P * GELU'(aux); DGELU_BGRAD also bias(i) = sum_j D(i, j) before D's rounding
      EpiResult r = run_epilogue(epi, f32, m, n, k, aux_ld, a, b, {}, aux_in);
      ASSERT_EQ(r.status, CUBLAS_STATUS_SUCCESS);
      for (int i = 0; i < m; ++i) {
        double sum = 0, sum_tol = 0;
        for (int j = 0; j < n; ++j) {
          const double g = gelu_grad_d(aux_in[(size_t)(i + j * aux_ld)]);
          const double want = P[(size_t)(i + j * m)] * g;
          // GELU' in fp32 cancels near its zero (x ~ -2.4): its error is absolute, ~16 ulps of 1
          const double tol = std::fabs(g) * Ptol[(size_t)(i + j * m)] +
                             16 * std::ldexp(1.0, -24) * std::fabs(P[(size_t)(i + j * m)]);
          check(r.d[(size_t)(i + j * m)], want, tol, "DGELU", i, j);
          sum += want;
          sum_tol += tol + (n + 1) * std::ldexp(1.0, -24) * std::fabs(want);
        }
        if (epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) check(r.bias[(size_t)i], sum, sum_tol, "bias gradient", i, -1);
        else EXPECT_TRUE(std::isnan(r.bias[(size_t)i])) << "DGELU wrote the bias vector";
      }
    }
    {  // BGRADB: D = P, bias(j) = sum_p op(B)(p, j)
      EpiResult r = run_epilogue(CUBLASLT_EPILOGUE_BGRADB, f32, m, n, k, aux_ld, a, b, {}, {});
      ASSERT_EQ(r.status, CUBLAS_STATUS_SUCCESS);
      for (int j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int p = 0; p < k; ++p) {
          s += b[(size_t)(j + p * n)];
          mag += std::fabs(b[(size_t)(j + p * n)]);
        }
        check(r.bias[(size_t)j], s, (k + 1) * std::ldexp(1.0, -24) * mag, "BGRADB", -1, j);
        for (int i = 0; i < m; ++i) check(r.d[(size_t)(i + j * m)], P[(size_t)(i + j * m)], Ptol[(size_t)(i + j * m)], "D", i, j);
      }
    }
  }
}

TEST(CublasLt, AuxLeadingDimensionMustBeDivisibleBy8) {
  const int m = 12, n = 3, k = 4;
  const std::vector<float> a = uniform((size_t)(m * k), -1, 1, 71), b = uniform((size_t)(n * k), -1, 1, 72);
  const std::vector<float> bias = uniform((size_t)m, -1, 1, 73);
  // 12 >= m but not a multiple of 8; 8 a multiple but < m: both INVALID_VALUE, as documented.
  for (int64_t ld : {12, 8})
    EXPECT_EQ(run_epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, m, n, k, ld, a, b, bias, {}).status,
              CUBLAS_STATUS_INVALID_VALUE) << "aux ld " << ld;
}

// ---- refusals ----------------------------------------------------------------------------

TEST(CublasLtDeathTest, UnsupportedAttributesAreRefusedByName) {
  cublasLtMatmulDesc_t op;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const uint32_t relu = CUBLASLT_EPILOGUE_RELU;
  EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
               "CUBLASLT_MATMUL_DESC_EPILOGUE = 2 \\(CUBLASLT_EPILOGUE_RELU\\) is not emulated");
  // The epilogues NVIDIA documents but GPUMix does not use are refused by name, not run.
  for (uint32_t e : {(uint32_t)CUBLASLT_EPILOGUE_GELU_BIAS, (uint32_t)CUBLASLT_EPILOGUE_GELU_AUX,
                     (uint32_t)CUBLASLT_EPILOGUE_BGRADA, (uint32_t)CUBLASLT_EPILOGUE_DRELU_BGRAD})
    EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e),
                 "\\(CUBLASLT_EPILOGUE_[A-Z_]+\\) is not emulated");
  const int64_t aux_stride = 8;
  EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                              &aux_stride, sizeof aux_stride),
               "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE");
  const int32_t opc = CUBLAS_OP_C;
  EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opc, sizeof opc),
               "CUBLASLT_MATMUL_DESC_TRANSA = 2 \\(CUBLAS_OP_C\\)");
  const int32_t mode = 1;
  EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode),
               "CUBLASLT_MATMUL_DESC_POINTER_MODE");
  const int64_t wrong_size = CUBLAS_OP_T;
  EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &wrong_size, sizeof wrong_size),
               "takes 4 bytes, got sizeInBytes = 8");
  cublasLtMatrixLayout_t l;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  const int32_t row = 1;
  EXPECT_DEATH(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row),
               "CUBLASLT_ORDER_ROW");
  cublasLtMatrixLayout_t l64f;  // fp64 is not emulated (CUDA_R_16F is: GPUMix's f16 GEMMs)
  EXPECT_DEATH(cublasLtMatrixLayoutCreate(&l64f, CUDA_R_64F, 4, 4, 4), "CUDA_R_64F");
  cublasLtMatrixLayout_t l16f;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l16f, CUDA_R_16F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayoutDestroy(l16f);
  EXPECT_DEATH(
      {
        cublasLtMatmulDesc_t o;
        cublasLtMatmulDescCreate(&o, CUBLAS_COMPUTE_32F, CUDA_R_16BF);
      },
      "scaleType CUDA_R_16BF");
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
}

TEST(CublasLtDeathTest, PointersMustBeAsAlignedAsPromised) {
  EXPECT_DEATH(
      {
        Problem p;
        p.m = p.n = p.k = 8;
        p.pad = 0;
        Lt lt;
        uint16_t* buf = nullptr;
        cudaMalloc(&buf, 4096);
        cudaMemset(buf, 0, 4096);
        cublasLtMatmulDesc_t op;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayout_t l;
        cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 8, 8, 8);
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);  // alignments: the default 256
        cublasLtMatmulHeuristicResult_t r;
        int found = 0;
        cublasLtMatmulAlgoGetHeuristic(lt.h, op, l, l, l, l, pref, 1, &r, &found);
        const float one = 1;
        const float zero = 0;
        cublasLtMatmul(lt.h, op, &one, buf + 1, l, buf + 512, l, &zero, buf + 1024, l, buf + 1024, l,
                       &r.algo, nullptr, 0, lt.s);
      },
      "cublasLtMatmul A at .* is not aligned to 256 bytes, as CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES promised");
}

TEST(CublasLtDeathTest, OperandsMustBeDeviceMemory) {
  EXPECT_DEATH(
      {
        Lt lt;
        std::vector<uint16_t> host(64, 0);
        uint16_t* dev = nullptr;
        cudaMalloc(&dev, 4096);
        cublasLtMatmulDesc_t op;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayout_t l;
        cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 8, 8, 8);
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t r;
        int found = 0;
        cublasLtMatmulAlgoGetHeuristic(lt.h, op, l, l, l, l, pref, 1, &r, &found);
        const float one = 1;
        const float zero = 0;
        cublasLtMatmul(lt.h, op, &one, dev, l, host.data(), l, &zero, dev + 1024, l, dev + 1024, l,
                       &r.algo, nullptr, 0, lt.s);
      },
      "cublasLtMatmul B: .* must lie in one live device allocation, but it is not device memory");
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  return RUN_ALL_TESTS();
}
