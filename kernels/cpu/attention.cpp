// Fused causal self-attention, flash-style, over fp32 or bf16 qkv: each (batch, head, block
// of query rows) walks the key blocks with an online softmax, so no (T, T) matrix is ever
// stored; the forward saves the log-sum-exp of each row, from which the backward
// recomputes the probabilities block by block. A task first copies the head's q, k, v (and
// in backward dout) into tiles in its own cache, in the layout each tile product wants,
// then runs the products with the tile GEMMs of tile_gemm.h and the softmax in fp32:
//
// - fp32 tiles (fp32 storage on every path, bf16 on the portable and avx512 ones): the
//   inputs widened, k and v also transposed;
// - bf16 tiles (bf16 storage on the avx512_bf16 path, vdpbf16ps): q and dout as they are,
//   k, v (and in backward q, dout) packed in pairs along the product's reduction; the
//   probabilities and score gradients go into the products rounded to bf16 (2^-8
//   relative each), their sums and all accumulation stay in fp32.
//
// bf16 results are rounded once, at the end.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr int k_br = 64;  // query rows per tile
constexpr int k_bc = 64;  // keys per tile

void check_shape(const char* what, int B, int T, int C, int NH) {
  if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0)
    throw std::invalid_argument(std::string(what) + ": bad shape B=" + std::to_string(B) +
                                " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                                " NH=" + std::to_string(NH) + " (C must be a positive multiple of NH)");
}

// dst (n, HS) fp32 = rows of src (n, HS) with leading dimension ld.
template <class T>
GPUMIX_INLINE void load_rows(float* dst, const T* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r++)
#pragma omp simd
    for (int d = 0; d < HS; d++) dst[(int64_t)r * HS + d] = to_f32(src[r * ld + d]);
}

// dst (HS, ldt) fp32, columns 0..n-1 = the transpose of src (n, HS), leading dimension ld.
template <class T>
GPUMIX_INLINE void load_transposed(float* dst, int64_t ldt, const T* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r++)
    for (int d = 0; d < HS; d++) dst[d * ldt + r] = to_f32(src[r * ld + d]);
}

// Online softmax of one tile: s (nr, ld BC) holds the scores q.k of queries i0.. against
// keys j0..j0+nc-1 (unscaled); they become exp(scale s - m) (zero where causally masked),
// and the running max m, sum l and output rows o (nr, HS) are rescaled to the new max.
GPUMIX_INLINE void online_softmax(float* s, float* o, float* m, float* l, int nr, int nc,
                                  int i0, int j0, int HS, float scale) {
  for (int r = 0; r < nr; r++) {
    float* sr = s + (int64_t)r * k_bc;
    const int ncr = std::min(nc, i0 + r - j0 + 1);  // keys <= this query
    if (ncr <= 0) {
      std::fill(sr, sr + nc, 0.0f);
      continue;
    }
    float mx = m[r];
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < ncr; c++) mx = std::max(mx, sr[c] * scale);
    const float corr = exp_vec(m[r] - mx);  // rescales what was summed so far
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < ncr; c++) {
      sr[c] = exp_vec(sr[c] * scale - mx);
      sum += sr[c];
    }
    std::fill(sr + ncr, sr + nc, 0.0f);
    l[r] = l[r] * corr + sum;
    m[r] = mx;
    float* orow = o + (int64_t)r * HS;
#pragma omp simd
    for (int d = 0; d < HS; d++) orow[d] *= corr;
  }
}

// Softmax backward of one tile: p (nr, ld BC) holds the scores, dp dout.v; they become the
// probabilities exp(scale s - lse) and dS = p (dP - D) scale (the score scale folded in),
// zero where causally masked. lse and dd point at the tile's first query.
GPUMIX_INLINE void softmax_backward(float* p, float* dp, const float* lse, const float* dd,
                                    int nr, int nc, int i0, int j0, float scale) {
  for (int r = 0; r < nr; r++) {
    float* pr = p + (int64_t)r * k_bc;
    float* dpr = dp + (int64_t)r * k_bc;
    const int ncr = std::max(0, std::min(nc, i0 + r - j0 + 1));
    const float lr = lse[r], dr = dd[r];
#pragma omp simd
    for (int c = 0; c < ncr; c++) {
      pr[c] = exp_vec(pr[c] * scale - lr);
      dpr[c] = pr[c] * (dpr[c] - dr) * scale;
    }
    std::fill(pr + ncr, pr + nc, 0.0f);
    std::fill(dpr + ncr, dpr + nc, 0.0f);
  }
}

