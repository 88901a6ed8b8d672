// Plain reference twins of the CPU kernels (see kernels/cpu/ref.h): single-threaded loops
// that follow the math line by line. Reductions accumulate in double so that the twin is
// a better oracle than the fast kernel it checks.
#include "kernels/cpu/ref.h"

#include <cmath>
#include <vector>

#include "kernels/half_types.h"

namespace gpumix::kernels::cpu::ref {

namespace {
constexpr float k_ln_eps = 1e-5f;
}  // namespace

// ---- matmul ---------------------------------------------------------------------------

namespace {
float widen(float x) { return x; }
float widen(bf16 h) { return (float)(h); }
void store(float* p, double x) { *p = (float)x; }
void store(bf16* p, double x) { *p = bf16((float)x); }

// The one GEMM loop of all operand and result types: double accumulation, one rounding
// to the type of C.
template <class In, class Out>
void gemm_loop(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const In* a, int lda,
               const In* b, int ldb, float beta, Out* c, int ldc, int batch, int64_t stride_a,
               int64_t stride_b, int64_t stride_c) {
  for (int p = 0; p < batch; p++) {
    const In* ap = a + p * stride_a;
    const In* bp = b + p * stride_b;
    Out* cp = c + p * stride_c;
    for (int i = 0; i < m; i++) {
      for (int j = 0; j < n; j++) {
        double acc = 0.0;
        for (int l = 0; l < k; l++) {
          const float av = widen(trans_a ? ap[(int64_t)l * lda + i] : ap[(int64_t)i * lda + l]);
          const float bv = widen(trans_b ? bp[(int64_t)j * ldb + l] : bp[(int64_t)l * ldb + j]);
          acc += (double)av * bv;
        }
        Out* cij = cp + (int64_t)i * ldc + j;
        // BLAS semantics: with beta == 0, C is not read (it may hold NaN).
        store(cij, beta == 0.0f ? alpha * acc : alpha * acc + beta * (double)widen(*cij));
      }
    }
  }
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  gemm_loop(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a,
            stride_b, stride_c);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC) {
  for (int i = 0; i < N; i++) {
    for (int o = 0; o < OC; o++) {
      double acc = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++) acc += (double)inp[(int64_t)i * C + c] * weight[(int64_t)o * C + c];
      out[(int64_t)i * OC + o] = (float)acc;
    }
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  if (dinp) {
    for (int i = 0; i < N; i++) {
      for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int o = 0; o < OC; o++) acc += (double)dout[(int64_t)i * OC + o] * weight[(int64_t)o * C + c];
        dinp[(int64_t)i * C + c] += (float)acc;
      }
    }
  }
  if (dweight) {
    for (int o = 0; o < OC; o++) {
      for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int i = 0; i < N; i++) acc += (double)dout[(int64_t)i * OC + o] * inp[(int64_t)i * C + c];
        dweight[(int64_t)o * C + c] += (float)acc;
      }
    }
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

void bias_add(float* out, const float* inp, const float* bias, int N, int C) {
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) out[(int64_t)i * C + c] = inp[(int64_t)i * C + c] + bias[c];
}

void bias_backward(float* dbias, const float* dout, int N, int C) {
  for (int c = 0; c < C; c++) {
    double acc = 0.0;
    for (int i = 0; i < N; i++) acc += dout[(int64_t)i * C + c];
    dbias[c] += (float)acc;
  }
}

// ---- layernorm ------------------------------------------------------------------------

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  for (int i = 0; i < N; i++) {
    const float* x = inp + (int64_t)i * C;
    double m = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    double var = 0.0;  // biased, as PyTorch
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const double s = 1.0 / std::sqrt(var + k_ln_eps);
    for (int c = 0; c < C; c++)
      out[(int64_t)i * C + c] = (float)((x[c] - m) * s * weight[c] + bias[c]);
    if (mean) mean[i] = (float)m;
    if (rstd) rstd[i] = (float)s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
  for (int i = 0; i < N; i++) {
    const float* x = inp + (int64_t)i * C;
    const float* dy = dout + (int64_t)i * C;
    // y = xhat * w + b, xhat = (x - mean) * rstd:
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w.
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (int c = 0; c < C; c++) {
      const double xhat = ((double)x[c] - mean[i]) * rstd[i];
      const double dxhat = (double)dy[c] * weight[c];
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * xhat;
    }
    mean_dxhat /= C;
    mean_dxhat_xhat /= C;
    for (int c = 0; c < C; c++) {
      const double xhat = ((double)x[c] - mean[i]) * rstd[i];
      const double dxhat = (double)dy[c] * weight[c];
      if (dinp)
        dinp[(int64_t)i * C + c] += (float)(rstd[i] * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
      if (dweight) dweight[c] += (float)(dy[c] * xhat);
      if (dbias) dbias[c] += dy[c];
    }
  }
}

// ---- gelu -----------------------------------------------------------------------------

void gelu_forward(float* out, const float* inp, int64_t n) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; i++) {
    const double x = inp[i];
    out[i] = (float)(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; i++) {
    const double x = inp[i];
    const double u = k * (x + 0.044715 * x * x * x);
    const double th = std::tanh(u);
    const double du = k * (1.0 + 3.0 * 0.044715 * x * x);
    const double d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
    dinp[i] += (float)(d * dout[i]);
  }
}

