// Fused causal self-attention, flash-style, over fp32 or bf16 qkv: each (batch, head, block
// of query rows) walks the key blocks with an online softmax, so no (T, T) matrix is ever
// stored; the forward saves the log-sum-exp of each row, from which the backward
// recomputes the probabilities block by block. A task first widens the head's q, k, v (and
// in backward dout) into fp32 tiles in its own cache, k and v also transposed where a tile
// product wants them so, then runs the products with the tile GEMMs of tile_gemm.h and
// the softmax in fp32; bf16 results are rounded once, at the end.
#include <cmath>
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

// Workspace floats of one forward task and one backward task.
int64_t forward_floats(int HS) { return 2 * (int64_t)k_br * HS + 2 * (int64_t)HS * k_bc + (int64_t)k_br * k_bc + 2 * k_br; }
int64_t backward_floats(int T, int HS) { return 8 * (int64_t)T * HS + 2 * (int64_t)k_br * k_bc + T; }

// Query rows [i0, i0 + nr) of head h of batch b. ws: forward_floats(HS).
template <class Tile, class T>
GPUMIX_INLINE void forward_task(T* out, float* lse, const T* qkv, int T_, int C, int NH, int b,
                                int h, int qb, float* ws) {
  const int HS = C / NH;
  const int64_t C3 = 3 * (int64_t)C;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int i0 = qb * k_br, nr = std::min(k_br, T_ - i0);
  float* q = ws;                  // (BR, HS)
  float* o = q + k_br * HS;       // (BR, HS) unnormalised output
  float* kt = o + k_br * HS;      // (HS, BC) keys, transposed
  float* v = kt + HS * k_bc;      // (BC, HS)
  float* s = v + k_bc * HS;       // (BR, BC) scores, then probabilities
  float* m = s + k_br * k_bc;     // (BR) running max
  float* l = m + k_br;            // (BR) running sum
  const T* base = qkv + (int64_t)b * T_ * C3 + h * HS;  // q of row 0; k at +C, v at +2C
  load_rows(q, base + i0 * C3, C3, nr, HS);
  std::fill(o, o + k_br * HS, 0.0f);
  std::fill(m, m + k_br, -INFINITY);
  std::fill(l, l + k_br, 0.0f);
  const int kend = i0 + nr;  // causal: keys 0 .. kend-1 are visible to this block
  for (int j0 = 0; j0 < kend; j0 += k_bc) {
    const int nc = std::min(k_bc, kend - j0);
    load_transposed(kt, k_bc, base + C + j0 * C3, C3, nc, HS);
    load_rows(v, base + 2 * C + j0 * C3, C3, nc, HS);
    Tile::gemm(nr, nc, HS, q, HS, 1, kt, k_bc, s, k_bc, false);  // s = q k^T
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
    Tile::gemm(nr, HS, nc, s, k_bc, 1, v, HS, o, HS, true);  // o += p v
  }
  for (int r = 0; r < nr; r++) {
    T* y = out + ((int64_t)b * T_ + i0 + r) * C + h * HS;
    const float inv = 1.0f / l[r];
#pragma omp simd
    for (int d = 0; d < HS; d++) y[d] = from_f32<T>(o[(int64_t)r * HS + d] * inv);
    lse[((int64_t)b * NH + h) * T_ + i0 + r] = m[r] + std::log(l[r]);
  }
}

// Head h of batch b: the task owns that head's columns of dq, dk and dv, so it
// accumulates them in fp32 and adds them to dqkv once, without races.
// ws: backward_floats(T, HS).
template <class Tile, class T>
GPUMIX_INLINE void backward_task(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                                 int T_, int C, int NH, int b, int h, float* ws) {
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
  for (int i = 0; i < T_; i++) {
    const T* y = out + (row0 + i) * C + h * HS;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int d = 0; d < HS; d++) acc += dy[(int64_t)i * HS + d] * to_f32(y[d]);
    dd[i] = acc;
  }
  for (int j0 = 0; j0 < T_; j0 += k_bc) {
    const int nc = std::min(k_bc, T_ - j0);
    // Query blocks that see any key of this block: rows >= j0.
    for (int i0 = j0 / k_br * k_br; i0 < T_; i0 += k_br) {
      const int nr = std::min(k_br, T_ - i0);
      Tile::gemm(nr, nc, HS, q + i0 * HS, HS, 1, kt + j0, T_, p, k_bc, false);    // s = q k^T
      Tile::gemm(nr, nc, HS, dy + i0 * HS, HS, 1, vt + j0, T_, dp, k_bc, false);  // dP = dout v^T
      for (int r = 0; r < nr; r++) {
        float* pr = p + (int64_t)r * k_bc;
        float* dpr = dp + (int64_t)r * k_bc;
        const int ncr = std::max(0, std::min(nc, i0 + r - j0 + 1));
        const float lr = lse_bh[i0 + r], dr = dd[i0 + r];
#pragma omp simd
        for (int c = 0; c < ncr; c++) {
          pr[c] = exp_vec(pr[c] * scale - lr);
          dpr[c] = pr[c] * (dpr[c] - dr) * scale;  // dS, with the score scale folded in
        }
        std::fill(pr + ncr, pr + nc, 0.0f);
        std::fill(dpr + ncr, dpr + nc, 0.0f);
      }
      Tile::gemm(nc, HS, nr, p, 1, k_bc, dy + i0 * HS, HS, dv + j0 * HS, HS, true);  // dv_j += p^T dout_i
      Tile::gemm(nr, HS, nc, dp, k_bc, 1, k + j0 * HS, HS, dq + i0 * HS, HS, true);  // dq_i += dS k_j
      Tile::gemm(nc, HS, nr, dp, 1, k_bc, q + i0 * HS, HS, dk + j0 * HS, HS, true);  // dk_j += dS^T q_i
    }
  }
  T* dbase = dqkv + row0 * C3 + h * HS;
  for (int i = 0; i < T_; i++)
    for (int part = 0; part < 3; part++) {
      T* g = dbase + i * C3 + part * C;
      const float* src = dq + part * THS + (int64_t)i * HS;
#pragma omp simd
      for (int d = 0; d < HS; d++) g[d] = from_f32<T>(to_f32(g[d]) + src[d]);
    }
}

