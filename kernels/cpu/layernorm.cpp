// LayerNorm over the last axis (eps 1e-5, biased variance, as PyTorch), in fp32 and bf16
// storage; statistics, parameter gradients and all arithmetic in fp32.
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr float k_eps = 1e-5f;
constexpr int64_t k_par_min = 1 << 14;  // elements below which threads cost more than they save
constexpr int k_chunk = 32;             // columns per task of the parameter gradients

// Rows [i0, i1). mean, rstd may be null.
template <class T>
GPUMIX_INLINE void forward_rows(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                const T* bias, int C, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    const T* x = inp + i * C;  // (C)
    T* y = out + i * C;        // (C)
    // Two passes (mean, then centred squares) rather than E[x^2] - E[x]^2, which cancels.
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += to_f32(x[c]);
    const float m = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (to_f32(x[c]) - m) * (to_f32(x[c]) - m);
    const float r = 1.0f / std::sqrt(v / C + k_eps);
#pragma omp simd
    for (int c = 0; c < C; c++)
      y[c] = from_f32<T>((to_f32(x[c]) - m) * r * to_f32(weight[c]) + to_f32(bias[c]));
    if (mean) mean[i] = m;
    if (rstd) rstd[i] = r;
  }
}

// dinp rows [i0, i1) +=.
template <class T>
GPUMIX_INLINE void backward_rows(T* dinp, const T* dout, const T* inp, const T* weight,
                                 const float* mean, const float* rstd, int C, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    const T* x = inp + i * C;    // (C)
    const T* dy = dout + i * C;  // (C)
    T* dx = dinp + i * C;        // (C)
    const float m = mean[i], r = rstd[i];
    float s1 = 0.0f, s2 = 0.0f;  // sums of dxhat and dxhat * xhat
#pragma omp simd reduction(+ : s1, s2)
    for (int c = 0; c < C; c++) {
      const float dxhat = to_f32(dy[c]) * to_f32(weight[c]);
      s1 += dxhat;
      s2 += dxhat * (to_f32(x[c]) - m) * r;
    }
    s1 /= C;
    s2 /= C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const float xhat = (to_f32(x[c]) - m) * r;
      dx[c] = from_f32<T>(to_f32(dx[c]) + r * (to_f32(dy[c]) * to_f32(weight[c]) - s1 - xhat * s2));
    }
  }
}

// dweight, dbias (either may be null) += column sums over all N rows, for the column
// chunks [ch0, ch1) of k_chunk columns: a thread owns whole chunks, so no races.
template <class T>
GPUMIX_INLINE void param_grad_chunks(float* dweight, float* dbias, const T* dout, const T* inp,
                                     const float* mean, const float* rstd, int N, int C,
                                     int64_t ch0, int64_t ch1) {
  for (int64_t ch = ch0; ch < ch1; ch++) {
    const int c0 = (int)ch * k_chunk, n = std::min(C - c0, k_chunk);
    float dw[k_chunk] = {}, db[k_chunk] = {};
    for (int i = 0; i < N; i++) {
      const T* x = inp + (int64_t)i * C + c0;
      const T* dy = dout + (int64_t)i * C + c0;
      const float m = mean[i], r = rstd[i];
#pragma omp simd
      for (int c = 0; c < n; c++) {
        dw[c] += to_f32(dy[c]) * (to_f32(x[c]) - m) * r;
        db[c] += to_f32(dy[c]);
      }
    }
    for (int c = 0; c < n; c++) {
      if (dweight) dweight[c0 + c] += dw[c];
      if (dbias) dbias[c0 + c] += db[c];
    }
  }
}

#define FWD_PARAMS(T) \
  (T * o, float* m, float* r, const T* x, const T* w, const T* b, int C, int64_t i0, int64_t i1)
#define BWD_PARAMS(T) \
  (T * dx, const T* dy, const T* x, const T* w, const float* m, const float* r, int C, int64_t i0, int64_t i1)
#define PG_PARAMS(T)                                                                       \
  (float* dw, float* db, const T* dy, const T* x, const float* m, const float* r, int N, int C, \
   int64_t ch0, int64_t ch1)
GPUMIX_ISA_VARIANTS(fwd_f32, forward_rows, FWD_PARAMS(float), (o, m, r, x, w, b, C, i0, i1))
GPUMIX_ISA_VARIANTS(fwd_bf16, forward_rows, FWD_PARAMS(bf16), (o, m, r, x, w, b, C, i0, i1))
GPUMIX_ISA_VARIANTS(bwd_f32, backward_rows, BWD_PARAMS(float), (dx, dy, x, w, m, r, C, i0, i1))
GPUMIX_ISA_VARIANTS(bwd_bf16, backward_rows, BWD_PARAMS(bf16), (dx, dy, x, w, m, r, C, i0, i1))
GPUMIX_ISA_VARIANTS(pg_f32, param_grad_chunks, PG_PARAMS(float), (dw, db, dy, x, m, r, N, C, ch0, ch1))
GPUMIX_ISA_VARIANTS(pg_bf16, param_grad_chunks, PG_PARAMS(bf16), (dw, db, dy, x, m, r, N, C, ch0, ch1))
#undef FWD_PARAMS
#undef BWD_PARAMS
#undef PG_PARAMS

template <class T, class Rows>
void run_forward(Rows rows, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                 const T* bias, int N, int C) {
  parallel_ranges(N, 1, (int64_t)N * C >= k_par_min, [&](int64_t i0, int64_t i1) {
    rows(out, mean, rstd, inp, weight, bias, C, i0, i1);
  });
}

template <class T, class Rows, class Chunks>
void run_backward(Rows rows, Chunks chunks, T* dinp, float* dweight, float* dbias, const T* dout,
                  const T* inp, const T* weight, const float* mean, const float* rstd, int N,
                  int C) {
  const bool par = (int64_t)N * C >= k_par_min;
  if (dinp) {
    parallel_ranges(N, 1, par, [&](int64_t i0, int64_t i1) {
      rows(dinp, dout, inp, weight, mean, rstd, C, i0, i1);
    });
  }
  if (dweight || dbias) {
    parallel_ranges((C + k_chunk - 1) / k_chunk, 1, par, [&](int64_t ch0, int64_t ch1) {
      chunks(dweight, dbias, dout, inp, mean, rstd, N, C, ch0, ch1);
    });
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  run_forward(fwd_f32, out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C) {
  run_forward(fwd_bf16, out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
  run_backward(bwd_f32, pg_f32, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean,
                        const float* rstd, int N, int C) {
  run_backward(bwd_bf16, pg_bf16, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace gpumix::kernels::cpu