// D_i = dout_i . out_i (the softmax backward's row sums) of head columns h*HS.., rows 0..T-1.
template <class T>
GPUMIX_INLINE void row_dots(float* dd, const T* dout, const T* out, int64_t ld, int T_, int HS) {
  for (int i = 0; i < T_; i++) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int d = 0; d < HS; d++) acc += to_f32(dout[i * ld + d]) * to_f32(out[i * ld + d]);
    dd[i] = acc;
  }
}

// dqkv's head columns (rows 0..T-1, ld 3C) += the fp32 gradients dq, dk, dv (each (T, HS),
// one after the other), rounded once.
template <class T>
GPUMIX_INLINE void add_head_grads(T* dbase, int64_t C3, int C, const float* dq, int T_, int HS) {
  for (int i = 0; i < T_; i++)
    for (int part = 0; part < 3; part++) {
      T* g = dbase + i * C3 + part * C;
      const float* src = dq + part * (int64_t)T_ * HS + (int64_t)i * HS;
#pragma omp simd
      for (int d = 0; d < HS; d++) g[d] = from_f32<T>(to_f32(g[d]) + src[d]);
    }
}

// Workspace of one forward and one backward task: fp32 elements, and bf16 ones (for the
// bf16 tiles; HSp and Tp are HS and T rounded up to even).
int64_t forward_floats(int T, int HS) { return 2 * (int64_t)k_br * HS + 2 * (int64_t)HS * T + (int64_t)k_br * k_bc + 2 * k_br; }
int64_t backward_floats(int T, int HS) { return 8 * (int64_t)T * HS + 2 * (int64_t)k_br * k_bc + T; }
int even(int n) { return n + (n & 1); }
int64_t forward_halfs(int T, int HS) { return (int64_t)even(HS) * (k_br + T) + (int64_t)even(T) * HS + k_br * k_bc; }
int64_t backward_halfs(int T, int HS) { return 4 * (int64_t)T * even(HS) + 3 * (int64_t)even(T) * HS + 3 * k_br * k_bc; }