// ---- attention ------------------------------------------------------------------------
// The whole (T, T) score matrix of each head, softmax, then products. The backward
// recomputes the probabilities from qkv and ignores out and lse: it shares nothing with
// the forward it checks.

namespace {
// probs (T, T) of head h of batch b: causal softmax of q k^T / sqrt(HS). Writes lse (T).
void attention_probs(std::vector<double>& probs, double* lse, const float* qkv, int b,
                     int h, int T, int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt((double)HS);
  const float* base = qkv + (int64_t)b * T * 3 * C;
  for (int i = 0; i < T; i++) {
    const float* q = base + (int64_t)i * 3 * C + h * HS;
    double mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
      const float* k = base + (int64_t)j * 3 * C + C + h * HS;
      double s = 0.0;
      for (int d = 0; d < HS; d++) s += (double)q[d] * k[d];
      s *= scale;
      probs[(size_t)i * T + j] = s;
      if (s > mx) mx = s;
    }
    double sum = 0.0;
    for (int j = 0; j <= i; j++) sum += std::exp(probs[(size_t)i * T + j] - mx);
    for (int j = 0; j < T; j++)
      probs[(size_t)i * T + j] = j <= i ? std::exp(probs[(size_t)i * T + j] - mx) / sum : 0.0;
    lse[i] = mx + std::log(sum);
  }
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                       int NH) {
  const int HS = C / NH;
  std::vector<double> probs((size_t)T * T);  // (T, T)
  std::vector<double> row_lse(T);            // (T)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      attention_probs(probs, row_lse.data(), qkv, b, h, T, C, NH);
      for (int i = 0; i < T; i++) {
        for (int d = 0; d < HS; d++) {
          double acc = 0.0;
          for (int j = 0; j <= i; j++)
            acc += probs[(size_t)i * T + j] * qkv[((int64_t)b * T + j) * 3 * C + 2 * C + h * HS + d];
          out[((int64_t)b * T + i) * C + h * HS + d] = (float)acc;
        }
        lse[((int64_t)b * NH + h) * T + i] = (float)row_lse[i];
      }
    }
  }
}

