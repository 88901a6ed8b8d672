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
//   relative each), their sums and all accumulation stay in fp32. Their softmax is
//   written in AVX-512 (a vector exp, the roundings in the same pass), since it costs as
//   much as the products when left to the compiler.
//
// Only the keys a query block sees are computed: blocks of 16 query rows (forward) and 32
// (backward) cut the diagonal tiles short. Each thread runs a contiguous range of tasks and
// prefetches the next one's rows while it computes. bf16 results are rounded once, at the
// end.
#include <immintrin.h>

#include <climits>
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

constexpr int k_bc = 64;  // keys per tile
// Query rows per tile. A block of rows computes only the keys up to its last row, so the
// diagonal tiles are cut short: with the forward's blocks of 16, 1/8 of a diagonal tile's
// products are masked ones instead of 1/2 (the products cost the same per row at 16 rows
// as at 64: their register blocks are 4 rows, and k, v are packed once per head). The
// backward's blocks of 32 leave 1/4: at 16, its dk and dv products (a reduction over the
// block's rows) reload their accumulators too often (measured no faster).
constexpr int k_fwd_br = 16;
constexpr int k_br = 32;

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

// Asks the cache for n rows of HS elements of src (leading dimension ld): the next task's
// rows, fetched while this task computes. A head's rows lie ld apart, so a task that read
// them at its start would wait on memory for each one (the hardware prefetchers do not
// follow).
template <class T>
GPUMIX_INLINE void prefetch_rows(const T* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r++) {
    for (int d = 0; d < HS; d += 64 / (int)sizeof(T)) __builtin_prefetch(src + r * ld + d);
    __builtin_prefetch(src + r * ld + HS - 1);
  }
}

// Rows r0 .. r0+n-1 of task next's head (none if next < 0) in x, a (B, T, parts * C) tensor
// (parts 3: qkv or dqkv, each part's head columns; 1: out or dout): prefetched.
template <class T>
GPUMIX_INLINE void prefetch_head(const T* x, int parts, int next, int r0, int n, int T_, int C, int NH) {
  if (next < 0) return;
  const int HS = C / NH;
  const int64_t ld = (int64_t)parts * C;
  const T* base = x + ((int64_t)(next / NH) * T_ + r0) * ld + (next % NH) * HS;
  for (int part = 0; part < parts; part++) prefetch_rows(base + part * C, ld, n, HS);
}

// The row reductions of the online softmax, per path: max(init, scale x_c) and sum x_c over
// c < n. The portable loops leave the compiler's reduction epilogue, a chain of one scalar
// operation per lane and row; AVX-512 reduces the lanes in a tree.
struct RowsPortable {
  GPUMIX_INLINE static float max(const float* x, int n, float init, float scale) {
    float mx = init;
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < n; c++) mx = std::max(mx, x[c] * scale);
    return mx;
  }
  GPUMIX_INLINE static float sum(const float* x, int n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int c = 0; c < n; c++) acc += x[c];
    return acc;
  }
};
struct RowsAvx512 {
  GPUMIX_TARGET_AVX512 static __mmask16 lanes(int n, int c) {
    return n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
  }
  GPUMIX_TARGET_AVX512 static float max(const float* x, int n, float init, float scale) {
    __m512 acc = _mm512_set1_ps(init);
    const __m512 sc = _mm512_set1_ps(scale);
    for (int c = 0; c < n; c += 16)
      acc = _mm512_mask_max_ps(acc, lanes(n, c), acc, _mm512_maskz_loadu_ps(lanes(n, c), x + c) * sc);
    return all_lanes<true>(acc);
  }
  GPUMIX_TARGET_AVX512 static float sum(const float* x, int n) {
    __m512 acc = _mm512_setzero_ps();
    for (int c = 0; c < n; c += 16) acc += _mm512_maskz_loadu_ps(lanes(n, c), x + c);
    return all_lanes<false>(acc);
  }
};