// Head h of batch b, one block of query rows after the other (k and v are copied once).
// ws: forward_floats(T, HS).
template <class Tile, class T>
GPUMIX_INLINE void forward_task(T* out, float* lse, const T* qkv, int T_, int C, int NH, int b,
                                int h, float* ws, uint16_t*) {
  const int HS = C / NH;
  const int64_t C3 = 3 * (int64_t)C;
  const float scale = 1.0f / std::sqrt((float)HS);
  float* q = ws;                  // (BR, HS)
  float* o = q + k_br * HS;       // (BR, HS) unnormalised output
  float* kt = o + k_br * HS;      // (HS, T) keys, transposed
  float* v = kt + HS * T_;        // (T, HS)
  float* s = v + T_ * HS;         // (BR, BC) scores, then probabilities
  float* m = s + k_br * k_bc;     // (BR) running max
  float* l = m + k_br;            // (BR) running sum
  const T* base = qkv + (int64_t)b * T_ * C3 + h * HS;  // q of row 0; k at +C, v at +2C
  load_transposed(kt, T_, base + C, C3, T_, HS);
  load_rows(v, base + 2 * C, C3, T_, HS);
  for (int i0 = 0; i0 < T_; i0 += k_br) {
    const int nr = std::min(k_br, T_ - i0);
    load_rows(q, base + i0 * C3, C3, nr, HS);
    std::fill(o, o + k_br * HS, 0.0f);
    std::fill(m, m + k_br, -INFINITY);
    std::fill(l, l + k_br, 0.0f);
    const int kend = i0 + nr;  // causal: keys 0 .. kend-1 are visible to this block
    for (int j0 = 0; j0 < kend; j0 += k_bc) {
      const int nc = std::min(k_bc, kend - j0);
      Tile::gemm(nr, nc, HS, q, HS, 1, kt + j0, T_, s, k_bc, false);  // s = q k^T
      online_softmax(s, o, m, l, nr, nc, i0, j0, HS, scale);
      Tile::gemm(nr, HS, nc, s, k_bc, 1, v + j0 * HS, HS, o, HS, true);  // o += p v
    }
    for (int r = 0; r < nr; r++) {
      T* y = out + ((int64_t)b * T_ + i0 + r) * C + h * HS;
      const float inv = 1.0f / l[r];
#pragma omp simd
      for (int d = 0; d < HS; d++) y[d] = from_f32<T>(o[(int64_t)r * HS + d] * inv);
      lse[((int64_t)b * NH + h) * T_ + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

// Head h of batch b: the task owns that head's columns of dq, dk and dv, so it
// accumulates them in fp32 and adds them to dqkv once, without races.
// ws: backward_floats(T, HS).
template <class Tile, class T>
GPUMIX_INLINE void backward_task(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                                 int T_, int C, int NH, int b, int h, float* ws, uint16_t*) {
  const int HS = C / NH;
  const int64_t C3 = 3 * (int64_t)C, THS = (int64_t)T_ * HS;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int64_t row0 = (int64_t)b * T_;
  float* q = ws;           // (T, HS)
  float* k = q + THS;      // (T, HS)
  float* dy = k + THS;     // (T, HS) dout
  float* kt = dy + THS;    // (HS, T) k transposed
  float* vt = kt + THS;    // (HS, T) v transposed
  float* dq = vt + THS;    // (T, HS) gradients, fp32
  float* dk = dq + THS;
  float* dv = dk + THS;
  float* p = dv + THS;     // (BR, BC) probabilities
  float* dp = p + k_br * k_bc;  // (BR, BC) dP, then dS
  float* dd = dp + k_br * k_bc;  // (T) D_i = rowsum(dout_i * out_i)
  const T* base = qkv + row0 * C3 + h * HS;
  load_rows(q, base, C3, T_, HS);
  load_rows(k, base + C, C3, T_, HS);
  load_rows(dy, dout + row0 * C + h * HS, C, T_, HS);
  load_transposed(kt, T_, base + C, C3, T_, HS);
  load_transposed(vt, T_, base + 2 * C, C3, T_, HS);
  std::fill(dq, dq + 3 * THS, 0.0f);
  const float* lse_bh = lse + ((int64_t)b * NH + h) * T_;  // (T)
  // dS = P * (dP - D): softmax backward, D_i = sum_j P_ij dP_ij = dout_i . out_i.
  row_dots(dd, dout + row0 * C + h * HS, out + row0 * C + h * HS, C, T_, HS);
  for (int j0 = 0; j0 < T_; j0 += k_bc) {
    const int nc = std::min(k_bc, T_ - j0);
    // Query blocks that see any key of this block: rows >= j0.
    for (int i0 = j0 / k_br * k_br; i0 < T_; i0 += k_br) {
      const int nr = std::min(k_br, T_ - i0);
      Tile::gemm(nr, nc, HS, q + i0 * HS, HS, 1, kt + j0, T_, p, k_bc, false);    // s = q k^T
      Tile::gemm(nr, nc, HS, dy + i0 * HS, HS, 1, vt + j0, T_, dp, k_bc, false);  // dP = dout v^T
      softmax_backward(p, dp, lse_bh + i0, dd + i0, nr, nc, i0, j0, scale);
      Tile::gemm(nc, HS, nr, p, 1, k_bc, dy + i0 * HS, HS, dv + j0 * HS, HS, true);  // dv_j += p^T dout_i
      Tile::gemm(nr, HS, nc, dp, k_bc, 1, k + j0 * HS, HS, dq + i0 * HS, HS, true);  // dq_i += dS k_j
      Tile::gemm(nc, HS, nr, dp, 1, k_bc, q + i0 * HS, HS, dk + j0 * HS, HS, true);  // dk_j += dS^T q_i
    }
  }
  add_head_grads(dqkv + row0 * C3 + h * HS, C3, C, dq, T_, HS);
}

// ---- bf16 tiles (avx512_bf16): the same tasks with the products in vdpbf16ps -------------

// dst (n, ldd) = n rows of HS bf16 of src (leading dimension ld); columns HS..ldd-1 zero.
GPUMIX_INLINE void copy_rows(uint16_t* dst, int64_t ldd, const uint16_t* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r++) {
    std::copy(src + r * ld, src + r * ld + HS, dst + r * ldd);
    std::fill(dst + r * ldd + HS, dst + (r + 1) * ldd, (uint16_t)0);
  }
}

// The product operand b (HS, n) = the transpose of src's n rows, packed in pairs along HS
// (tile_gemm_bf16): b(d, r) = src[r][d] at dst[(d / 2) ldd + 2 r + d % 2]; an odd HS's
// padding row zero.
GPUMIX_INLINE void pack_transposed(uint16_t* dst, int64_t ldd, const uint16_t* src, int64_t ld, int n, int HS) {
  if (HS % 2 == 0) {  // whole pairs: a transpose of 32-bit words, written in order (the
    for (int p = 0; p < HS / 2; p++)  // n source rows stay in L1 from one p to the next)
      for (int r = 0; r < n; r++) std::memcpy(dst + p * ldd + 2 * r, src + r * ld + 2 * p, 4);
    return;
  }
  for (int r = 0; r < n; r++)
    for (int d = 0; d < even(HS); d++) dst[(d / 2) * ldd + 2 * r + d % 2] = d < HS ? src[r * ld + d] : 0;
}

// The product operand b (n, HS) = src's n rows, packed in pairs along the rows: b(r, d) at
// dst[(r / 2) ldd + 2 d + r % 2]; an odd n's padding row zero.
GPUMIX_INLINE void pack_rows(uint16_t* dst, int64_t ldd, const uint16_t* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r += 2) {
    const uint16_t* r0 = src + r * ld;
    const uint16_t* r1 = r + 1 < n ? r0 + ld : nullptr;
    uint16_t* out = dst + (r / 2) * ldd;
#pragma omp simd
    for (int d = 0; d < HS; d++) {
      out[2 * d] = r0[d];
      out[2 * d + 1] = r1 ? r1[d] : 0;
    }
  }
}

// The product operand a from an fp32 tile src (rows, cols; ld k_bc), rounded to bf16:
// dst (rows, ldd); an odd cols' padding column zero.
GPUMIX_INLINE void round_tile(uint16_t* dst, int64_t ldd, const float* src, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
#pragma omp simd
    for (int c = 0; c < cols; c++) dst[r * ldd + c] = f32_to_bf16_bits(src[(int64_t)r * k_bc + c]);
    if (cols & 1) dst[r * ldd + cols] = 0;
  }
}

// The product operand b (rows, cols) from an fp32 tile src (ld k_bc), rounded to bf16 and
// packed in pairs along the rows (as pack_rows; ldd >= 2 cols); an odd rows' padding row zero.
GPUMIX_INLINE void round_tile_pairs(uint16_t* dst, int64_t ldd, const float* src, int rows, int cols) {
  for (int r = 0; r < rows; r += 2) {
    const float* r0 = src + (int64_t)r * k_bc;
    const float* r1 = r + 1 < rows ? r0 + k_bc : nullptr;
    uint16_t* out = dst + (r / 2) * ldd;
#pragma omp simd
    for (int c = 0; c < cols; c++) {
      out[2 * c] = f32_to_bf16_bits(r0[c]);
      out[2 * c + 1] = r1 ? f32_to_bf16_bits(r1[c]) : 0;
    }
  }
}

// dst (HS, ldd) = the transpose of src's n rows of HS; columns n..ldd-1 zero.
GPUMIX_INLINE void copy_transposed(uint16_t* dst, int64_t ldd, const uint16_t* src, int64_t ld, int n, int HS) {
  for (int d = 0; d < HS; d++) {
    for (int r = 0; r < n; r++) dst[d * ldd + r] = src[r * ld + d];
    std::fill(dst + d * ldd + n, dst + (d + 1) * ldd, (uint16_t)0);
  }
}

// As forward_task; hs: forward_halfs(T, HS).
GPUMIX_INLINE void forward_task_bf16(uint16_t* out, float* lse, const uint16_t* qkv, int T_, int C,
                                     int NH, int b, int h, float* ws, uint16_t* hs) {
  const int HS = C / NH, HSp = even(HS);
  const int64_t C3 = 3 * (int64_t)C;
  const float scale = 1.0f / std::sqrt((float)HS);
  float* o = ws;                  // (BR, HS) unnormalised output
  float* s = o + k_br * HS;       // (BR, BC) scores, then probabilities
  float* m = s + k_br * k_bc;     // (BR) running max
  float* l = m + k_br;            // (BR) running sum
  uint16_t* q = hs;               // (BR, HSp)
  uint16_t* kt = q + k_br * HSp;  // (HSp, T) keys transposed, pairs along HS
  uint16_t* v = kt + (int64_t)HSp * T_;  // (Tp, HS) pairs along keys
  uint16_t* pb = v + (int64_t)even(T_) * HS;  // (BR, BC) probabilities in bf16
  const uint16_t* base = qkv + (int64_t)b * T_ * C3 + h * HS;
  pack_transposed(kt, 2 * (int64_t)T_, base + C, C3, T_, HS);
  pack_rows(v, 2 * HS, base + 2 * C, C3, T_, HS);
  for (int i0 = 0; i0 < T_; i0 += k_br) {
    const int nr = std::min(k_br, T_ - i0);
    copy_rows(q, HSp, base + i0 * C3, C3, nr, HS);
    std::fill(o, o + k_br * HS, 0.0f);
    std::fill(m, m + k_br, -INFINITY);
    std::fill(l, l + k_br, 0.0f);
    const int kend = i0 + nr;
    for (int j0 = 0; j0 < kend; j0 += k_bc) {
      const int nc = std::min(k_bc, kend - j0);
      tile_gemm_bf16(nr, nc, HSp, q, HSp, kt + 2 * j0, 2 * T_, s, k_bc, false);  // s = q k^T
      online_softmax(s, o, m, l, nr, nc, i0, j0, HS, scale);
      round_tile(pb, k_bc, s, nr, nc);
      tile_gemm_bf16(nr, HS, even(nc), pb, k_bc, v + j0 * HS, 2 * HS, o, HS, true);  // o += p v
    }
    for (int r = 0; r < nr; r++) {
      uint16_t* y = out + ((int64_t)b * T_ + i0 + r) * C + h * HS;
      const float inv = 1.0f / l[r];
#pragma omp simd
      for (int d = 0; d < HS; d++) y[d] = f32_to_bf16_bits(o[(int64_t)r * HS + d] * inv);
      lse[((int64_t)b * NH + h) * T_ + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

// As backward_task; hs: backward_halfs(T, HS). dk and dv are accumulated transposed
// (dk^T += q^T dS, dv^T += dout^T p), so that every operand a tile product takes is a plain
// copy or a pack of rows, never a transposed tile.
GPUMIX_INLINE void backward_task_bf16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                                      const uint16_t* out, const float* lse, int T_, int C, int NH,
                                      int b, int h, float* ws, uint16_t* hs) {
  const int HS = C / NH, HSp = even(HS), Tp = even(T_);
  const int64_t C3 = 3 * (int64_t)C, THS = (int64_t)T_ * HS, TH = (int64_t)T_ * HSp;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int64_t row0 = (int64_t)b * T_;
  float* dq = ws;                    // (T, HS) gradients, fp32
  float* dkt = dq + THS;             // (HS, T) dk^T
  float* dvt = dkt + THS;            // (HS, T) dv^T
  float* p = dvt + THS;              // (BR, BC) scores, then probabilities
  float* dp = p + k_br * k_bc;       // (BR, BC) dP, then dS
  float* dd = dp + k_br * k_bc;      // (T) D_i = dout_i . out_i
  uint16_t* q = hs;                  // (T, HSp) rows
  uint16_t* dy = q + TH;             // (T, HSp) dout rows
  uint16_t* kt = dy + TH;            // (HSp, T) k transposed, pairs along HS
  uint16_t* vt = kt + TH;            // (HSp, T) v transposed, pairs along HS
  uint16_t* kv = vt + TH;            // (Tp, HS) k, pairs along T
  uint16_t* qt = kv + (int64_t)Tp * HS;   // (HS, Tp) q transposed
  uint16_t* dyt = qt + (int64_t)Tp * HS;  // (HS, Tp) dout transposed
  uint16_t* ds = dyt + (int64_t)Tp * HS;  // (BR, BC) dS in bf16
  uint16_t* pp = ds + k_br * k_bc;   // (BR, BC) p, pairs along queries
  uint16_t* dsp = pp + k_br * k_bc;  // (BR, BC) dS, pairs along queries
  const uint16_t* base = qkv + row0 * C3 + h * HS;
  const uint16_t* dybase = dout + row0 * C + h * HS;
  copy_rows(q, HSp, base, C3, T_, HS);
  copy_rows(dy, HSp, dybase, C, T_, HS);
  pack_transposed(kt, 2 * (int64_t)T_, base + C, C3, T_, HS);
  pack_transposed(vt, 2 * (int64_t)T_, base + 2 * C, C3, T_, HS);
  pack_rows(kv, 2 * HS, base + C, C3, T_, HS);
  copy_transposed(qt, Tp, base, C3, T_, HS);
  copy_transposed(dyt, Tp, dybase, C, T_, HS);
  std::fill(dq, dq + 3 * THS, 0.0f);
  const float* lse_bh = lse + ((int64_t)b * NH + h) * T_;
  row_dots(dd, dybase, out + row0 * C + h * HS, C, T_, HS);
  for (int j0 = 0; j0 < T_; j0 += k_bc) {
    const int nc = std::min(k_bc, T_ - j0);
    for (int i0 = j0 / k_br * k_br; i0 < T_; i0 += k_br) {
      const int nr = std::min(k_br, T_ - i0);
      tile_gemm_bf16(nr, nc, HSp, q + i0 * HSp, HSp, kt + 2 * j0, 2 * T_, p, k_bc, false);    // s = q k^T
      tile_gemm_bf16(nr, nc, HSp, dy + i0 * HSp, HSp, vt + 2 * j0, 2 * T_, dp, k_bc, false);  // dP = dout v^T
      softmax_backward(p, dp, lse_bh + i0, dd + i0, nr, nc, i0, j0, scale);
      round_tile(ds, k_bc, dp, nr, nc);
      round_tile_pairs(pp, 2 * k_bc, p, nr, nc);
      round_tile_pairs(dsp, 2 * k_bc, dp, nr, nc);
      tile_gemm_bf16(HS, nc, even(nr), dyt + i0, Tp, pp, 2 * k_bc, dvt + j0, T_, true);   // dv_j^T += dout_i^T p
      tile_gemm_bf16(nr, HS, even(nc), ds, k_bc, kv + j0 * HS, 2 * HS, dq + i0 * HS, HS, true);  // dq_i += dS k_j
      tile_gemm_bf16(HS, nc, even(nr), qt + i0, Tp, dsp, 2 * k_bc, dkt + j0, T_, true);   // dk_j^T += q_i^T dS
    }
  }
  uint16_t* dbase = dqkv + row0 * C3 + h * HS;
  for (int i = 0; i < T_; i++) {
    uint16_t* g = dbase + i * C3;
#pragma omp simd
    for (int d = 0; d < HS; d++) g[d] = f32_to_bf16_bits(bf16_bits_to_f32(g[d]) + dq[(int64_t)i * HS + d]);
    for (int d = 0; d < HS; d++) {
      g[C + d] = f32_to_bf16_bits(bf16_bits_to_f32(g[C + d]) + dkt[(int64_t)d * T_ + i]);
      g[2 * C + d] = f32_to_bf16_bits(bf16_bits_to_f32(g[2 * C + d]) + dvt[(int64_t)d * T_ + i]);
    }
  }
}

#define FWD_PARAMS(T) \
  (T * out, float* lse, const T* qkv, int T_, int C, int NH, int b, int h, float* ws, uint16_t* hs)
#define FWD_ARGS (out, lse, qkv, T_, C, NH, b, h, ws, hs)
#define BWD_PARAMS(T)                                                                           \
  (T * dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int T_, int C, int NH, \
   int b, int h, float* ws, uint16_t* hs)
#define BWD_ARGS (dqkv, dout, qkv, out, lse, T_, C, NH, b, h, ws, hs)
// The task bodies compiled for each path, with that path's tile GEMM.
static void fwd_f32_portable FWD_PARAMS(float) { forward_task<TilePortable> FWD_ARGS; }
static void fwd_bf16_portable FWD_PARAMS(uint16_t) { forward_task<TilePortable> FWD_ARGS; }
GPUMIX_TARGET_AVX512 static void fwd_f32_avx512 FWD_PARAMS(float) { forward_task<TileAvx512> FWD_ARGS; }
GPUMIX_TARGET_AVX512 static void fwd_bf16_avx512 FWD_PARAMS(uint16_t) { forward_task<TileAvx512> FWD_ARGS; }
static void bwd_f32_portable BWD_PARAMS(float) { backward_task<TilePortable> BWD_ARGS; }
static void bwd_bf16_portable BWD_PARAMS(uint16_t) { backward_task<TilePortable> BWD_ARGS; }
GPUMIX_TARGET_AVX512 static void bwd_f32_avx512 BWD_PARAMS(float) { backward_task<TileAvx512> BWD_ARGS; }
GPUMIX_TARGET_AVX512 static void bwd_bf16_avx512 BWD_PARAMS(uint16_t) { backward_task<TileAvx512> BWD_ARGS; }
GPUMIX_TARGET_AVX512_BF16 static void fwd_bf16_dp FWD_PARAMS(uint16_t) { forward_task_bf16 FWD_ARGS; }
GPUMIX_TARGET_AVX512_BF16 static void bwd_bf16_dp BWD_PARAMS(uint16_t) { backward_task_bf16 BWD_ARGS; }
#undef FWD_PARAMS
#undef FWD_ARGS
#undef BWD_PARAMS
#undef BWD_ARGS

// The task of the path cpu_isa() picks.
template <class Task>
Task pick(Task portable, Task avx512, Task avx512_bf16) {
  const Isa isa = cpu_isa();
  return isa >= Isa::avx512_bf16 ? avx512_bf16 : isa >= Isa::avx512 ? avx512 : portable;
}

// One task per (batch, head): each owns its rows of out and lse.
template <class T, class Task>
void forward(Task task, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH) {
#pragma omp parallel if (B * NH > 1)
  {
    std::vector<float> ws(forward_floats(T_, C / NH));
    std::vector<uint16_t> hs(sizeof(T) == 2 ? forward_halfs(T_, C / NH) : 0);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < B * NH; t++) task(out, lse, qkv, T_, C, NH, t / NH, t % NH, ws.data(), hs.data());
  }
}

template <class T, class Task>
void backward(Task task, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
              int B, int T_, int C, int NH) {
#pragma omp parallel if (B * NH > 1)
  {
    std::vector<float> ws(backward_floats(T_, C / NH));
    std::vector<uint16_t> hs(sizeof(T) == 2 ? backward_halfs(T_, C / NH) : 0);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < B * NH; t++)
      task(dqkv, dout, qkv, out, lse, T_, C, NH, t / NH, t % NH, ws.data(), hs.data());
  }
}

}  // namespace

// fp32 storage has no bf16 tiles: its avx512_bf16 path is the avx512 one.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  forward(pick(fwd_f32_portable, fwd_f32_avx512, fwd_f32_avx512), out, lse, qkv, B, T, C, NH);
}
void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  forward(pick(fwd_bf16_portable, fwd_bf16_avx512, fwd_bf16_dp), out, lse, qkv, B, T, C, NH);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  backward(pick(bwd_f32_portable, bwd_f32_avx512, bwd_f32_avx512), dqkv, dout, qkv, out, lse, B, T, C, NH);
}
void attention_backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                        const uint16_t* out, const float* lse, int B, int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  backward(pick(bwd_bf16_portable, bwd_bf16_avx512, bwd_bf16_dp), dqkv, dout, qkv, out, lse, B, T, C, NH);
}

}  // namespace gpumix::kernels::cpu
