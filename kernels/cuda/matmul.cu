// Matmuls through cuBLASLt: 16-bit A and B (bf16 as CUDA_R_16BF or f16 as CUDA_R_16F, one
// source templated over the format H), fp32 compute and scale, C/D of A's type or fp32, and
// the epilogues that save passes over memory: BIAS for the forward, GELU_AUX_BIAS (linear
// + GELU, the GELU input kept as aux), DGELU (the next linear's input gradient through the
// GELU) and BGRADB (a bias gradient from the weight-gradient product), and beta 0 for a
// gradient's first write. Row-major operands are handed to column-major cuBLASLt
// as their transposes (D^T = op(B)^T op(A)^T; see research/TECH.md section 3), so no
// ORDER_ROW layouts are needed and the bias epilogues stay available.
//
// Per device: one cuBLASLt handle; per (device, stream): one workspace of 32 MiB on
// Hopper and newer (cc >= 9.0), 4 MiB otherwise; per shape (and alignment, epilogue,
// output type): the descriptors, layouts and the algorithm picked by
// cublasLtMatmulAlgoGetHeuristic, built once and cached (a call sets only its pointers).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/cuda/common.cuh"

namespace gpumix::kernels::cuda {

namespace {

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  size_t workspace_bytes = 0;
  std::unordered_map<cudaStream_t, void*> workspaces;
};

struct AlgoKey {
  int dev, ta, tb, m, n, k, batch, abtype, ctype, epilogue, align_a, align_b, align_c;
  int64_t lda, ldb, ldc, sa, sb, sc;
  bool operator==(const AlgoKey& o) const { return memcmp(this, &o, sizeof *this) == 0; }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    const unsigned char* p = (const unsigned char*)&k;
    size_t h = 1469598103934665603ull;  // FNV-1a over the bytes
    for (size_t i = 0; i < sizeof k; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};

std::mutex g_mutex;
// Never destroyed: a device's handle and workspaces live until release_resources or the
// process's end (a destructor at exit would drop the handle unreleased, LeakSanitizer's
// report under the emulated device, and could run after the CUDA runtime unloaded).
std::unordered_map<int, DeviceState>& g_devices = *new std::unordered_map<int, DeviceState>;

// Handle and workspace for the current device and this stream.
void handle_and_workspace(int dev, cudaStream_t stream, cublasLtHandle_t* handle, void** ws,
                          size_t* ws_bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& st = g_devices[dev];
  if (st.handle == nullptr) {
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    st.workspace_bytes = (major >= 9 ? 32u : 4u) << 20;
    CUBLAS_CHECK(cublasLtCreate(&st.handle));
  }
  auto it = st.workspaces.find(stream);
  if (it == st.workspaces.end()) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, st.workspace_bytes));
    it = st.workspaces.emplace(stream, p).first;
  }
  *handle = st.handle;
  *ws = it->second;
  *ws_bytes = st.workspace_bytes;
}

// Largest power of two <= 256 dividing the address and, for batches, the stride.
int alignment_of(const void* p, int64_t stride_bytes, int batch) {
  uintptr_t a = (uintptr_t)p | 256u;
  if (batch > 1) a |= (uintptr_t)stride_bytes;
  return (int)(a & (~a + 1));
}

void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
  if (batch <= 1) return;
  const int32_t count = batch;
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                sizeof count));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

// The descriptors, layouts and algorithm of one (shape, alignment, epilogue, output type),
// built once: a call only sets its bias and aux pointers (under `mutex`: thread ranks may
// share a shape) and runs. Never moved (held by pointer), destroyed by matmul_release_all.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool found = false;  // false: the heuristic has no algorithm (the caller decides)
  std::string refusal;  // then, what the heuristic answered
  std::mutex mutex;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};
std::unordered_map<AlgoKey, std::unique_ptr<Plan>, AlgoKeyHash> g_plans;

// What one product computes beyond D = alpha op(A) op(B) + beta C (cublasLtEpilogue_t):
// `bias` is read (BIAS, GELU_AUX_BIAS) or written (BGRADB: fp32, length n of the row-major
// result); `aux` (GELU_AUX_BIAS: written; DGELU: read) is laid out as C, row-major (m, n)
// with leading dimension ldc.
// cuBLASLt's name of each 16-bit format.
template <class H>
constexpr cudaDataType_t lt_type();
template <>
constexpr cudaDataType_t lt_type<bf16>() { return CUDA_R_16BF; }
template <>
constexpr cudaDataType_t lt_type<f16>() { return CUDA_R_16F; }