#define FWD_PARAMS(T) (T * out, float* lse, const T* qkv, int T_, int C, int NH, int b, int h, int qb, float* ws)
#define FWD_ARGS (out, lse, qkv, T_, C, NH, b, h, qb, ws)
#define BWD_PARAMS(T)                                                                           \
  (T * dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int T_, int C, int NH, \
   int b, int h, float* ws)
#define BWD_ARGS (dqkv, dout, qkv, out, lse, T_, C, NH, b, h, ws)
// The task bodies compiled for each path, with that path's tile GEMM.
static void fwd_f32_portable FWD_PARAMS(float) { forward_task<TilePortable> FWD_ARGS; }
static void fwd_bf16_portable FWD_PARAMS(uint16_t) { forward_task<TilePortable> FWD_ARGS; }
GPUMIX_TARGET_AVX512 static void fwd_f32_avx512 FWD_PARAMS(float) { forward_task<TileAvx512> FWD_ARGS; }
GPUMIX_TARGET_AVX512 static void fwd_bf16_avx512 FWD_PARAMS(uint16_t) { forward_task<TileAvx512> FWD_ARGS; }
static void bwd_f32_portable BWD_PARAMS(float) { backward_task<TilePortable> BWD_ARGS; }
static void bwd_bf16_portable BWD_PARAMS(uint16_t) { backward_task<TilePortable> BWD_ARGS; }
GPUMIX_TARGET_AVX512 static void bwd_f32_avx512 BWD_PARAMS(float) { backward_task<TileAvx512> BWD_ARGS; }
GPUMIX_TARGET_AVX512 static void bwd_bf16_avx512 BWD_PARAMS(uint16_t) { backward_task<TileAvx512> BWD_ARGS; }
#undef FWD_PARAMS
#undef FWD_ARGS
#undef BWD_PARAMS
#undef BWD_ARGS

template <class T, class Task>
void forward(Task portable, Task avx512, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH) {
  check_shape("attention_forward", B, T_, C, NH);
  const Task task = cpu_isa() >= Isa::avx512 ? avx512 : portable;
  const int nqb = (T_ + k_br - 1) / k_br;
  const int ntasks = B * NH * nqb;
#pragma omp parallel if (ntasks > 1)
  {
    std::vector<float> ws(forward_floats(C / NH));
    // Later query blocks see more keys: dynamic scheduling balances the causal triangle.
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < ntasks; t++)
      task(out, lse, qkv, T_, C, NH, t / (NH * nqb), (t / nqb) % NH, nqb - 1 - t % nqb, ws.data());
  }
}

template <class T, class Task>
void backward(Task portable, Task avx512, T* dqkv, const T* dout, const T* qkv, const T* out,
              const float* lse, int B, int T_, int C, int NH) {
  check_shape("attention_backward", B, T_, C, NH);
  const Task task = cpu_isa() >= Isa::avx512 ? avx512 : portable;
#pragma omp parallel if (B * NH > 1)
  {
    std::vector<float> ws(backward_floats(T_, C / NH));
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < B * NH; t++) task(dqkv, dout, qkv, out, lse, T_, C, NH, t / NH, t % NH, ws.data());
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  forward(fwd_f32_portable, fwd_f32_avx512, out, lse, qkv, B, T, C, NH);
}
void attention_forward(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T, int C, int NH) {
  forward(fwd_bf16_portable, fwd_bf16_avx512, out, lse, qkv, B, T, C, NH);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  backward(bwd_f32_portable, bwd_f32_avx512, dqkv, dout, qkv, out, lse, B, T, C, NH);
}
void attention_backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                        const uint16_t* out, const float* lse, int B, int T, int C, int NH) {
  backward(bwd_bf16_portable, bwd_bf16_avx512, dqkv, dout, qkv, out, lse, B, T, C, NH);
}

}  // namespace gpumix::kernels::cpu