// Online softmax of one tile: s (nr, ld BC) holds the scores q.k of queries i0.. against
// keys j0..j0+nc-1 (unscaled); they become exp(scale s - m) (zero where causally masked),
// and the running max m, sum l and output rows o (nr, HS) are rescaled to the new max.
// The masked scores are set to -inf first, so that every loop runs over the whole tile
// width (no scalar remainders at the diagonal; exp(-inf) = 0).
template <class Rows>
GPUMIX_INLINE void online_softmax(float* s, float* o, float* m, float* l, int nr, int nc,
                                  int i0, int j0, int HS, float scale) {
  for (int r = 0; r < nr; r++) {
    float* sr = s + (int64_t)r * k_bc;
    const int ncr = std::min(nc, i0 + r - j0 + 1);  // keys <= this query
    std::fill(sr + std::max(ncr, 0), sr + nc, -INFINITY);
    const float mx = Rows::max(sr, nc, m[r], scale);
    // A row with no key yet (mx still -inf) keeps m, l and o as they are (all zero).
    const float mref = mx == -INFINITY ? 0.0f : mx;
    const float corr = exp_vec(m[r] - mref);  // rescales what was summed so far
#pragma omp simd
    for (int c = 0; c < nc; c++) sr[c] = exp_vec(sr[c] * scale - mref);
    l[r] = l[r] * corr + Rows::sum(sr, nc);
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
int64_t forward_floats(int T, int HS) { return 2 * (int64_t)k_fwd_br * HS + 2 * (int64_t)HS * T + (int64_t)k_fwd_br * k_bc + 2 * k_fwd_br; }
int64_t backward_floats(int T, int HS) { return 8 * (int64_t)T * HS + 2 * (int64_t)k_br * k_bc + T; }
int even(int n) { return n + (n & 1); }
int64_t forward_halfs(int T, int HS) { return (int64_t)even(HS) * (k_fwd_br + T) + (int64_t)even(T) * HS + k_fwd_br * k_bc; }
int64_t backward_halfs(int T, int HS) { return 4 * (int64_t)T * even(HS) + 3 * (int64_t)even(T) * HS + 3 * k_br * k_bc; }

// Head h of batch b, one block of query rows after the other (k and v are copied once).
// ws: forward_floats(T, HS).
template <class Tile, class Rows, class T>
GPUMIX_INLINE void forward_task(T* out, float* lse, const T* qkv, int T_, int C, int NH, int t,
                                int next, float* ws, bf16*) {
  const int HS = C / NH, b = t / NH, h = t % NH;
  const int64_t C3 = 3 * (int64_t)C;
  const float scale = 1.0f / std::sqrt((float)HS);
  float* q = ws;                  // (BR, HS)
  float* o = q + k_fwd_br * HS;       // (BR, HS) unnormalised output
  float* kt = o + k_fwd_br * HS;      // (HS, T) keys, transposed
  float* v = kt + HS * T_;        // (T, HS)
  float* s = v + T_ * HS;         // (BR, BC) scores, then probabilities
  float* m = s + k_fwd_br * k_bc;     // (BR) running max
  float* l = m + k_fwd_br;            // (BR) running sum
  const T* base = qkv + (int64_t)b * T_ * C3 + h * HS;  // q of row 0; k at +C, v at +2C
  load_transposed(kt, T_, base + C, C3, T_, HS);
  load_rows(v, base + 2 * C, C3, T_, HS);
  for (int i0 = 0; i0 < T_; i0 += k_fwd_br) {
    const int nr = std::min(k_fwd_br, T_ - i0);
    prefetch_head(qkv, 3, next, i0, nr, T_, C, NH);
    prefetch_head(out, 1, next, i0, nr, T_, C, NH);
    load_rows(q, base + i0 * C3, C3, nr, HS);
    std::fill(o, o + k_fwd_br * HS, 0.0f);
    std::fill(m, m + k_fwd_br, -INFINITY);
    std::fill(l, l + k_fwd_br, 0.0f);
    const int kend = i0 + nr;  // causal: keys 0 .. kend-1 are visible to this block
    for (int j0 = 0; j0 < kend; j0 += k_bc) {
      const int nc = std::min(k_bc, kend - j0);
      Tile::gemm(nr, nc, HS, q, HS, 1, kt + j0, T_, s, k_bc, false);  // s = q k^T
      online_softmax<Rows>(s, o, m, l, nr, nc, i0, j0, HS, scale);
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
                                 int T_, int C, int NH, int t, int next, float* ws, bf16*) {
  const int HS = C / NH, b = t / NH, h = t % NH;
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
  const auto prefetch_next = [&](int r0, int n) {  // the next task's rows r0 .. r0+n-1
    prefetch_head(qkv, 3, next, r0, n, T_, C, NH);
    prefetch_head(dqkv, 3, next, r0, n, T_, C, NH);
    prefetch_head(dout, 1, next, r0, n, T_, C, NH);
    prefetch_head(out, 1, next, r0, n, T_, C, NH);
  };
  for (int j0 = 0; j0 < T_; j0 += k_bc) {
    const int nc = std::min(k_bc, T_ - j0);
    prefetch_next(j0, nc);
    // Query blocks that see any key of this block: rows >= j0.
    for (int i0 = j0 / k_br * k_br; i0 < T_; i0 += k_br) {
      const int nr = std::min(k_br, T_ - i0);
      const int ncv = std::min(nc, i0 + nr - j0);  // the keys this block sees (the rest are masked)
      Tile::gemm(nr, ncv, HS, q + i0 * HS, HS, 1, kt + j0, T_, p, k_bc, false);    // s = q k^T
      Tile::gemm(nr, ncv, HS, dy + i0 * HS, HS, 1, vt + j0, T_, dp, k_bc, false);  // dP = dout v^T
      softmax_backward(p, dp, lse_bh + i0, dd + i0, nr, ncv, i0, j0, scale);
      Tile::gemm(ncv, HS, nr, p, 1, k_bc, dy + i0 * HS, HS, dv + j0 * HS, HS, true);  // dv_j += p^T dout_i
      Tile::gemm(nr, HS, ncv, dp, k_bc, 1, k + j0 * HS, HS, dq + i0 * HS, HS, true);  // dq_i += dS k_j
      Tile::gemm(ncv, HS, nr, dp, 1, k_bc, q + i0 * HS, HS, dk + j0 * HS, HS, true);  // dk_j += dS^T q_i
    }
  }
  add_head_grads(dqkv + row0 * C3 + h * HS, C3, C, dq, T_, HS);
}

// ---- bf16 tiles (avx512_bf16): the same tasks with the products in vdpbf16ps -------------

// dst (n, ldd) = n rows of HS bf16 of src (leading dimension ld); columns HS..ldd-1 zero.
GPUMIX_INLINE void copy_rows(bf16* dst, int64_t ldd, const bf16* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r++) {
    std::copy(src + r * ld, src + r * ld + HS, dst + r * ldd);
    std::fill(dst + r * ldd + HS, dst + (r + 1) * ldd, bf16{});
  }
}

// The 16 x 16 transpose of 32-bit words held in r[0..15] (row i in r[i]): four rounds of
// two-source shuffles, 4 per vector (Zen 4 runs a 16-lane vpgatherdd several times slower).
GPUMIX_TARGET_AVX512 GPUMIX_INLINE void transpose16x16_words(__m512i r[16]) {
  const __mmask16 w = 0xffff;  // masked forms: GCC 12's unmasked ones warn (an undefined operand)
  const __mmask8 q = 0xff;
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(w, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(w, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_unpacklo_epi64(q, t[i], t[i + 2]);
    r[i + 1] = _mm512_maskz_unpackhi_epi64(q, t[i], t[i + 2]);
    r[i + 2] = _mm512_maskz_unpacklo_epi64(q, t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_maskz_unpackhi_epi64(q, t[i + 1], t[i + 3]);
  }
  // r[4q + j] now holds, in each 128-bit lane L, words j of rows 4q..4q+3 of column block L.
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_maskz_shuffle_i32x4(w, r[i], r[i + 4], 0x88);        // lanes 0, 2 of rows 0-3, 4-7
    t[i + 4] = _mm512_maskz_shuffle_i32x4(w, r[i], r[i + 4], 0xdd);    // lanes 1, 3
    t[i + 8] = _mm512_maskz_shuffle_i32x4(w, r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_maskz_shuffle_i32x4(w, r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_maskz_shuffle_i32x4(w, t[i], t[i + 8], 0x88);        // column block 0
    r[i + 8] = _mm512_maskz_shuffle_i32x4(w, t[i], t[i + 8], 0xdd);    // column block 2
    r[i + 4] = _mm512_maskz_shuffle_i32x4(w, t[i + 4], t[i + 12], 0x88);   // column block 1
    r[i + 12] = _mm512_maskz_shuffle_i32x4(w, t[i + 4], t[i + 12], 0xdd);  // column block 3
  }
}

// The product operand b (HS, n) = the transpose of src's n rows, packed in pairs along HS
// (tile_gemm_bf16): b(d, r) = src[r][d] at dst[(d / 2) ldd + 2 r + d % 2]; an odd HS's
// padding row zero. An even HS is a transpose of 32-bit words (pairs along HS), 16 x 16
// words at a time in registers.
GPUMIX_TARGET_AVX512 GPUMIX_INLINE void pack_transposed(bf16* dst, int64_t ldd, const bf16* src,
                                                        int64_t ld, int n, int HS) {
  if (HS % 2 == 0) {
    const int words = HS / 2;
    for (int r0 = 0; r0 < n; r0 += 16) {
      const int nr = std::min(16, n - r0);
      const __mmask16 out_lanes = lanes_below(nr, 0);
      for (int p0 = 0; p0 < words; p0 += 16) {
        const int np = std::min(16, words - p0);
        const __mmask16 in_lanes = lanes_below(np, 0);
        __m512i r[16];
        for (int i = 0; i < 16; i++)
          r[i] = i < nr ? _mm512_maskz_loadu_epi32(in_lanes, src + (r0 + i) * ld + 2 * p0) : _mm512_setzero_si512();
        transpose16x16_words(r);
        for (int p = 0; p < np; p++) _mm512_mask_storeu_epi32(dst + (p0 + p) * ldd + 2 * r0, out_lanes, r[p]);
      }
    }
    return;
  }
  for (int r = 0; r < n; r++)
    for (int d = 0; d < even(HS); d++) dst[(d / 2) * ldd + 2 * r + d % 2] = d < HS ? src[r * ld + d] : bf16{};
}

// The product operand b (n, HS) = src's n rows, packed in pairs along the rows: b(r, d) at
// dst[(r / 2) ldd + 2 d + r % 2]; an odd n's padding row zero.
GPUMIX_INLINE void pack_rows(bf16* dst, int64_t ldd, const bf16* src, int64_t ld, int n, int HS) {
  for (int r = 0; r < n; r += 2) {
    const bf16* r0 = src + r * ld;
    const bf16* r1 = r + 1 < n ? r0 + ld : nullptr;
    bf16* out = dst + (r / 2) * ldd;
#pragma omp simd
    for (int d = 0; d < HS; d++) {
      out[2 * d] = r0[d];
      out[2 * d + 1] = r1 ? r1[d] : bf16{};
    }
  }
}

// ---- the softmax of the bf16 tiles in AVX-512 (exp16, lanes_below: vec_math.h) ----------

// bf16 of a's and b's 16 lanes, interleaved: a0 b0 a1 b1 ... (a pair of rows packed in pairs).
// Rounded to nearest even by vcvtne2ps2bf16, which flushes fp32 denormals (below 2^-126) to
// zero: far below the 2^-8 rounding of every product operand.
GPUMIX_TARGET_AVX512_BF16 GPUMIX_INLINE __m512i bf16_pairs(__m512 a, __m512 b) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_maskz_permutexvar_epi16(0xffffffffu, order, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// online_softmax for the bf16 tiles: the same steps, on whole vectors of the row (the masked
// scores loaded as -inf), writing only the rounded probabilities pb (ld BC; the columns up
// to nc rounded up to 32 written, zero past nc).
GPUMIX_TARGET_AVX512_BF16 GPUMIX_INLINE void online_softmax_bf16(const float* s, float* o, float* m, float* l,
                                                                 bf16* pb, int nr, int nc, int i0, int j0,
                                                                 int HS, float scale) {
  const int nv = (nc + 31) / 32 * 2;  // vectors of 16, in pairs (one store of 32 bf16)
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r = 0; r < nr; r++) {
    const float* sr = s + (int64_t)r * k_bc;
    const int ncr = std::min(nc, i0 + r - j0 + 1);  // keys <= this query
    __m512 x[k_bc / 16];
    __m512 mxv = _mm512_set1_ps(m[r]);
    for (int v = 0; v < nv; v++) {
      x[v] = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes_below(ncr, 16 * v), sr + 16 * v) * sc;
      mxv = _mm512_maskz_max_ps(0xffff, mxv, x[v]);
    }
    const float mx = all_lanes<true>(mxv);
    const float mref = mx == -INFINITY ? 0.0f : mx;  // as online_softmax
    const float corr = exp_vec(m[r] - mref);
    __m512 sum = _mm512_setzero_ps();
    for (int v = 0; v < nv; v += 2) {
      const __m512 e0 = exp16(x[v] - _mm512_set1_ps(mref)), e1 = exp16(x[v + 1] - _mm512_set1_ps(mref));
      sum += e0 + e1;
      _mm512_storeu_si512(pb + (int64_t)r * k_bc + 16 * v, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    l[r] = l[r] * corr + all_lanes<false>(sum);
    m[r] = mx;
    float* orow = o + (int64_t)r * HS;
#pragma omp simd
    for (int d = 0; d < HS; d++) orow[d] *= corr;
  }
}

// As forward_task; hs: forward_halfs(T, HS).
GPUMIX_TARGET_AVX512_BF16 GPUMIX_INLINE void forward_task_bf16(bf16* out, float* lse, const bf16* qkv, int T_, int C,
                                     int NH, int t, int next, float* ws, bf16* hs) {
  const int HS = C / NH, HSp = even(HS), b = t / NH, h = t % NH;
  const int64_t C3 = 3 * (int64_t)C;
  const float scale = 1.0f / std::sqrt((float)HS);
  float* o = ws;                  // (BR, HS) unnormalised output
  float* s = o + k_fwd_br * HS;       // (BR, BC) scores, then probabilities
  float* m = s + k_fwd_br * k_bc;     // (BR) running max
  float* l = m + k_fwd_br;            // (BR) running sum
  bf16* q = hs;               // (BR, HSp)
  bf16* kt = q + k_fwd_br * HSp;  // (HSp, T) keys transposed, pairs along HS
  bf16* v = kt + (int64_t)HSp * T_;  // (Tp, HS) pairs along keys
  bf16* pb = v + (int64_t)even(T_) * HS;  // (BR, BC) probabilities in bf16
  const bf16* base = qkv + (int64_t)b * T_ * C3 + h * HS;
  pack_transposed(kt, 2 * (int64_t)T_, base + C, C3, T_, HS);
  pack_rows(v, 2 * HS, base + 2 * C, C3, T_, HS);
  for (int i0 = 0; i0 < T_; i0 += k_fwd_br) {
    const int nr = std::min(k_fwd_br, T_ - i0);
    prefetch_head(qkv, 3, next, i0, nr, T_, C, NH);
    prefetch_head(out, 1, next, i0, nr, T_, C, NH);
    copy_rows(q, HSp, base + i0 * C3, C3, nr, HS);
    std::fill(o, o + k_fwd_br * HS, 0.0f);
    std::fill(m, m + k_fwd_br, -INFINITY);
    std::fill(l, l + k_fwd_br, 0.0f);
    const int kend = i0 + nr;
    for (int j0 = 0; j0 < kend; j0 += k_bc) {
      const int nc = std::min(k_bc, kend - j0);
      tile_gemm_bf16(nr, nc, HSp, q, HSp, 2, kt + 2 * j0, 2 * T_, s, k_bc, false);  // s = q k^T
      online_softmax_bf16(s, o, m, l, pb, nr, nc, i0, j0, HS, scale);
      tile_gemm_bf16(nr, HS, even(nc), pb, k_bc, 2, v + j0 * HS, 2 * HS, o, HS, true);  // o += p v
    }
    for (int r = 0; r < nr; r++) {
      bf16* y = out + ((int64_t)b * T_ + i0 + r) * C + h * HS;
      const float inv = 1.0f / l[r];
#pragma omp simd
      for (int d = 0; d < HS; d++) y[d] = from_f32<bf16>(o[(int64_t)r * HS + d] * inv);
      lse[((int64_t)b * NH + h) * T_ + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

// softmax_backward for the bf16 tiles, two query rows at a time, writing only the product
// operands: dS rounded as rows (ds, ld BC) and p and dS rounded in pairs along the queries
// (pp, dsp, ld 2 BC). The columns up to nc rounded up to 16 and an odd nr's padding row come
// out zero: masked loads, so the tile's unwritten cells are never read.
GPUMIX_TARGET_AVX512_BF16 GPUMIX_INLINE void softmax_backward_bf16(const float* p, const float* dp,
                                                                   const float* lse, const float* dd,
                                                                   bf16* ds, bf16* pp, bf16* dsp,
                                                                   int nr, int nc, int i0, int j0, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r = 0; r < nr; r += 2) {
    const bool two = r + 1 < nr;
    // The keys each row sees, within the tile.
    const int n0 = std::min(nc, i0 + r - j0 + 1), n1 = two ? std::min(nc, i0 + r + 2 - j0) : 0;
    const __m512 l0 = _mm512_set1_ps(lse[r]), d0 = _mm512_set1_ps(dd[r]);
    const __m512 l1 = _mm512_set1_ps(two ? lse[r + 1] : 0.0f), d1 = _mm512_set1_ps(two ? dd[r + 1] : 0.0f);
    const float *s0 = p + (int64_t)r * k_bc, *s1 = s0 + k_bc;
    const float *dp0 = dp + (int64_t)r * k_bc, *dp1 = dp0 + k_bc;
    for (int c = 0; c < nc; c += 16) {
      const __mmask16 k0 = lanes_below(n0, c), k1 = lanes_below(n1, c);
      const __m512 p0 = _mm512_maskz_mov_ps(k0, exp16(_mm512_maskz_loadu_ps(k0, s0 + c) * sc - l0));
      const __m512 p1 = _mm512_maskz_mov_ps(k1, exp16(_mm512_maskz_loadu_ps(k1, s1 + c) * sc - l1));
      const __m512 g0 = p0 * (_mm512_maskz_loadu_ps(k0, dp0 + c) - d0) * sc;  // 0 where masked
      const __m512 g1 = p1 * (_mm512_maskz_loadu_ps(k1, dp1 + c) - d1) * sc;
      const __m512i g01 = (__m512i)_mm512_cvtne2ps_pbh(g1, g0);  // row r's 16, then row r + 1's
      _mm512_mask_storeu_epi16(ds + (int64_t)r * k_bc + c, 0x0000ffffu, g01);
      _mm512_mask_storeu_epi16(ds + (int64_t)(r + 1) * k_bc + c - 16, 0xffff0000u, g01);
      _mm512_storeu_si512(pp + (int64_t)r * k_bc + 2 * c, bf16_pairs(p0, p1));
      _mm512_storeu_si512(dsp + (int64_t)r * k_bc + 2 * c, bf16_pairs(g0, g1));
    }
  }
}

// As backward_task; hs: backward_halfs(T, HS). Every operand is laid out once per head
// (q, dout, k rows as they are; k, v transposed; q, dout, k packed in pairs along T) or
// once per tile (p and dS rounded, as rows and in pairs along the queries), so that each
// product reads its a in pairs along its reduction (p^T and dS^T are the query-pair packs
// read transposed) and dq, dk, dv all come out as rows.
GPUMIX_TARGET_AVX512_BF16 GPUMIX_INLINE void backward_task_bf16(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                      const bf16* out, const float* lse, int T_, int C, int NH,
                                      int t, int next, float* ws, bf16* hs) {
  const int HS = C / NH, HSp = even(HS), Tp = even(T_), b = t / NH, h = t % NH;
  const int64_t C3 = 3 * (int64_t)C, THS = (int64_t)T_ * HS, TH = (int64_t)T_ * HSp;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int64_t row0 = (int64_t)b * T_;
  float* dq = ws;                    // (T, HS) gradients, fp32
  float* dk = dq + THS;              // (T, HS)
  float* dv = dk + THS;              // (T, HS)
  float* p = dv + THS;               // (BR, BC) scores, then probabilities
  float* dp = p + k_br * k_bc;       // (BR, BC) dP, then dS
  float* dd = dp + k_br * k_bc;      // (T) D_i = dout_i . out_i
  bf16* q = hs;                  // (T, HSp) rows
  bf16* dy = q + TH;             // (T, HSp) dout rows
  bf16* kt = dy + TH;            // (HSp, T) k transposed, pairs along HS
  bf16* vt = kt + TH;            // (HSp, T) v transposed, pairs along HS
  bf16* kv = vt + TH;            // (Tp, HS) k, pairs along T
  bf16* qp = kv + (int64_t)Tp * HS;   // (Tp, HS) q, pairs along T
  bf16* dyp = qp + (int64_t)Tp * HS;  // (Tp, HS) dout, pairs along T
  bf16* ds = dyp + (int64_t)Tp * HS;  // (BR, BC) dS in bf16
  bf16* pp = ds + k_br * k_bc;   // (BR, BC) p, pairs along queries
  bf16* dsp = pp + k_br * k_bc;  // (BR, BC) dS, pairs along queries
  const bf16* base = qkv + row0 * C3 + h * HS;
  const bf16* dybase = dout + row0 * C + h * HS;
  copy_rows(q, HSp, base, C3, T_, HS);
  copy_rows(dy, HSp, dybase, C, T_, HS);
  pack_transposed(kt, 2 * (int64_t)T_, base + C, C3, T_, HS);
  pack_transposed(vt, 2 * (int64_t)T_, base + 2 * C, C3, T_, HS);
  pack_rows(kv, 2 * HS, base + C, C3, T_, HS);
  pack_rows(qp, 2 * HS, base, C3, T_, HS);
  pack_rows(dyp, 2 * HS, dybase, C, T_, HS);
  std::fill(dq, dq + 3 * THS, 0.0f);
  const float* lse_bh = lse + ((int64_t)b * NH + h) * T_;
  row_dots(dd, dybase, out + row0 * C + h * HS, C, T_, HS);
  const auto prefetch_next = [&](int r0, int n) {  // the next task's rows r0 .. r0+n-1
    prefetch_head(qkv, 3, next, r0, n, T_, C, NH);
    prefetch_head(dqkv, 3, next, r0, n, T_, C, NH);
    prefetch_head(dout, 1, next, r0, n, T_, C, NH);
    prefetch_head(out, 1, next, r0, n, T_, C, NH);
  };
  for (int j0 = 0; j0 < T_; j0 += k_bc) {
    const int nc = std::min(k_bc, T_ - j0);
    prefetch_next(j0, nc);
    for (int i0 = j0 / k_br * k_br; i0 < T_; i0 += k_br) {
      const int nr = std::min(k_br, T_ - i0), nrp = even(nr);
      const int ncv = std::min(nc, i0 + nr - j0);  // the keys this block sees (the rest are masked)
      tile_gemm_bf16(nr, ncv, HSp, q + i0 * HSp, HSp, 2, kt + 2 * j0, 2 * T_, p, k_bc, false);    // s = q k^T
      tile_gemm_bf16(nr, ncv, HSp, dy + i0 * HSp, HSp, 2, vt + 2 * j0, 2 * T_, dp, k_bc, false);  // dP = dout v^T
      softmax_backward_bf16(p, dp, lse_bh + i0, dd + i0, ds, pp, dsp, nr, ncv, i0, j0, scale);
      tile_gemm_bf16(ncv, HS, nrp, pp, 2, 2 * k_bc, dyp + i0 * HS, 2 * HS, dv + j0 * HS, HS, true);  // dv_j += p^T dout_i
      tile_gemm_bf16(nr, HS, even(ncv), ds, k_bc, 2, kv + j0 * HS, 2 * HS, dq + i0 * HS, HS, true);  // dq_i += dS k_j
      tile_gemm_bf16(ncv, HS, nrp, dsp, 2, 2 * k_bc, qp + i0 * HS, 2 * HS, dk + j0 * HS, HS, true);  // dk_j += dS^T q_i
    }
  }
  add_head_grads(dqkv + row0 * C3 + h * HS, C3, C, dq, T_, HS);
}

#define FWD_PARAMS(T) \
  (T * out, float* lse, const T* qkv, int T_, int C, int NH, int t, int next, float* ws, bf16* hs)
#define FWD_ARGS (out, lse, qkv, T_, C, NH, t, next, ws, hs)
#define BWD_PARAMS(T)                                                                           \
  (T * dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int T_, int C, int NH, \
   int t, int next, float* ws, bf16* hs)
#define BWD_ARGS (dqkv, dout, qkv, out, lse, T_, C, NH, t, next, ws, hs)
// The task bodies compiled for each path, with that path's tile GEMM.
static void fwd_f32_portable FWD_PARAMS(float) { forward_task<TilePortable, RowsPortable> FWD_ARGS; }
static void fwd_bf16_portable FWD_PARAMS(bf16) { forward_task<TilePortable, RowsPortable> FWD_ARGS; }
GPUMIX_TARGET_AVX512 static void fwd_f32_avx512 FWD_PARAMS(float) { forward_task<TileAvx512, RowsAvx512> FWD_ARGS; }
GPUMIX_TARGET_AVX512 static void fwd_bf16_avx512 FWD_PARAMS(bf16) { forward_task<TileAvx512, RowsAvx512> FWD_ARGS; }
static void bwd_f32_portable BWD_PARAMS(float) { backward_task<TilePortable> BWD_ARGS; }
static void bwd_bf16_portable BWD_PARAMS(bf16) { backward_task<TilePortable> BWD_ARGS; }
GPUMIX_TARGET_AVX512 static void bwd_f32_avx512 BWD_PARAMS(float) { backward_task<TileAvx512> BWD_ARGS; }
GPUMIX_TARGET_AVX512 static void bwd_bf16_avx512 BWD_PARAMS(bf16) { backward_task<TileAvx512> BWD_ARGS; }
GPUMIX_TARGET_AVX512_BF16 static void fwd_bf16_dp FWD_PARAMS(bf16) { forward_task_bf16 FWD_ARGS; }
GPUMIX_TARGET_AVX512_BF16 static void bwd_bf16_dp BWD_PARAMS(bf16) { backward_task_bf16 BWD_ARGS; }
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

// One task per (batch, head): each owns its rows of out and lse (backward: its head's
// columns of dqkv). Each thread runs a contiguous range of tasks, so that a task knows
// which one comes next on its thread and prefetches that one's rows.
template <class T, class Task>
void forward(Task task, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH) {
  parallel_ranges(B * NH, 1, B * NH > 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> ws(forward_floats(T_, C / NH));
    std::vector<bf16> hs(sizeof(T) == 2 ? forward_halfs(T_, C / NH) : 0);
    for (int t = (int)t0; t < t1; t++)
      task(out, lse, qkv, T_, C, NH, t, t + 1 < t1 ? t + 1 : -1, ws.data(), hs.data());
  });
}

template <class T, class Task>
void backward(Task task, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
              int B, int T_, int C, int NH) {
  parallel_ranges(B * NH, 1, B * NH > 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> ws(backward_floats(T_, C / NH));
    std::vector<bf16> hs(sizeof(T) == 2 ? backward_halfs(T_, C / NH) : 0);
    for (int t = (int)t0; t < t1; t++)
      task(dqkv, dout, qkv, out, lse, T_, C, NH, t, t + 1 < t1 ? t + 1 : -1, ws.data(), hs.data());
  });
}

}  // namespace

// fp32 storage has no bf16 tiles: its avx512_bf16 path is the avx512 one.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  forward(pick(fwd_f32_portable, fwd_f32_avx512, fwd_f32_avx512), out, lse, qkv, B, T, C, NH);
}
void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  forward(pick(fwd_bf16_portable, fwd_bf16_avx512, fwd_bf16_dp), out, lse, qkv, B, T, C, NH);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  backward(pick(bwd_f32_portable, bwd_f32_avx512, bwd_f32_avx512), dqkv, dout, qkv, out, lse, B, T, C, NH);
}
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  backward(pick(bwd_bf16_portable, bwd_bf16_avx512, bwd_bf16_dp), dqkv, dout, qkv, out, lse, B, T, C, NH);
}

}  // namespace gpumix::kernels::cpu
