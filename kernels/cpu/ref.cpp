// Plain reference twins of the CPU kernels (see kernels/cpu/ref.h): single-threaded loops
// that follow the math line by line. Reductions accumulate in double so that the twin is
// a better oracle than the fast kernel it checks.
#include "kernels/cpu/ref.h"

#include <cmath>
#include <vector>

#include "kernels/bf16.h"

namespace gpumix::kernels::cpu::ref {

namespace {
constexpr float k_ln_eps = 1e-5f;
}  // namespace

// ---- matmul ---------------------------------------------------------------------------

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  for (int p = 0; p < batch; p++) {
    const float* ap = a + p * stride_a;
    const float* bp = b + p * stride_b;
    float* cp = c + p * stride_c;
    for (int i = 0; i < m; i++) {
      for (int j = 0; j < n; j++) {
        double acc = 0.0;
        for (int l = 0; l < k; l++) {
          const float av = trans_a ? ap[(int64_t)l * lda + i] : ap[(int64_t)i * lda + l];
          const float bv = trans_b ? bp[(int64_t)j * ldb + l] : bp[(int64_t)l * ldb + j];
          acc += (double)av * bv;
        }
        float* cij = cp + (int64_t)i * ldc + j;
        // BLAS semantics: with beta == 0, C is not read (it may hold NaN).
        *cij = beta == 0.0f ? (float)(alpha * acc) : (float)(alpha * acc + beta * (double)*cij);
      }
    }
  }
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
    mean[i] = (float)m;
    rstd[i] = (float)s;
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

void f32_to_bf16(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16_bits(in[i]);
}

void bf16_to_f32(float* out, const uint16_t* in, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = bf16_bits_to_f32(in[i]);
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

}  // namespace gpumix::kernels::cpu::ref