// The query of row pos against rows 0..pos: scores, softmax and products in double.
void attention_decode(float* out, const float* qkv, int B, int Tc, int C, int NH, int pos) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt((double)HS);
  std::vector<double> s((size_t)pos + 1);
  for (int b = 0; b < B; b++) {
    const float* base = qkv + (int64_t)b * Tc * 3 * C;
    for (int h = 0; h < NH; h++) {
      const float* q = base + (int64_t)pos * 3 * C + h * HS;
      double mx = -INFINITY;
      for (int j = 0; j <= pos; j++) {
        const float* k = base + (int64_t)j * 3 * C + C + h * HS;
        double acc = 0.0;
        for (int d = 0; d < HS; d++) acc += (double)q[d] * k[d];
        s[j] = acc * scale;
        if (s[j] > mx) mx = s[j];
      }
      double sum = 0.0;
      for (int j = 0; j <= pos; j++) sum += (s[j] = std::exp(s[j] - mx));
      for (int d = 0; d < HS; d++) {
        double acc = 0.0;
        for (int j = 0; j <= pos; j++) acc += s[j] * base[(int64_t)j * 3 * C + 2 * C + h * HS + d];
        out[(int64_t)b * C + h * HS + d] = (float)(acc / sum);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float*,
                        const float*, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt((double)HS);
  std::vector<double> probs((size_t)T * T);   // (T, T)
  std::vector<double> dprobs((size_t)T * T);  // (T, T)
  std::vector<double> row_lse(T);             // (T)
  for (int b = 0; b < B; b++) {
    const float* base = qkv + (int64_t)b * T * 3 * C;
    float* dbase = dqkv + (int64_t)b * T * 3 * C;
    for (int h = 0; h < NH; h++) {
      attention_probs(probs, row_lse.data(), qkv, b, h, T, C, NH);
      const int qo = h * HS, ko = C + h * HS, vo = 2 * C + h * HS;
      // out_i = sum_j P_ij v_j: dP_ij = dout_i . v_j; dv_j += sum_i P_ij dout_i.
      for (int i = 0; i < T; i++) {
        const float* dy = dout + ((int64_t)b * T + i) * C + h * HS;
        for (int j = 0; j <= i; j++) {
          double acc = 0.0;
          for (int d = 0; d < HS; d++) acc += (double)dy[d] * base[(int64_t)j * 3 * C + vo + d];
          dprobs[(size_t)i * T + j] = acc;
        }
      }
      for (int j = 0; j < T; j++) {
        for (int d = 0; d < HS; d++) {
          double acc = 0.0;
          for (int i = j; i < T; i++)
            acc += probs[(size_t)i * T + j] * dout[((int64_t)b * T + i) * C + h * HS + d];
          dbase[(int64_t)j * 3 * C + vo + d] += (float)acc;
        }
      }
      // Softmax backward: dS_ij = P_ij (dP_ij - sum_l P_il dP_il); S = scale q.k.
      for (int i = 0; i < T; i++) {
        double dot = 0.0;
        for (int j = 0; j <= i; j++) dot += probs[(size_t)i * T + j] * dprobs[(size_t)i * T + j];
        for (int j = 0; j <= i; j++)
          dprobs[(size_t)i * T + j] = probs[(size_t)i * T + j] * (dprobs[(size_t)i * T + j] - dot) * scale;
      }
      for (int i = 0; i < T; i++) {
        for (int d = 0; d < HS; d++) {
          double acc = 0.0;
          for (int j = 0; j <= i; j++) acc += dprobs[(size_t)i * T + j] * base[(int64_t)j * 3 * C + ko + d];
          dbase[(int64_t)i * 3 * C + qo + d] += (float)acc;
        }
      }
      for (int j = 0; j < T; j++) {
        for (int d = 0; d < HS; d++) {
          double acc = 0.0;
          for (int i = j; i < T; i++) acc += dprobs[(size_t)i * T + j] * base[(int64_t)i * 3 * C + qo + d];
          dbase[(int64_t)j * 3 * C + ko + d] += (float)acc;
        }
      }
    }
  }
}

// ---- cross-entropy --------------------------------------------------------------------

void crossentropy_forward(float* losses, float* lse, const float* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index) {
  for (int i = 0; i < N; i++) {
    const float* x = logits + (int64_t)i * V;
    double mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += std::exp(x[v] - mx);
    const double l = mx + std::log(sum);
    lse[i] = (float)l;
    losses[i] = targets[i] == ignore_index ? 0.0f : (float)(l - x[targets[i]]);
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index) {
  for (int i = 0; i < N; i++) {
    if (targets[i] == ignore_index) continue;
    for (int v = 0; v < V; v++) {
      const double p = std::exp((double)logits[(int64_t)i * V + v] - lse[i]);
      dlogits[(int64_t)i * V + v] += (float)(dloss * (p - (v == targets[i] ? 1.0 : 0.0)));
    }
  }
}

// ---- embedding ------------------------------------------------------------------------

void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        out[((int64_t)b * T + t) * C + c] =
            wte[(int64_t)tokens[b * T + t] * C + c] + wpe[(int64_t)t * C + c];
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const float* dy = dout + ((int64_t)b * T + t) * C;
      for (int c = 0; c < C; c++) {
        if (dwte) dwte[(int64_t)tokens[b * T + t] * C + c] += dy[c];
        if (dwpe) dwpe[(int64_t)t * C + c] += dy[c];
      }
    }
  }
}

