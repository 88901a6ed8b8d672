// Matmuls through cuBLASLt: bf16 A and B, fp32 compute and scale, bf16 or fp32 C/D, the
// BIAS epilogue for the forward. Row-major operands are handed to column-major cuBLASLt
// as their transposes (D^T = op(B)^T op(A)^T; see research/TECH.md section 3), so no
// ORDER_ROW layouts are needed and the bias epilogues stay available.
//
// Per device: one cuBLASLt handle; per (device, stream): one workspace of 32 MiB on
// Hopper and newer (cc >= 9.0), 4 MiB otherwise; per shape (and alignment, epilogue,
// output type): the algorithm picked by cublasLtMatmulAlgoGetHeuristic, cached.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
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
  int dev, ta, tb, m, n, k, batch, ctype, epilogue, align_a, align_b, align_c;
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
std::unordered_map<int, DeviceState> g_devices;
std::unordered_map<AlgoKey, cublasLtMatmulAlgo_t, AlgoKeyHash> g_algos;

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

// RAII for the descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
  if (batch <= 1) return;
  const int32_t count = batch;
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                sizeof count));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

// Row-major C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C [+ bias (n) per row].
void lt_matmul(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a, int64_t lda,
               const bf16* b, int64_t ldb, float beta, void* c, cudaDataType_t ctype,
               int64_t ldc, int batch, int64_t sa, int64_t sb, int64_t sc, const bf16* bias,
               cudaStream_t stream) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  if (k <= 0) {  // C = beta C (+ bias): nothing to multiply; keep BLAS semantics simple
    throw Error("gemm: k must be positive (got " + std::to_string(k) + ")");
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cublasLtHandle_t handle;
  void* ws;
  size_t ws_bytes;
  handle_and_workspace(dev, stream, &handle, &ws, &ws_bytes);

  const size_t csize = ctype == CUDA_R_32F ? 4 : 2;
  // Column-major view: D' (n x m, ld ldc) = op(A') (n x k) op(B') (k x m), A' = b, B' = a.
  Descs d;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                              sizeof op_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                              sizeof op_b));
  const uint32_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue));
  if (bias) {
    const int32_t bias_type = CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof bias_type));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, tb ? k : n, tb ? n : k, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, ta ? m : k, ta ? k : m, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, ctype, n, m, ldc));
  set_batch(d.a, batch, sb);
  set_batch(d.b, batch, sa);
  set_batch(d.c, batch, sc);

  AlgoKey key;
  memset(&key, 0, sizeof key);  // padding bytes take part in the hash
  key.dev = dev;
  key.ta = ta;
  key.tb = tb;
  key.m = m;
  key.n = n;
  key.k = k;
  key.batch = batch;
  key.ctype = (int)ctype;
  key.epilogue = (int)epilogue;
  key.align_a = alignment_of(b, sb * 2, batch);  // cuBLASLt's A is our B
  key.align_b = alignment_of(a, sa * 2, batch);
  key.align_c = alignment_of(c, sc * (int64_t)csize, batch);
  if (bias) key.align_c = key.align_c < alignment_of(bias, 0, 1) ? key.align_c
                                                                 : alignment_of(bias, 0, 1);
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.sa = sa;
  key.sb = sb;
  key.sc = sc;

  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (!cached) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t max_ws = ws_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
    const uint32_t al_a = key.align_a, al_b = key.align_b, al_c = key.align_c;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                                &result, &found));
    if (found == 0) {
      throw Error("cuBLASLt has no algorithm for gemm(trans_a=" + std::to_string(ta) +
                  ", trans_b=" + std::to_string(tb) + ", m=" + std::to_string(m) +
                  ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
                  ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) +
                  ", ldc=" + std::to_string(ldc) + ", batch=" + std::to_string(batch) +
                  ", C " + (csize == 4 ? "fp32" : "bf16") + (bias ? ", bias" : "") +
                  ", alignments " + std::to_string(key.align_a) + "/" +
                  std::to_string(key.align_b) + "/" + std::to_string(key.align_c) +
                  " bytes); hint: bf16 leading dimensions should be multiples of 8");
    }
    algo = result.algo;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_algos.emplace(key, algo);
  }
  CUBLAS_CHECK(cublasLtMatmul(handle, d.op, &alpha, b, d.a, a, d.b, &beta, c, d.c, c, d.c,
                              &algo, ws, ws_bytes, stream));
}

__global__ void bias_add_kernel(bf16* out, const bf16* inp, const bf16* bias, int64_t n, int C) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    out[i] = detail::to_bf16(detail::ld_bf16(inp[i]) + detail::ld_bf16(bias[i % C]));
  }
}

struct ColSum {
  const bf16* dout;
  int C;
  __device__ void operator()(int r, int c, float* out) const {
    out[0] = detail::ld_bf16(dout[(int64_t)r * C + c]);
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
  g_algos.clear();
}
}  // namespace detail

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, bf16* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c, cudaStream_t stream) {
  lt_matmul(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, CUDA_R_16BF, ldc, batch,
            stride_a, stride_b, stride_c, nullptr, stream);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c, cudaStream_t stream) {
  lt_matmul(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, CUDA_R_32F, ldc, batch,
            stride_a, stride_b, stride_c, nullptr, stream);
}

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N,
                    int C, int OC, cudaStream_t stream) {
  lt_matmul(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, CUDA_R_16BF, OC, 1, 0, 0,
            0, bias, stream);
}

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC,
                     cudaStream_t stream) {
  if (dinp)  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
    lt_matmul(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, CUDA_R_16BF, C, 1,
              0, 0, 0, nullptr, stream);
  if (dweight)  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
    lt_matmul(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, CUDA_R_32F, C, 1, 0,
              0, 0, nullptr, stream);
  if (dbias) bias_backward(dbias, dout, N, OC, stream);
}

void bias_add(bf16* out, const bf16* inp, const bf16* bias, int N, int C, cudaStream_t stream) {
  const int64_t n = (int64_t)N * C;
  if (n <= 0) return;
  GPUMIX_LAUNCH(bias_add_kernel, detail::grid_for(n, 256), 256, 0, stream, out, inp, bias, n, C);
  CUDA_CHECK_LAST();
}

void bias_backward(float* dbias, const bf16* dout, int N, int C, cudaStream_t stream) {
  if (!dbias) return;
  detail::colreduce<1>(dbias, nullptr, N, C, ColSum{dout, C}, stream);
}

int matmul_cached_algos() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return (int)g_algos.size();
}

}  // namespace gpumix::kernels::cuda
