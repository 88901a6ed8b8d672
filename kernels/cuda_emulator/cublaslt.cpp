// The emulated cuBLASLt: descriptors, layouts, preferences, a heuristic that returns one
// algorithm, and cublasLtMatmul as stream work computing, per NVIDIA's cuBLAS
// documentation ("cuBLASLt API", cublasLtMatmul()):
//
//   D = alpha * op(A) * op(B) + beta * C            [+ bias, CUBLASLT_EPILOGUE_BIAS]
//
// and the training epilogues of cublasLtEpilogue_t (cuBLAS documentation, "cublasLtEpilogue_t"
// and CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_* of cublasLtMatmulDescAttributes_t), with X = alpha
// op(A) op(B) + beta C in fp32:
//   GELU_AUX_BIAS  aux = X + bias (the GELU input, "useful for training"), D = GELU(X + bias);
//   DGELU          D = X * GELU'(aux) (aux: the forward's GELU input, read);
//   DGELU_BGRAD    the same, and bias[i] = sum over the columns j of D(i, j) before rounding
//                  ("Apply independently GELU and Bias gradient to matmul output": the bias
//                  gradient of the GELU input, length rows(D));
//   BGRADB         D = X, and bias[j] = sum over k of op(B)(k, j) (length cols(D), "the
//                  reduction happens over the GEMM's k dimension").
// GELU is the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as the
// library's. aux is stored like D (column-major, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, which
// must be divisible by 8 and >= rows(D), else INVALID_VALUE) in D's type; a bias or bias
// gradient has D's type ("Bias gradient vector elements are the same type as the output
// elements (Ctype)"); bias gradients are written, never accumulated. Every other epilogue
// (RELU*, GELU, GELU_BIAS, GELU_AUX, BGRADA, ...) is refused by name, and so is an
// auxiliary epilogue with strided batches.
//
// op(A) m x k, op(B) k x n, C and D m x n, all column-major (CUBLASLT_ORDER_COL, the
// default of cublasLtMatrixLayoutAttribute_t): element (i, j) of a layout with leading
// dimension ld at i + j * ld; a layout describes the stored matrix, before op (so TRANSA =
// CUBLAS_OP_T expects A stored k x m). The BIAS epilogue adds a vector of length rows(D)
// to every column ("Bias vector length must match matrix D rows count",
// cublasLtMatmulDescAttributes_t, CUBLASLT_MATMUL_DESC_BIAS_POINTER), after alpha and beta.
// Strided batches: matrix b of a layout starts STRIDED_BATCH_OFFSET elements after matrix
// b - 1 (cublasLtMatrixLayoutAttribute_t). Sums in fp32 in k order; a bf16 or f16 D is rounded
// to nearest even once. When beta == 0, C is not read (cuBLAS "cublas<t>gemm()": "if beta ==
// 0 then C does not have to be a valid input"), so a poisoned D-as-C gives clean output.
//
// Validation as the real library: leading dimensions smaller than the rows, shapes that do
// not agree, batch counts that differ, a workspace smaller than the algorithm needs, give
// CUBLAS_STATUS_INVALID_VALUE (cublasLtMatmul(): "in conflict or in an impossible
// configuration"). Not modelled, refused with its name: other attributes, epilogues,
// orders, types, pointer modes. A pointer less aligned than the preference promised
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256) is refused: the real library
// may have picked a kernel that needs that alignment.
//
// Refusals on request (cuda_emulator::set_cublaslt_refusals, or GPUMIX_EMULATED_CUBLASLT_REFUSE
// in the environment): rules "WHAT=HOW" separated by commas, WHAT an epilogue without its
// prefix (DEFAULT, BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADB) or a layout (TRANSA,
// TRANSB: that operand transposed; BATCHED: more than one batch; C_FP32: C and D fp32), HOW
// what cublasLtMatmulAlgoGetHeuristic then answers for such a problem: "none" (success with 0
// algorithms), NOT_SUPPORTED (the library's "no algorithm for this") or INVALID_VALUE. The
// real library answers so for shapes, alignments and epilogues no kernel of it takes: the
// callers' fallbacks and messages are tested through these.
//
// Not modelled: cuBLASLt's own algorithms and rounding (it may split or reorder the
// k-sum, use tensor cores with their own intermediate precision): only a real GPU tells.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cublasLt.h"
#include "emulator.h"
#include "kernels/half_types.h"