// ---- adamw ----------------------------------------------------------------------------

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int step) {
  const double bc1 = 1.0 - std::pow((double)beta1, step);
  const double bc2 = 1.0 - std::pow((double)beta2, step);
  for (int64_t i = 0; i < n; i++) {
    double p = param[i];
    p -= (double)lr * weight_decay * p;  // decoupled weight decay, before the update
    m[i] = (float)(beta1 * (double)m[i] + (1.0 - beta1) * grad[i]);
    v[i] = (float)(beta2 * (double)v[i] + (1.0 - beta2) * (double)grad[i] * grad[i]);
    const double mhat = m[i] / bc1;
    const double vhat = v[i] / bc2;
    p -= lr * mhat / (std::sqrt(vhat) + eps);
    param[i] = (float)p;
  }
}

// ---- elementwise ----------------------------------------------------------------------

void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void scale(float* out, const float* a, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] * s;
}

void axpy(float* out, const float* a, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] += s * a[i];
}

void f32_to_bf16(bf16* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16(in[i]);
}

void bf16_to_f32(float* out, const bf16* in, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = (float)(in[i]);
}

void f32_to_f16(f16* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = f16(in[i]);
}

void f16_to_f32(float* out, const f16* in, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = (float)in[i];
}

// ---- reductions -----------------------------------------------------------------------

double sum(const float* a, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += a[i];
  return acc;
}

double sum_squares(const float* a, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += (double)a[i] * a[i];
  return acc;
}

// ---- bf16 twins -----------------------------------------------------------------------
// Each is its fp32 twin above on the inputs widened to fp32 (exact), with every bf16
// output rounded once at the end: so the bf16 result is the fp32 result rounded, which
// is what the tests hold the fast bf16 kernels to.

namespace {
std::vector<float> widened(const bf16* p, int64_t n) {
  std::vector<float> v(p ? n : 0);
  for (int64_t i = 0; i < (int64_t)v.size(); i++) v[i] = (float)(p[i]);
  return v;
}
float* ptr(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
void narrow(bf16* out, const std::vector<float>& v) {
  if (!out) return;
  for (size_t i = 0; i < v.size(); i++) out[i] = bf16(v[i]);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, bf16* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  gemm_loop(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a,
            stride_b, stride_c);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  gemm_loop(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a,
            stride_b, stride_c);
}

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int N, int C, int OC) {
  auto inp32 = widened(inp, (int64_t)N * C), w32 = widened(weight, (int64_t)OC * C),
       b32 = widened(bias, OC);
  std::vector<float> out32((size_t)N * OC);
  matmul_forward(out32.data(), inp32.data(), w32.data(), ptr(b32), N, C, OC);
  narrow(out, out32);
}

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC) {
  auto dinp32 = widened(dinp, (int64_t)N * C), dout32 = widened(dout, (int64_t)N * OC),
       inp32 = widened(inp, (int64_t)N * C), w32 = widened(weight, (int64_t)OC * C);
  matmul_backward(ptr(dinp32), dweight, dbias, dout32.data(), inp32.data(), w32.data(), N, C, OC);
  narrow(dinp, dinp32);
}

void bias_add(bf16* out, const bf16* inp, const bf16* bias, int N, int C) {
  auto inp32 = widened(inp, (int64_t)N * C), b32 = widened(bias, C);
  bias_add(inp32.data(), inp32.data(), b32.data(), N, C);
  narrow(out, inp32);
}

void bias_backward(float* dbias, const bf16* dout, int N, int C) {
  auto dout32 = widened(dout, (int64_t)N * C);
  bias_backward(dbias, dout32.data(), N, C);
}

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C) {
  auto inp32 = widened(inp, (int64_t)N * C), w32 = widened(weight, C), b32 = widened(bias, C);
  std::vector<float> out32((size_t)N * C), mean32(N), rstd32(N);
  layernorm_forward(out32.data(), mean32.data(), rstd32.data(), inp32.data(), w32.data(),
                    b32.data(), N, C);
  narrow(out, out32);
  for (int i = 0; i < N; i++) {
    if (mean) mean[i] = mean32[i];
    if (rstd) rstd[i] = rstd32[i];
  }
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean,
                        const float* rstd, int N, int C) {
  auto dinp32 = widened(dinp, (int64_t)N * C), dout32 = widened(dout, (int64_t)N * C),
       inp32 = widened(inp, (int64_t)N * C), w32 = widened(weight, C);
  layernorm_backward(ptr(dinp32), dweight, dbias, dout32.data(), inp32.data(), w32.data(), mean,
                     rstd, N, C);
  narrow(dinp, dinp32);
}

