// GEMM through OpenBLAS, the linear layer, and bias kernels.
#include <cblas.h>
#include <algorithm>

#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {
// Below this many multiply-adds per matrix, one BLAS call cannot keep the cores busy, so
// the batch is spread over threads with BLAS single-threaded inside (OpenBLAS's OpenMP
// build runs serially inside a parallel region). bench_kernels' gemm_batched measures it.
constexpr int64_t k_small_gemm_macs = 64 * 64 * 64;

// C (m,n) *= beta, for k == 0, where BLAS implementations differ; beta == 0 writes zeros.
void scale_c(int m, int n, float beta, float* c, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) c[(int64_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(int64_t)i * ldc + j];
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  if (k <= 0) {
    for (int p = 0; p < batch; p++) scale_c(m, n, beta, c + p * stride_c, ldc);
    return;
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const bool small = (int64_t)m * n * k < k_small_gemm_macs;
  if (batch > 1 && small) {
#pragma omp parallel for schedule(static)
    for (int p = 0; p < batch; p++)
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a + p * stride_a, lda,
                  b + p * stride_b, ldb, beta, c + p * stride_c, ldc);
    return;
  }
  for (int p = 0; p < batch; p++)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a + p * stride_a, lda,
                b + p * stride_b, ldb, beta, c + p * stride_c, ldc);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  // Start out from the bias and let BLAS accumulate onto it (beta = 1): no extra pass.
  if (bias) {
#pragma omp parallel for schedule(static) if ((int64_t)N * OC >= (1 << 15))
    for (int i = 0; i < N; i++) std::copy(bias, bias + OC, out + (int64_t)i * OC);
  }
  // out (N,OC) = inp (N,C) @ weight (OC,C)^T
  gemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  if (dinp) gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

void bias_add(float* out, const float* inp, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= (1 << 15))
  for (int i = 0; i < N; i++) {
    const float* x = inp + (int64_t)i * C;
    float* y = out + (int64_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = x[c] + bias[c];
  }
}

void bias_backward(float* dbias, const float* dout, int N, int C) {
  // Threads own column chunks, so no two threads write the same dbias entry; the row loop
  // is outside so each thread streams through dout rows contiguously.
  constexpr int chunk = 32;  // two cache lines of columns per task
  const int nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= (1 << 15))
  for (int ch = 0; ch < nchunks; ch++) {
    const int c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
    float acc[chunk] = {};
    for (int i = 0; i < N; i++) {
      const float* dy = dout + (int64_t)i * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) acc[c - c0] += dy[c];
    }
    for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
  }
}

}  // namespace gpumix::kernels::cpu