using cuda_emulator::refuse;

struct cublasLtContext {
  uint64_t magic = 0x4c54'4d41'5452'4958ull;
};

struct cublasLtMatmulDescOpaque_t {
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: the type of D (the documented default)
  void* aux = nullptr;     // EPILOGUE_AUX_POINTER
  int64_t aux_ld = 0;      // EPILOGUE_AUX_LD ("default: 0")
  int32_t aux_type = -1;   // EPILOGUE_AUX_DATA_TYPE; -1: the type of D
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;  // "default: 0 - no workspace allowed"
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: "default: 256"
};

namespace {

constexpr uint64_t kAlgoMagic = 0x454d'5541'4c47'4f31ull;  // marks an algo from our heuristic
constexpr size_t kAlgoWorkspace = 1 << 20;  // what the emulated algorithm asks for, at most

const char* type_name(int t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    case CUDA_R_16BF: return "CUDA_R_16BF";
  }
  return "an unknown cudaDataType";
}

size_t elem_size(int t) { return t == CUDA_R_32F ? 4 : 2; }

// The epilogues the emulator models, and what each reads or writes besides D.
bool epilogue_emulated(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool reads_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool writes_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool uses_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

const char* epilogue_name(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "CUBLASLT_EPILOGUE_DEFAULT";
    case CUBLASLT_EPILOGUE_RELU: return "CUBLASLT_EPILOGUE_RELU";
    case CUBLASLT_EPILOGUE_BIAS: return "CUBLASLT_EPILOGUE_BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX: return "CUBLASLT_EPILOGUE_RELU_AUX";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU: return "CUBLASLT_EPILOGUE_DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_GELU: return "CUBLASLT_EPILOGUE_GELU";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "CUBLASLT_EPILOGUE_GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "CUBLASLT_EPILOGUE_GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "CUBLASLT_EPILOGUE_GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "CUBLASLT_EPILOGUE_DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "CUBLASLT_EPILOGUE_DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "CUBLASLT_EPILOGUE_BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "CUBLASLT_EPILOGUE_BGRADB";
  }
  return "an unknown epilogue";
}

// GELU, tanh approximation, and its derivative, in fp32.
float gelu(float x) {
  const float s = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(s * (x + 0.044715f * x * x * x)));
}
float gelu_grad(float x) {
  const float s = 0.7978845608028654f;
  const float t = std::tanh(s * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * 0.044715f * x * x);
}

// Elements of the emulated types: fp32, bf16 and IEEE binary16 (kernels/half_types.h's
// conversions: round to nearest even, f16 overflowing to inf and keeping subnormals).
void store(void* p, int type, size_t i, float v) {
  if (type == CUDA_R_32F)
    ((float*)p)[i] = v;
  else if (type == CUDA_R_16F)
    ((uint16_t*)p)[i] = gpumix::f32_to_f16_bits(v);
  else
    ((uint16_t*)p)[i] = gpumix::f32_to_bf16_bits(v);
}
bool emulated_16bit(int type) { return type == CUDA_R_16BF || type == CUDA_R_16F; }

template <class T>
T read_attr(const void* buf, size_t size, const char* call, const char* attr) {
  if (size != sizeof(T))
    refuse(std::string(call) + ": " + attr + " takes " + std::to_string(sizeof(T)) +
           " bytes, got sizeInBytes = " + std::to_string(size));
  T v;
  memcpy(&v, buf, sizeof v);
  return v;
}