void gelu_forward(bf16* out, const bf16* inp, int64_t n) {
  auto x = widened(inp, n);
  gelu_forward(x.data(), x.data(), n);
  narrow(out, x);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  auto dx = widened(dinp, n), x = widened(inp, n), dy = widened(dout, n);
  gelu_backward(dx.data(), x.data(), dy.data(), n);
  narrow(dinp, dx);
}

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                       int NH) {
  auto qkv32 = widened(qkv, (int64_t)B * T * 3 * C);
  std::vector<float> out32((size_t)B * T * C);
  attention_forward(out32.data(), lse, qkv32.data(), B, T, C, NH);
  narrow(out, out32);
}

void attention_decode(bf16* out, const bf16* qkv, int B, int Tc, int C, int NH, int pos) {
  auto qkv32 = widened(qkv, (int64_t)B * Tc * 3 * C);
  std::vector<float> out32((size_t)B * C);
  attention_decode(out32.data(), qkv32.data(), B, Tc, C, NH, pos);
  narrow(out, out32);
}

void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH) {
  auto dqkv32 = widened(dqkv, (int64_t)B * T * 3 * C), dout32 = widened(dout, (int64_t)B * T * C),
       qkv32 = widened(qkv, (int64_t)B * T * 3 * C), out32 = widened(out, (int64_t)B * T * C);
  attention_backward(dqkv32.data(), dout32.data(), qkv32.data(), out32.data(), lse, B, T, C, NH);
  narrow(dqkv, dqkv32);
}

void crossentropy_forward(float* losses, float* lse, const bf16* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index) {
  auto x = widened(logits, (int64_t)N * V);
  crossentropy_forward(losses, lse, x.data(), targets, N, V, ignore_index);
}

void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index, bool accumulate) {
  auto x = widened(logits, (int64_t)N * V);  // copied first: dlogits may alias logits
  auto dx = accumulate ? widened(dlogits, (int64_t)N * V) : std::vector<float>((size_t)N * V, 0.0f);
  crossentropy_backward(dx.data(), x.data(), lse, targets, dloss, N, V, ignore_index);
  narrow(dlogits, dx);
}

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        out[((int64_t)b * T + t) * C + c] = bf16(
            (float)(wte[(int64_t)tokens[b * T + t] * C + c]) + (float)(wpe[(int64_t)t * C + c]));
}

void embedding_backward(float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C) {
  auto dy = widened(dout, (int64_t)B * T * C);
  embedding_backward(dwte, dwpe, dy.data(), tokens, B, T, C);
}

void adamw_step(float* param, bf16* param_bf16, const float* grad, float* m, float* v,
                int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                int step) {
  adamw_step(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  if (param_bf16) f32_to_bf16(param_bf16, param, n);
}

void add(bf16* out, const bf16* a, const bf16* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16((float)(a[i]) + (float)(b[i]));
}

void scale(bf16* out, const bf16* a, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16((float)(a[i]) * s);
}

void axpy(bf16* out, const bf16* a, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    out[i] = bf16((float)((float)(out[i]) + (double)s * (float)(a[i])));
}

void axpy(float* out, const bf16* a, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] += s * (float)(a[i]);
}

double sum(const bf16* a, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += (float)(a[i]);
  return acc;
}

double sum_squares(const bf16* a, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += (double)(float)(a[i]) * (float)(a[i]);
  return acc;
}

void fill(float* out, float value, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = value;
}

void fill(bf16* out, float value, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16(value);
}

// ---- the fused classifier: the cross-entropy twins on the first V columns -----------------

void classifier_forward(float* losses, float* lse, float* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad) {
  for (int i = 0; i < N; i++) {
    float* x = logits + (int64_t)i * Vp;
    crossentropy_forward(losses + i, lse + i, x, targets + i, 1, V, ignore_index);
    if (!grad) continue;
    std::vector<float> d((size_t)V, 0.0f);
    crossentropy_backward(d.data(), x, lse + i, targets + i, scale, 1, V, ignore_index);
    for (int v = 0; v < Vp; v++) x[v] = v < V ? d[v] : 0.0f;
  }
}

void classifier_forward(float* losses, float* lse, bf16* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad) {
  auto x = widened(logits, (int64_t)N * Vp);
  classifier_forward(losses, lse, x.data(), targets, scale, N, V, Vp, ignore_index, grad);
  if (grad) narrow(logits, x);
}

}  // namespace gpumix::kernels::cpu::ref
