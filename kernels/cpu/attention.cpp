// Fused causal self-attention, flash-style: each (batch, head, block of query rows) walks
// the key blocks with an online softmax, so no (T, T) matrix is ever stored; the forward
// saves the log-sum-exp of each row, from which the backward recomputes the
// probabilities block by block. Tile products go through cblas_sgemm, reading q, k, v in
// place from qkv via the leading dimension (OpenBLAS runs single-threaded inside our
// OpenMP regions; on 64x64 tiles its packed AVX2 kernels ran 3-5x faster than plain
// vectorised loops, measured with bench_kernels BM_attention_*).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr int k_br = 64;  // query rows per tile
constexpr int k_bc = 64;  // keys per tile

// c (m,n) = alpha * a (m,k) @ op(b) + beta * c, row-major tiles with leading dimensions.
inline void tile_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                       int NH) {
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int nqb = (T + k_br - 1) / k_br;
  const int ntasks = B * NH * nqb;
#pragma omp parallel
  {
    std::vector<float> s((size_t)k_br * k_bc);  // (BR, BC) scores, then probabilities
    std::vector<float> o((size_t)k_br * HS);    // (BR, HS) unnormalised output
    std::vector<float> m(k_br), l(k_br);        // (BR) running max and sum
    // Later query blocks see more keys: dynamic scheduling balances the causal triangle.
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < ntasks; task++) {
      const int b = task / (NH * nqb), h = (task / nqb) % NH, qb = nqb - 1 - task % nqb;
      const int i0 = qb * k_br, nr = std::min(k_br, T - i0);
      const float* q = qkv + ((int64_t)b * T + i0) * C3 + h * HS;  // (nr, HS), ld 3C
      const float* kbase = qkv + (int64_t)b * T * C3 + C + h * HS;  // (T, HS), ld 3C
      const float* vbase = kbase + C;                                // (T, HS), ld 3C
      std::fill(o.begin(), o.end(), 0.0f);
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      const int kend = i0 + nr;  // causal: keys 0 .. kend-1 are visible to this block
      for (int j0 = 0; j0 < kend; j0 += k_bc) {
        const int nc = std::min(k_bc, kend - j0);
        // s (nr, nc) = scale * q k^T
        tile_gemm(false, true, nr, nc, HS, scale, q, C3, kbase + (int64_t)j0 * C3, C3, 0.0f,
                  s.data(), k_bc);
        for (int r = 0; r < nr; r++) {
          float* sr = s.data() + (size_t)r * k_bc;
          const int ncr = std::min(nc, i0 + r - j0 + 1);  // keys <= this query
          if (ncr <= 0) {
            std::fill(sr, sr + nc, 0.0f);
            continue;
          }
          float mx = m[r];
#pragma omp simd reduction(max : mx)
          for (int c = 0; c < ncr; c++) mx = std::max(mx, sr[c]);
          const float corr = exp_vec(m[r] - mx);  // rescales what was summed so far
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int c = 0; c < ncr; c++) {
            sr[c] = exp_vec(sr[c] - mx);
            sum += sr[c];
          }
          std::fill(sr + ncr, sr + nc, 0.0f);
          l[r] = l[r] * corr + sum;
          m[r] = mx;
          float* orow = o.data() + (size_t)r * HS;
#pragma omp simd
          for (int d = 0; d < HS; d++) orow[d] *= corr;
        }
        // o (nr, HS) += p (nr, nc) @ v (nc, HS)
        tile_gemm(false, false, nr, HS, nc, 1.0f, s.data(), k_bc, vbase + (int64_t)j0 * C3,
                  C3, 1.0f, o.data(), HS);
      }
      for (int r = 0; r < nr; r++) {
        float* y = out + ((int64_t)b * T + i0 + r) * C + h * HS;
        const float inv = 1.0f / l[r];
#pragma omp simd
        for (int d = 0; d < HS; d++) y[d] = o[(size_t)r * HS + d] * inv;
        lse[((int64_t)b * NH + h) * T + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)HS);
  // One task per (batch, head): the task owns that head's columns of dq, dk and dv, so
  // it accumulates straight into dqkv without races.
#pragma omp parallel
  {
    std::vector<float> p((size_t)k_br * k_bc);   // (BR, BC) probabilities
    std::vector<float> dp((size_t)k_br * k_bc);  // (BR, BC) dP, then dS
    std::vector<float> dd(T);                    // (T) D_i = rowsum(dout_i * out_i)
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const int64_t row0 = (int64_t)b * T;
        const float* q = qkv + row0 * C3 + h * HS;  // (T, HS), ld 3C; k at +C, v at +2C
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* dq = dqkv + row0 * C3 + h * HS;  // (T, HS), ld 3C; dk at +C, dv at +2C
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        const float* dy = dout + row0 * C + h * HS;  // (T, HS), ld C
        const float* y = out + row0 * C + h * HS;    // (T, HS), ld C
        const float* lse_bh = lse + ((int64_t)b * NH + h) * T;  // (T)
        // dS = P * (dP - D): softmax backward, D_i = sum_j P_ij dP_ij = dout_i . out_i.
        for (int i = 0; i < T; i++) {
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int d = 0; d < HS; d++) acc += dy[(int64_t)i * C + d] * y[(int64_t)i * C + d];
          dd[i] = acc;
        }
        for (int j0 = 0; j0 < T; j0 += k_bc) {
          const int nc = std::min(k_bc, T - j0);
          const float* kj = k + (int64_t)j0 * C3;
          const float* vj = v + (int64_t)j0 * C3;
          // Query blocks that see any key of this block: rows >= j0.
          for (int i0 = j0 / k_br * k_br; i0 < T; i0 += k_br) {
            const int nr = std::min(k_br, T - i0);
            const float* qi = q + (int64_t)i0 * C3;
            const float* dyi = dy + (int64_t)i0 * C;
            // p (nr, nc) = exp(scale * q k^T - lse), zero above the diagonal
            tile_gemm(false, true, nr, nc, HS, scale, qi, C3, kj, C3, 0.0f, p.data(), k_bc);
            // dp (nr, nc) = dout v^T
            tile_gemm(false, true, nr, nc, HS, 1.0f, dyi, C, vj, C3, 0.0f, dp.data(), k_bc);
            for (int r = 0; r < nr; r++) {
              float* pr = p.data() + (size_t)r * k_bc;
              float* dpr = dp.data() + (size_t)r * k_bc;
              const int ncr = std::max(0, std::min(nc, i0 + r - j0 + 1));
              const float lr = lse_bh[i0 + r], dr = dd[i0 + r];
#pragma omp simd
              for (int c = 0; c < ncr; c++) {
                pr[c] = exp_vec(pr[c] - lr);
                dpr[c] = pr[c] * (dpr[c] - dr) * scale;  // dS, with the score scale folded in
              }
              std::fill(pr + ncr, pr + nc, 0.0f);
              std::fill(dpr + ncr, dpr + nc, 0.0f);
            }
            // dv_j (nc, HS) += p^T @ dout_i
            tile_gemm(true, false, nc, HS, nr, 1.0f, p.data(), k_bc, dyi, C, 1.0f,
                      dv + (int64_t)j0 * C3, C3);
            // dq_i (nr, HS) += dS @ k_j
            tile_gemm(false, false, nr, HS, nc, 1.0f, dp.data(), k_bc, kj, C3, 1.0f,
                      dq + (int64_t)i0 * C3, C3);
            // dk_j (nc, HS) += dS^T @ q_i
            tile_gemm(true, false, nc, HS, nr, 1.0f, dp.data(), k_bc, qi, C3, 1.0f,
                      dk + (int64_t)j0 * C3, C3);
          }
        }
      }
    }
  }
}

}  // namespace gpumix::kernels::cpu

