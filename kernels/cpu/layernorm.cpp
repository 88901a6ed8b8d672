// LayerNorm over the last axis (eps 1e-5, biased variance, as PyTorch).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr float k_eps = 1e-5f;
constexpr int64_t k_par_min = 1 << 14;  // elements below which threads cost more than they save
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C >= k_par_min)
  for (int i = 0; i < N; i++) {
    const float* x = inp + (int64_t)i * C;  // (C)
    float* y = out + (int64_t)i * C;        // (C)
    // Two passes (mean, then centred squares) rather than E[x^2] - E[x]^2, which cancels.
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    const float m = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(v / C + k_eps);
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
  const bool par = (int64_t)N * C >= k_par_min;
  // dinp: rows are independent.
  if (dinp) {
#pragma omp parallel for schedule(static) if (par)
    for (int i = 0; i < N; i++) {
      const float* x = inp + (int64_t)i * C;    // (C)
      const float* dy = dout + (int64_t)i * C;  // (C)
      float* dx = dinp + (int64_t)i * C;        // (C)
      const float m = mean[i], r = rstd[i];
      float s1 = 0.0f, s2 = 0.0f;  // sums of dxhat and dxhat * xhat
#pragma omp simd reduction(+ : s1, s2)
      for (int c = 0; c < C; c++) {
        const float dxhat = dy[c] * weight[c];
        s1 += dxhat;
        s2 += dxhat * (x[c] - m) * r;
      }
      s1 /= C;
      s2 /= C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        const float xhat = (x[c] - m) * r;
        dx[c] += r * (dy[c] * weight[c] - s1 - xhat * s2);
      }
    }
  }
  // dweight, dbias: column sums over rows; threads own column chunks, so no races.
  if (dweight || dbias) {
    constexpr int chunk = 32;
    const int nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (par)
    for (int ch = 0; ch < nchunks; ch++) {
      const int c0 = ch * chunk, n = std::min(C - c0, chunk);
      float dw[chunk] = {}, db[chunk] = {};
      for (int i = 0; i < N; i++) {
        const float* x = inp + (int64_t)i * C + c0;
        const float* dy = dout + (int64_t)i * C + c0;
        const float m = mean[i], r = rstd[i];
#pragma omp simd
        for (int c = 0; c < n; c++) {
          dw[c] += dy[c] * (x[c] - m) * r;
          db[c] += dy[c];
        }
      }
      for (int c = 0; c < n; c++) {
        if (dweight) dweight[c0 + c] += dw[c];
        if (dbias) dbias[c0 + c] += db[c];
      }
    }
  }
}

}  // namespace gpumix::kernels::cpu