struct Epilogue {
  uint32_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
};

const char* epilogue_name(uint32_t kind) {
  switch (kind) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
  }
  return "(another)";
}

// Row-major C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C, then the epilogue. Returns
// false, having done nothing, when `may_decline` and cuBLASLt has no algorithm for the
// fused epilogue (the caller then runs the unfused passes); otherwise such a gap throws.
template <class H>
bool lt_matmul(bool ta, bool tb, int m, int n, int k, float alpha, const H* a, int64_t lda,
               const H* b, int64_t ldb, float beta, void* c, cudaDataType_t ctype,
               int64_t ldc, int batch, int64_t sa, int64_t sb, int64_t sc, const Epilogue& epi,
               cudaStream_t stream, bool may_decline = false) {
  if (m <= 0 || n <= 0 || batch <= 0) return true;
  if (k <= 0) {  // C = beta C (+ bias): nothing to multiply; keep BLAS semantics simple
    throw Error("gemm: k must be positive (got " + std::to_string(k) + ")");
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cublasLtHandle_t handle;
  void* ws;
  size_t ws_bytes;
  handle_and_workspace(dev, stream, &handle, &ws, &ws_bytes);

  constexpr cudaDataType_t abtype = lt_type<H>();
  const size_t csize = ctype == CUDA_R_32F ? 4 : 2;
  AlgoKey key;
  memset(&key, 0, sizeof key);  // padding bytes take part in the hash
  key.dev = dev;
  key.ta = ta;
  key.tb = tb;
  key.m = m;
  key.n = n;
  key.k = k;
  key.batch = batch;
  key.abtype = (int)abtype;
  key.ctype = (int)ctype;
  key.epilogue = (int)epi.kind;
  key.align_a = alignment_of(b, sb * 2, batch);  // cuBLASLt's A is our B
  key.align_b = alignment_of(a, sa * 2, batch);
  key.align_c = alignment_of(c, sc * (int64_t)csize, batch);
  // The heuristic reads the bias and aux pointers' alignment too: fold them into C's.
  for (const void* p : {epi.bias, (const void*)epi.aux})
    if (p) key.align_c = std::min(key.align_c, alignment_of(p, 0, 1));
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.sa = sa;
  key.sb = sb;
  key.sc = sc;

  Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) plan = it->second.get();
  }
  if (plan == nullptr) {
    auto built = std::make_unique<Plan>();
    Plan& d = *built;
    // Column-major view: D' (n x m, ld ldc) = op(A') (n x k) op(B') (k x m), A' = b, B' = a.
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                sizeof op_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                sizeof op_b));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi.kind,
                                                sizeof epi.kind));
    if (epi.bias) {  // a bias of the weights' dtype, a bias gradient of C's type
      const int32_t bias_type = epi.kind == CUBLASLT_EPILOGUE_BGRADB ? (int32_t)ctype : (int32_t)abtype;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bias_type, sizeof bias_type));
    }
    if (epi.aux) {
      const int64_t aux_ld = ldc;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &aux_ld, sizeof aux_ld));
    }
    // The heuristic reads the pointers' values (their alignment): set them before it.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &epi.bias, sizeof epi.bias));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &epi.aux, sizeof epi.aux));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, abtype, tb ? k : n, tb ? n : k, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, abtype, ta ? m : k, ta ? k : m, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, ctype, n, m, ldc));
    set_batch(d.a, batch, sb);
    set_batch(d.b, batch, sa);
    set_batch(d.c, batch, sc);

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t max_ws = ws_bytes;
    const uint32_t al_a = key.align_a, al_b = key.align_b, al_c = key.align_c;
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al_c, sizeof al_c);
    const cublasStatus_t pref_st = st;
    if (pref_st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, pref, 1, &result,
                                          &found);
    cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_CHECK(pref_st);
    // The heuristic's refusals: NOT_SUPPORTED is how it says "none for this", INVALID_VALUE
    // that no algorithm of it takes this configuration, and it may return 0 algorithms.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
      d.refusal = std::string("the heuristic returned ") + cublasLtGetStatusName(st);
      st = CUBLAS_STATUS_SUCCESS;
      found = 0;
    } else if (st == CUBLAS_STATUS_SUCCESS && found == 0) {
      d.refusal = "the heuristic returned 0 algorithms";
    }
    CUBLAS_CHECK(st);
    d.found = found > 0;
    if (d.found) d.algo = result.algo;
    std::lock_guard<std::mutex> lock(g_mutex);
    auto ins = g_plans.emplace(key, std::move(built));  // another thread's, if it was first
    plan = ins.first->second.get();
  }
  if (!plan->found) {
    if (may_decline) return false;
    throw Error("cuBLASLt refused gemm(trans_a=" + std::to_string(ta) +
                ", trans_b=" + std::to_string(tb) + ", m=" + std::to_string(m) +
                ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
                ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) +
                ", ldc=" + std::to_string(ldc) + ", batch=" + std::to_string(batch) +
                ", A and B " + (abtype == CUDA_R_16F ? "f16" : "bf16") + ", C " +
                (csize == 4 ? "fp32" : abtype == CUDA_R_16F ? "f16" : "bf16") + ", epilogue " +
                epilogue_name(epi.kind) + ", alignments " + std::to_string(key.align_a) + "/" +
                std::to_string(key.align_b) + "/" + std::to_string(key.align_c) +
                " bytes): " + plan->refusal +
                "; hint: 16-bit leading dimensions should be multiples of 8");
  }
  std::lock_guard<std::mutex> lock(plan->mutex);
  if (epi.bias || epi.aux) {  // this call's pointers (same alignment: it is in the key)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &epi.bias, sizeof epi.bias));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &epi.aux, sizeof epi.aux));
  }
  CUBLAS_CHECK(cublasLtMatmul(handle, plan->op, &alpha, b, plan->a, a, plan->b, &beta, c,
                              plan->c, c, plan->c, &plan->algo, ws, ws_bytes, stream));
  return true;
}