namespace gpumix::kernels::cpu {

// bf16: the fp32 kernels on widened copies (milestone 1; tiles in bf16 follow).
void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T, int C,
                       int NH) {
  const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C;
  std::vector<float> qkv32(n_qkv), out32(n_out);
  bf16_to_f32(qkv32.data(), qkv, n_qkv);
  attention_forward(out32.data(), lse, qkv32.data(), B, T, C, NH);
  f32_to_bf16(out, out32.data(), n_out);
}

void attention_backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                        const uint16_t* out, const float* lse, int B, int T, int C, int NH) {
  const int64_t n_qkv = (int64_t)B * T * 3 * C, n_out = (int64_t)B * T * C;
  std::vector<float> qkv32(n_qkv), dqkv32(n_qkv), dout32(n_out), out32(n_out);
  bf16_to_f32(qkv32.data(), qkv, n_qkv);
  bf16_to_f32(dqkv32.data(), dqkv, n_qkv);
  bf16_to_f32(dout32.data(), dout, n_out);
  bf16_to_f32(out32.data(), out, n_out);
  attention_backward(dqkv32.data(), dout32.data(), qkv32.data(), out32.data(), lse, B, T, C, NH);
  f32_to_bf16(dqkv, dqkv32.data(), n_qkv);
}

}  // namespace gpumix::kernels::cpu