float load(const void* p, int type, size_t i) {
  if (type == CUDA_R_32F) return ((const float*)p)[i];
  if (type == CUDA_R_16F) return gpumix::f16_bits_to_f32(((const uint16_t*)p)[i]);
  return gpumix::bf16_bits_to_f32(((const uint16_t*)p)[i]);
}

// Elements a layout spans, over all its batches.
size_t extent(const cublasLtMatrixLayoutOpaque_t& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const size_t one = (size_t)((l.cols - 1) * (uint64_t)l.ld + l.rows);
  return one + (size_t)(l.batch - 1) * (size_t)l.stride;
}

// The checks of cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul: refuse what is not
// modelled, INVALID_VALUE for what the real library rejects. m, n, k on success.
cublasStatus_t check_problem(const char* call, const cublasLtMatmulDescOpaque_t& op,
                             const cublasLtMatrixLayoutOpaque_t& a,
                             const cublasLtMatrixLayoutOpaque_t& b,
                             const cublasLtMatrixLayoutOpaque_t& c,
                             const cublasLtMatrixLayoutOpaque_t& d, std::string* why) {
  const std::string cs = call;
  if (!emulated_16bit(a.type) || b.type != a.type)
    refuse(cs + ": A and B of type " + type_name(a.type) + " and " + type_name(b.type) +
           " (only CUDA_R_16BF or CUDA_R_16F operands, both of one type, are emulated)");
  if (c.type != d.type || (d.type != a.type && d.type != CUDA_R_32F))
    refuse(cs + ": C " + type_name(c.type) + ", D " + type_name(d.type) + " with A and B " +
           type_name(a.type) + " (C and D of the same type, A's or CUDA_R_32F, are emulated)");
  if (reads_bias(op.epilogue) || writes_bias(op.epilogue)) {
    const int bt = op.bias_type == -1 ? (int)d.type : op.bias_type;
    if (bt != (int)d.type)
      refuse(cs + ": CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = " + type_name(bt) + " with D " +
             type_name(d.type) + " (only a bias of D's type is emulated)");
  }
  if (op.epilogue != CUBLASLT_EPILOGUE_DEFAULT && op.epilogue != CUBLASLT_EPILOGUE_BIAS &&
      d.batch > 1)
    refuse(cs + ": " + epilogue_name(op.epilogue) + " with BATCH_COUNT " +
           std::to_string(d.batch) + " (the bias-gradient and auxiliary epilogues are emulated "
           "for one matrix only)");
  if (uses_aux(op.epilogue)) {
    const int at = op.aux_type == -1 ? (int)d.type : op.aux_type;
    if (at != (int)d.type)
      refuse(cs + ": CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = " + type_name(at) +
             " with D " + type_name(d.type) + " (only an aux of D's type is emulated)");
    if (op.aux_ld % 8 != 0 || op.aux_ld < (int64_t)d.rows) {
      *why = std::string(epilogue_name(op.epilogue)) + ": CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD " +
             std::to_string(op.aux_ld) + " must be divisible by 8 and >= rows(D) " +
             std::to_string(d.rows);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  const uint64_t m = op.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t k = op.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = op.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t n = op.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  const cublasLtMatrixLayoutOpaque_t* ls[4] = {&a, &b, &c, &d};
  const char* names = "ABCD";
  for (int i = 0; i < 4; ++i) {
    if (ls[i]->ld < (int64_t)std::max<uint64_t>(ls[i]->rows, 1)) {
      *why = std::string(1, names[i]) + ": ld " + std::to_string(ls[i]->ld) + " < rows " +
             std::to_string(ls[i]->rows) + " (column-major: ld >= rows)";
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (k != kb || c.rows != m || c.cols != n || d.rows != m || d.cols != n) {
    *why = "op(A) is " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
           std::to_string(kb) + "x" + std::to_string(n) + ", C " + std::to_string(c.rows) + "x" +
           std::to_string(c.cols) + ", D " + std::to_string(d.rows) + "x" + std::to_string(d.cols);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (a.batch != d.batch || b.batch != d.batch || c.batch != d.batch) {
    *why = "batch counts A " + std::to_string(a.batch) + ", B " + std::to_string(b.batch) +
           ", C " + std::to_string(c.batch) + ", D " + std::to_string(d.batch) + " differ";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// One batch: D = alpha op(A) op(B) + beta C + bias.
void reference(const cublasLtMatmulDescOpaque_t& op, const cublasLtMatrixLayoutOpaque_t& la,
               const cublasLtMatrixLayoutOpaque_t& lb, const cublasLtMatrixLayoutOpaque_t& lc,
               const cublasLtMatrixLayoutOpaque_t& ld, float alpha, float beta,
               const void* A, const void* B, const void* C, void* D,
               std::vector<float>& af, std::vector<float>& bf) {
  const bool ta = op.trans_a == CUBLAS_OP_T, tb = op.trans_b == CUBLAS_OP_T;
  const int64_t m = (int64_t)ld.rows, n = (int64_t)ld.cols;
  const int64_t k = ta ? (int64_t)la.rows : (int64_t)la.cols;
  // op(A) as m x k and op(B) as k x n, fp32, contiguous columns.
  af.resize((size_t)(m * k));
  bf.resize((size_t)(k * n));
  for (int64_t p = 0; p < k; ++p)
    for (int64_t i = 0; i < m; ++i)
      af[(size_t)(i + p * m)] = load(A, la.type, (size_t)(ta ? p + i * la.ld : i + p * la.ld));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p)
      bf[(size_t)(p + j * k)] = load(B, lb.type, (size_t)(tb ? j + p * lb.ld : p + j * lb.ld));
  const uint32_t epi = op.epilogue;
  const int dt = ld.type;
  const float* afp = af.data();
  const float* bfp = bf.data();
  // DGELU_BGRAD: the fp32 gradients, summed per row after the parallel loop.
  std::vector<float> dv(epi == CUBLASLT_EPILOGUE_DGELU_BGRAD ? (size_t)(m * n) : 0);
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    std::vector<float> acc((size_t)m, 0.0f);
    float* accp = acc.data();
    for (int64_t p = 0; p < k; ++p) {  // column j of D += op(A)[:, p] * op(B)[p, j]
      const float bv = bfp[p + j * k];
      const float* col = afp + p * m;
      for (int64_t i = 0; i < m; ++i) accp[i] += col[i] * bv;
    }
    for (int64_t i = 0; i < m; ++i) {
      float v = alpha * accp[i];
      if (beta != 0.0f) v += beta * load(C, lc.type, (size_t)(i + j * lc.ld));
      if (reads_bias(epi)) v += load(op.bias, dt, (size_t)i);
      const size_t aux_at = (size_t)(i + j * op.aux_ld);
      if (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        store(op.aux, dt, aux_at, v);
        v = gelu(v);
      } else if (epi == CUBLASLT_EPILOGUE_DGELU || epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
        v *= gelu_grad(load(op.aux, dt, aux_at));
        if (!dv.empty()) dv[(size_t)(i + j * m)] = v;
      }
      store(D, dt, (size_t)(i + j * ld.ld), v);
    }
  }
  if (epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
    for (int64_t i = 0; i < m; ++i) {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) s += dv[(size_t)(i + j * m)];
      store((void*)op.bias, dt, (size_t)i, s);
    }
  } else if (epi == CUBLASLT_EPILOGUE_BGRADB) {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t p = 0; p < k; ++p) s += bfp[p + j * k];
      store((void*)op.bias, dt, (size_t)j, s);
    }
  }
}

// The real library returns INVALID_VALUE without a word; the emulator also says why.
cublasStatus_t invalid(const char* call, const std::string& why) {
  fprintf(stderr, "cuda_emulator: %s: CUBLAS_STATUS_INVALID_VALUE: %s\n", call, why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

void check_handle(const void* h, const char* call, const char* what) {
  if (h == nullptr) refuse(std::string(call) + ": " + what + " is null");
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "there is an error with the license";
  }
  return "unknown error";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F)
    refuse("cublasLtMatmulDescCreate: computeType " + std::to_string((int)compute) +
           " (only CUBLAS_COMPUTE_32F is emulated)");
  if (scale != CUDA_R_32F)
    refuse(std::string("cublasLtMatmulDescCreate: scaleType ") + type_name(scale) +
           " (only CUDA_R_32F is emulated)");
  *desc = new cublasLtMatmulDescOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  const char* call = "cublasLtMatmulDescSetAttribute";
  check_handle(desc, call, "matmulDesc");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      const char* name = attr == CUBLASLT_MATMUL_DESC_TRANSA ? "CUBLASLT_MATMUL_DESC_TRANSA"
                                                              : "CUBLASLT_MATMUL_DESC_TRANSB";
      const int32_t v = read_attr<int32_t>(buf, size, call, name);
      if (v != CUBLAS_OP_N && v != CUBLAS_OP_T)
        refuse(std::string(call) + ": " + name + " = " + std::to_string(v) +
               (v == CUBLAS_OP_C ? " (CUBLAS_OP_C)" : "") + " (only CUBLAS_OP_N and CUBLAS_OP_T are emulated)");
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      const uint32_t v = read_attr<uint32_t>(buf, size, call, "CUBLASLT_MATMUL_DESC_EPILOGUE");
      if (!epilogue_emulated(v))
        refuse(std::string(call) + ": CUBLASLT_MATMUL_DESC_EPILOGUE = " + std::to_string(v) +
               " (" + epilogue_name(v) + ") is not emulated (only DEFAULT, BIAS, GELU_AUX_BIAS, "
               "DGELU, DGELU_BGRAD and BGRADB)");
      desc->epilogue = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      desc->bias = read_attr<const void*>(buf, size, call, "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      desc->aux = read_attr<void*>(buf, size, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      desc->aux_ld = read_attr<int64_t>(buf, size, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD");
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: {
      const int32_t v =
          read_attr<int32_t>(buf, size, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE");
      if (!emulated_16bit(v) && v != CUDA_R_32F && v != -1)
        refuse(std::string(call) + ": CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = " +
               type_name(v) + " (only CUDA_R_16BF, CUDA_R_16F and CUDA_R_32F are emulated)");
      desc->aux_type = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
      const int32_t v = read_attr<int32_t>(buf, size, call, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
      if (!emulated_16bit(v) && v != CUDA_R_32F && v != -1)
        refuse(std::string(call) + ": CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = " + type_name(v) +
               " (only CUDA_R_16BF, CUDA_R_16F and CUDA_R_32F are emulated)");
      desc->bias_type = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    default: break;
  }
  const char* n = attr == CUBLASLT_MATMUL_DESC_COMPUTE_TYPE  ? "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE"
                  : attr == CUBLASLT_MATMUL_DESC_SCALE_TYPE  ? "CUBLASLT_MATMUL_DESC_SCALE_TYPE"
                  : attr == CUBLASLT_MATMUL_DESC_POINTER_MODE ? "CUBLASLT_MATMUL_DESC_POINTER_MODE"
                  : attr == CUBLASLT_MATMUL_DESC_TRANSC      ? "CUBLASLT_MATMUL_DESC_TRANSC"
                  : attr == CUBLASLT_MATMUL_DESC_FILL_MODE   ? "CUBLASLT_MATMUL_DESC_FILL_MODE"
                  : attr == CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE ? "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE"
                  : attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE ? "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE"
                                                                   : "attribute";
  refuse(std::string(call) + ": " + n + " (" + std::to_string((int)attr) + ") is not emulated");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!emulated_16bit(type) && type != CUDA_R_32F)
    refuse(std::string("cublasLtMatrixLayoutCreate: type ") + type_name(type) +
           " (only CUDA_R_16BF, CUDA_R_16F and CUDA_R_32F are emulated)");
  auto* l = new cublasLtMatrixLayoutOpaque_t();
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;  // checked against rows by the heuristic and the matmul, as the real library
  *layout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  check_handle(l, call, "matLayout");
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      const int32_t v = read_attr<int32_t>(buf, size, call, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
      if (v < 1) return CUBLAS_STATUS_INVALID_VALUE;
      l->batch = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      l->stride = read_attr<int64_t>(buf, size, call, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
      if (l->stride < 0) refuse(std::string(call) + ": a negative STRIDED_BATCH_OFFSET is not emulated");
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      const int32_t v = read_attr<int32_t>(buf, size, call, "CUBLASLT_MATRIX_LAYOUT_ORDER");
      if (v != 0)
        refuse(std::string(call) + ": CUBLASLT_MATRIX_LAYOUT_ORDER = " + std::to_string(v) +
               (v == 1 ? " (CUBLASLT_ORDER_ROW)" : "") + " (only CUBLASLT_ORDER_COL is emulated)");
      return CUBLAS_STATUS_SUCCESS;
    }
    default:
      refuse(std::string(call) + ": attribute " + std::to_string((int)attr) +
             " is not emulated (only BATCH_COUNT, STRIDED_BATCH_OFFSET and ORDER = COL)");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  const char* call = "cublasLtMatmulPreferenceSetAttribute";
  check_handle(pref, call, "pref");
  static const char* names[] = {"CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES",
                                "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES",
                                "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES",
                                "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES"};
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      pref->max_workspace = read_attr<uint64_t>(buf, size, call, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
      const int i = (int)attr - (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
      const uint32_t v = read_attr<uint32_t>(buf, size, call, names[i]);
      if (v == 0 || (v & (v - 1)) != 0)
        refuse(std::string(call) + ": " + names[i] + " = " + std::to_string(v) + " is not a power of two");
      pref->align[i] = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    default:
      refuse(std::string(call) + ": attribute " + std::to_string((int)attr) +
             (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE ? " (CUBLASLT_MATMUL_PREF_SEARCH_MODE)" : "") +
             " is not emulated");
  }
}

extern "C++" {
namespace {

struct Refusal {
  std::string what;          // an epilogue's name without CUBLASLT_EPILOGUE_, or a layout
  cublasStatus_t answer;     // CUBLAS_STATUS_SUCCESS: 0 algorithms
};

std::vector<Refusal> parse_refusals(const std::string& rules, const char* source) {
  static const char* whats[] = {"DEFAULT", "BIAS", "GELU_AUX_BIAS", "DGELU", "DGELU_BGRAD",
                                "BGRADB", "TRANSA", "TRANSB", "BATCHED", "C_FP32"};
  std::vector<Refusal> out;
  size_t start = 0;
  while (start < rules.size()) {
    size_t end = rules.find(',', start);
    if (end == std::string::npos) end = rules.size();
    const std::string rule = rules.substr(start, end - start);
    start = end + 1;
    if (rule.empty()) continue;
    const size_t eq = rule.find('=');
    const std::string what = rule.substr(0, eq), how = eq == std::string::npos ? "" : rule.substr(eq + 1);
    bool known = false;
    for (const char* w : whats) known = known || what == w;
    Refusal r{what, CUBLAS_STATUS_SUCCESS};
    if (how == "NOT_SUPPORTED")
      r.answer = CUBLAS_STATUS_NOT_SUPPORTED;
    else if (how == "INVALID_VALUE")
      r.answer = CUBLAS_STATUS_INVALID_VALUE;
    else if (how != "none")
      known = false;
    if (!known)
      refuse(std::string(source) + ": the rule '" + rule +
             "' is not WHAT=HOW with WHAT one of DEFAULT, BIAS, GELU_AUX_BIAS, DGELU, "
             "DGELU_BGRAD, BGRADB, TRANSA, TRANSB, BATCHED, C_FP32 and HOW one of none, "
             "NOT_SUPPORTED, INVALID_VALUE (e.g. DGELU=none,TRANSA=NOT_SUPPORTED)");
    out.push_back(r);
  }
  return out;
}

std::mutex g_refusals_mutex;
bool g_refusals_set = false;  // by set_cublaslt_refusals; else the environment's
std::vector<Refusal> g_refusals;

std::vector<Refusal> refusals() {
  std::lock_guard<std::mutex> lock(g_refusals_mutex);
  if (!g_refusals_set) {
    const char* e = getenv("GPUMIX_EMULATED_CUBLASLT_REFUSE");
    g_refusals = parse_refusals(e ? e : "", "GPUMIX_EMULATED_CUBLASLT_REFUSE");
    g_refusals_set = true;
  }
  return g_refusals;
}

// The first rule that names this problem, or null.
const Refusal* refusal_for(const std::vector<Refusal>& rules, const cublasLtMatmulDescOpaque_t& op,
                           const cublasLtMatrixLayoutOpaque_t& c,
                           const cublasLtMatrixLayoutOpaque_t& d,
                           const cublasLtMatrixLayoutOpaque_t& a) {
  const std::string epi = std::string(epilogue_name(op.epilogue)).substr(strlen("CUBLASLT_EPILOGUE_"));
  for (const Refusal& r : rules)
    if (r.what == epi || (r.what == "TRANSA" && op.trans_a != CUBLAS_OP_N) ||
        (r.what == "TRANSB" && op.trans_b != CUBLAS_OP_N) ||
        (r.what == "BATCHED" && a.batch > 1) ||
        (r.what == "C_FP32" && (c.type == CUDA_R_32F || d.type == CUDA_R_32F)))
      return &r;
  return nullptr;
}

}  // namespace

namespace cuda_emulator {
void set_cublaslt_refusals(const char* rules) {
  std::lock_guard<std::mutex> lock(g_refusals_mutex);
  g_refusals_set = rules != nullptr;
  g_refusals = rules ? parse_refusals(rules, "set_cublaslt_refusals") : std::vector<Refusal>{};
}
}  // namespace cuda_emulator
}  // extern "C++"

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  check_handle(op, call, "operationDesc");
  check_handle(a, call, "Adesc");
  check_handle(b, call, "Bdesc");
  check_handle(c, call, "Cdesc");
  check_handle(d, call, "Ddesc");
  check_handle(pref, call, "preference");
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  std::string why;
  if (check_problem(call, *op, *a, *b, *c, *d, &why) != CUBLAS_STATUS_SUCCESS) return invalid(call, why);
  const std::vector<Refusal> rules = refusals();
  if (const Refusal* no = refusal_for(rules, *op, *c, *d, *a)) return no->answer;  // 0 returned
  cublasLtMatmulHeuristicResult_t r;
  memset(&r, 0, sizeof r);
  r.algo.data[0] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = pref->align[i];
  r.workspaceSize = std::min<uint64_t>(pref->max_workspace, kAlgoWorkspace);
  r.algo.data[5] = r.workspaceSize;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  check_handle(op, call, "computeDesc");
  check_handle(a, call, "Adesc");
  check_handle(b, call, "Bdesc");
  check_handle(c, call, "Cdesc");
  check_handle(d, call, "Ddesc");
  if (!algo)
    refuse("cublasLtMatmul: algo = NULL (the library's own heuristic inside cublasLtMatmul is "
           "not emulated; pass the result of cublasLtMatmulAlgoGetHeuristic)");
  if (algo->data[0] != kAlgoMagic)
    refuse("cublasLtMatmul: algo was not returned by cublasLtMatmulAlgoGetHeuristic");
  std::string why;
  if (check_problem(call, *op, *a, *b, *c, *d, &why) != CUBLAS_STATUS_SUCCESS) return invalid(call, why);
  if (workspace_bytes < algo->data[5])  // the documentation's own example of INVALID_VALUE
    return invalid(call, "workspaceSizeInBytes " + std::to_string(workspace_bytes) + " < the " +
                             std::to_string(algo->data[5]) + " bytes the algorithm needs");
  if (!alpha || !beta || !A || !B || !D || !C) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *(const float*)alpha, be = *(const float*)beta;  // host pointer mode

  // Every operand lies in device memory, aligned as the algorithm was promised.
  const cublasLtMatrixLayoutOpaque_t la = *a, lb = *b, lc = *c, ldd = *d;
  const cublasLtMatmulDescOpaque_t desc = *op;  // the caller may destroy them on return
  const void* ptrs[4] = {A, B, C, D};
  const cublasLtMatrixLayoutOpaque_t* ls[4] = {&la, &lb, &lc, &ldd};
  static const char* what[4] = {"cublasLtMatmul A", "cublasLtMatmul B", "cublasLtMatmul C",
                                "cublasLtMatmul D"};
  for (int i = 0; i < 4; ++i) {
    if (i == 2 && be == 0.0f) continue;  // C is not read
    const size_t es = elem_size(ls[i]->type);
    cuda_emulator::require_device(ptrs[i], extent(*ls[i]) * es, what[i]);
    const uint64_t need = algo->data[1 + i];
    uintptr_t bits = (uintptr_t)ptrs[i];
    if (ls[i]->batch > 1) bits |= (uintptr_t)(ls[i]->stride * (int64_t)es);
    if (bits % need != 0)
      refuse(std::string(what[i]) + " at " + std::to_string((uintptr_t)ptrs[i]) +
             (ls[i]->batch > 1 ? " with batch stride " + std::to_string(ls[i]->stride * (int64_t)es) + " bytes" : "") +
             " is not aligned to " + std::to_string(need) +
             " bytes, as CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" + "ABCD"[i] +
             "_BYTES promised when the algorithm was chosen");
  }
  const uint32_t epi = desc.epilogue;
  if (reads_bias(epi) || writes_bias(epi)) {
    if (!desc.bias)
      refuse(std::string("cublasLtMatmul: ") + epilogue_name(epi) +
             " without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    // BGRADB's vector runs along the columns of D, every other along its rows.
    const uint64_t len = epi == CUBLASLT_EPILOGUE_BGRADB ? ldd.cols : ldd.rows;
    cuda_emulator::require_device(desc.bias, len * elem_size(ldd.type),
                                  writes_bias(epi) ? "cublasLtMatmul bias gradient"
                                                   : "cublasLtMatmul bias");
  }
  if (uses_aux(epi)) {
    if (!desc.aux)
      refuse(std::string("cublasLtMatmul: ") + epilogue_name(epi) +
             " without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    const size_t aux_elems = (size_t)((ldd.cols - 1) * (uint64_t)desc.aux_ld + ldd.rows);
    cuda_emulator::require_device(desc.aux, aux_elems * elem_size(ldd.type), "cublasLtMatmul aux");
  }
  const size_t ws = algo->data[5];
  if (ws > 0) cuda_emulator::require_device(workspace, ws, "cublasLtMatmul workspace");

  cuda_emulator::enqueue(stream, "cublasLtMatmul", [=] {
    if (ws > 0) memset(workspace, 0xFF, ws);  // the algorithm's scratch: shared use shows
    std::vector<float> af, bf;
    const size_t ea = elem_size(la.type), eb = elem_size(lb.type), ec = elem_size(lc.type),
                 ed = elem_size(ldd.type);
    for (int32_t i = 0; i < ldd.batch; ++i) {
      reference(desc, la, lb, lc, ldd, al, be,
                (const char*)A + (size_t)i * la.stride * ea,
                (const char*)B + (size_t)i * lb.stride * eb,
                (const char*)C + (size_t)i * lc.stride * ec, (char*)D + (size_t)i * ldd.stride * ed,
                af, bf);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