template <class H>
__global__ void bias_add_kernel(H* out, const H* inp, const H* bias, int64_t n, int C) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    out[i] = detail::from_f32<H>(detail::to_f32(inp[i]) + detail::to_f32(bias[i % C]));
  }
}

template <class H>
struct ColSum {
  const H* dout;
  int C;
  __device__ void operator()(int r, int c, float* out) const {
    out[0] = detail::to_f32(dout[(int64_t)r * C + c]);
  }
};

}  // namespace

namespace detail {
void matmul_release_all() {
  std::lock_guard<std::mutex> lock(g_mutex);
  int cur = 0;
  CUDA_CHECK(cudaGetDevice(&cur));
  for (auto& kv : g_devices) {
    CUDA_CHECK(cudaSetDevice(kv.first));
    for (auto& w : kv.second.workspaces) CUDA_CHECK(cudaFree(w.second));
    if (kv.second.handle) CUBLAS_CHECK(cublasLtDestroy(kv.second.handle));
  }
  CUDA_CHECK(cudaSetDevice(cur));
  g_devices.clear();
  g_plans.clear();
}
}  // namespace detail

namespace {

template <class H>
void gemm_t(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const H* a,
          int lda, const H* b, int ldb, float beta, H* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c, cudaStream_t stream) {
  lt_matmul(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, lt_type<H>(), ldc, batch,
            stride_a, stride_b, stride_c, Epilogue{}, stream);
}

template <class H>
void gemm_f32_t(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const H* a,
          int lda, const H* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c, cudaStream_t stream) {
  lt_matmul(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, CUDA_R_32F, ldc, batch,
            stride_a, stride_b, stride_c, Epilogue{}, stream);
}

template <class H>
void matmul_forward_t(H* out, const H* inp, const H* weight, const H* bias, int N,
                    int C, int OC, cudaStream_t stream) {
  Epilogue epi;
  if (bias) epi = Epilogue{CUBLASLT_EPILOGUE_BIAS, bias, nullptr};
  if (lt_matmul(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, lt_type<H>(), OC, 1, 0,
                0, 0, epi, stream, /*may_decline=*/bias != nullptr))
    return;
  // No algorithm fuses the bias: the product, then the bias (out rounded twice).
  lt_matmul(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, lt_type<H>(), OC, 1, 0, 0,
            0, Epilogue{}, stream);
  bias_add(out, out, bias, N, OC, stream);
}

template <class H>
void matmul_gelu_forward_t(H* out, H* pre, const H* inp, const H* weight,
                         const H* bias, int N, int C, int OC, cudaStream_t stream) {
  const Epilogue epi{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre};
  if (OC % 8 == 0 &&  // EPILOGUE_AUX_LD (= OC) must be a multiple of 8
      lt_matmul(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, lt_type<H>(), OC, 1, 0,
                0, 0, epi, stream, /*may_decline=*/true))
    return;
  matmul_forward(pre, inp, weight, bias, N, C, OC, stream);  // the two passes it replaces
  gelu_forward(out, pre, (int64_t)N * OC, stream);
}

template <class H>
void matmul_backward_dgelu_t(H* dpre, const H* dout, const H* weight, const H* pre,
                           int N, int C, int OC, cudaStream_t stream) {
  if (C % 8 != 0)
    throw Error("matmul_backward_dgelu: C = " + std::to_string(C) +
                " is not a multiple of 8, which cuBLASLt's DGELU epilogue needs "
                "(EPILOGUE_AUX_LD); hint: use matmul_backward and gelu_backward");
  // dpre (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(pre), written (beta 0)
  if (lt_matmul(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dpre, lt_type<H>(), C, 1,
                0, 0, 0, Epilogue{CUBLASLT_EPILOGUE_DGELU, nullptr, const_cast<H*>(pre)},
                stream, /*may_decline=*/true))
    return;
  // No algorithm fuses DGELU: the product into scratch, then dpre = 0 + it * gelu'(pre).
  const int64_t n = (int64_t)N * C;
  H* prod = (H*)detail::scratch_alloc(sizeof(H) * (size_t)n, stream);
  lt_matmul(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, prod, lt_type<H>(), C, 1, 0,
            0, 0, Epilogue{}, stream);
  CUDA_CHECK(cudaMemsetAsync(dpre, 0, sizeof(H) * (size_t)n, stream));
  gelu_backward(dpre, pre, prod, n, stream);
  detail::scratch_free(prod, stream);
}

template <class H>
void matmul_backward_t(H* dinp, float* dweight, float* dbias, const H* dout,
                     const H* inp, const H* weight, int N, int C, int OC,
                     cudaStream_t stream, bool overwrite_dinp, bool overwrite_params,
                     float* dbias_scratch) {
  if (dinp)  // dinp (N,C) (+)= dout (N,OC) @ weight (OC,C)
    lt_matmul(false, false, N, C, OC, 1.0f, dout, OC, weight, C, overwrite_dinp ? 0.0f : 1.0f,
              dinp, lt_type<H>(), C, 1, 0, 0, 0, Epilogue{}, stream);
  const float beta = overwrite_params ? 0.0f : 1.0f;
  // dbias by BGRADB on the dweight product (the column sums of dout, its B operand, in fp32),
  // which writes: straight into dbias on a first write, else into the scratch, then added.
  float* bgrad = overwrite_params ? dbias : dbias_scratch;
  if (dweight && dbias && bgrad) {
    const Epilogue epi{CUBLASLT_EPILOGUE_BGRADB, bgrad, nullptr};
    if (lt_matmul(true, false, OC, C, N, 1.0f, dout, OC, inp, C, beta, dweight, CUDA_R_32F, C, 1,
                  0, 0, 0, epi, stream, /*may_decline=*/true)) {
      if (bgrad != dbias) axpy(dbias, bgrad, 1.0f, OC, stream);
      return;
    }
  }
  if (dweight)  // dweight (OC,C) (+)= dout^T (OC,N) @ inp (N,C)
    lt_matmul(true, false, OC, C, N, 1.0f, dout, OC, inp, C, beta, dweight, CUDA_R_32F, C, 1, 0,
              0, 0, Epilogue{}, stream);
  if (dbias) {
    if (overwrite_params) CUDA_CHECK(cudaMemsetAsync(dbias, 0, (size_t)OC * 4, stream));
    bias_backward(dbias, dout, N, OC, stream);
  }
}

template <class H>
void bias_add_t(H* out, const H* inp, const H* bias, int N, int C, cudaStream_t stream) {
  const int64_t n = (int64_t)N * C;
  if (n <= 0) return;
  auto* bias_add = &bias_add_kernel<H>;
  GPUMIX_LAUNCH(bias_add, detail::grid_for(n, 256), 256, 0, stream, out, inp, bias, n, C);
  CUDA_CHECK_LAST();
}

template <class H>
void bias_backward_t(float* dbias, const H* dout, int N, int C, cudaStream_t stream) {
  if (!dbias) return;
  detail::colreduce<1>(dbias, nullptr, N, C, ColSum<H>{dout, C}, stream);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda, const bf16* b,
          int ldb, float beta, bf16* c, int ldc, int batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
          cudaStream_t stream) {
  gemm_t(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a, stride_b, stride_c, stream);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const f16* a, int lda, const f16* b,
          int ldb, float beta, f16* c, int ldc, int batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
          cudaStream_t stream) {
  gemm_t(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a, stride_b, stride_c, stream);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda, const bf16* b,
          int ldb, float beta, float* c, int ldc, int batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
          cudaStream_t stream) {
  gemm_f32_t(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a, stride_b, stride_c, stream);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const f16* a, int lda, const f16* b,
          int ldb, float beta, float* c, int ldc, int batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
          cudaStream_t stream) {
  gemm_f32_t(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a, stride_b, stride_c, stream);
}
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int C, int OC,
                    cudaStream_t stream) {
  matmul_forward_t(out, inp, weight, bias, N, C, OC, stream);
}
void matmul_forward(f16* out, const f16* inp, const f16* weight, const f16* bias, int N, int C, int OC,
                    cudaStream_t stream) {
  matmul_forward_t(out, inp, weight, bias, N, C, OC, stream);
}
void matmul_gelu_forward(bf16* out, bf16* pre, const bf16* inp, const bf16* weight, const bf16* bias, int N,
                         int C, int OC, cudaStream_t stream) {
  matmul_gelu_forward_t(out, pre, inp, weight, bias, N, C, OC, stream);
}
void matmul_gelu_forward(f16* out, f16* pre, const f16* inp, const f16* weight, const f16* bias, int N,
                         int C, int OC, cudaStream_t stream) {
  matmul_gelu_forward_t(out, pre, inp, weight, bias, N, C, OC, stream);
}
void matmul_backward_dgelu(bf16* dpre, const bf16* dout, const bf16* weight, const bf16* pre, int N, int C,
                           int OC, cudaStream_t stream) {
  matmul_backward_dgelu_t(dpre, dout, weight, pre, N, C, OC, stream);
}
void matmul_backward_dgelu(f16* dpre, const f16* dout, const f16* weight, const f16* pre, int N, int C,
                           int OC, cudaStream_t stream) {
  matmul_backward_dgelu_t(dpre, dout, weight, pre, N, C, OC, stream);
}
void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int N, int C, int OC, cudaStream_t stream, bool overwrite_dinp,
                     bool overwrite_params, float* dbias_scratch) {
  matmul_backward_t(dinp, dweight, dbias, dout, inp, weight, N, C, OC, stream, overwrite_dinp, overwrite_params,
                    dbias_scratch);
}
void matmul_backward(f16* dinp, float* dweight, float* dbias, const f16* dout, const f16* inp,
                     const f16* weight, int N, int C, int OC, cudaStream_t stream, bool overwrite_dinp,
                     bool overwrite_params, float* dbias_scratch) {
  matmul_backward_t(dinp, dweight, dbias, dout, inp, weight, N, C, OC, stream, overwrite_dinp, overwrite_params,
                    dbias_scratch);
}
void bias_add(bf16* out, const bf16* inp, const bf16* bias, int N, int C, cudaStream_t stream) {
  bias_add_t(out, inp, bias, N, C, stream);
}
void bias_add(f16* out, const f16* inp, const f16* bias, int N, int C, cudaStream_t stream) {
  bias_add_t(out, inp, bias, N, C, stream);
}
void bias_backward(float* dbias, const bf16* dout, int N, int C, cudaStream_t stream) {
  bias_backward_t(dbias, dout, N, C, stream);
}
void bias_backward(float* dbias, const f16* dout, int N, int C, cudaStream_t stream) {
  bias_backward_t(dbias, dout, N, C, stream);
}

int matmul_cached_algos() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return (int)g_plans.size();
}

}  // namespace gpumix::kernels::cuda
