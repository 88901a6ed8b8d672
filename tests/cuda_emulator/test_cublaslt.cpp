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

#include "kernels/bf16.h"
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

// ---- refusals ----------------------------------------------------------------------------

TEST(CublasLtDeathTest, UnsupportedAttributesAreRefusedByName) {
  cublasLtMatmulDesc_t op;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const uint32_t relu = CUBLASLT_EPILOGUE_RELU;
  EXPECT_DEATH(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
               "CUBLASLT_MATMUL_DESC_EPILOGUE = 2 \\(CUBLASLT_EPILOGUE_RELU\\) is not emulated");
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
  cublasLtMatrixLayout_t l16f;
  EXPECT_DEATH(cublasLtMatrixLayoutCreate(&l16f, CUDA_R_16F, 4, 4, 4), "CUDA_R_16F");
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
