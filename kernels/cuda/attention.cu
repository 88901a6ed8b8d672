// Causal multi-head self-attention, bf16 qkv/out, fp32 arithmetic and lse.
//
// Forward on tensor cores (v2, head size 64; FlashAttention-2's schedule): mma.sync bf16 with
// fp32 accumulation, ldmatrix, cp.async double buffering (flash_forward_tc_kernel below); P is
// rounded to bf16 before P V, as FlashAttention-2 does. The SIMT version takes every other
// head size, unaligned buffers, and the backward.
//
// Flash version (v1: SIMT, no tensor cores), templated on the head size D:
// - G = max(1, D/32) threads own one row (query or key) and P = D/G of its channels;
//   dot products are P fused multiply-adds plus a shuffle across the G lanes.
// - forward: a block owns 64 query rows of one (b, h); K and V tiles of 32 keys are
//   staged in shared memory (fp32, each part padded by one word: no bank conflicts);
//   online softmax in the log2 domain; the T x T matrix never exists in device memory;
//   the longest (last) query tiles are scheduled first.
// - backward: two kernels and no atomics. dQ: per query row as the forward, recomputing
//   P from lse, and writing Delta = rowsum(dO * O) to scratch (B,NH,T). dK/dV: a block
//   owns 64 key rows, streams 32-query tiles of Q, dO, lse and Delta through shared
//   memory. dqkv += (bf16 read-modify-write; q, k and v parts are written by disjoint
//   threads).
// Reference version: materialises scores and probabilities (B,NH,T,T) in fp32 scratch,
// one thread per element, recomputing everything (it ignores out and lse in backward).
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace gpumix::kernels::cuda {

namespace {

using detail::ld_bf16;
using detail::to_bf16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kRows = 64;   // query rows (forward, dQ) or key rows (dK/dV) per block
constexpr int kTile = 32;   // keys (forward, dQ) or queries (dK/dV) per shared-memory tile

template <int D>
struct Shape {
  static constexpr int G = D >= 32 ? D / 32 : 1;  // threads per row
  static constexpr int P = D / G;                 // channels per thread
  static constexpr int ROW = G * (P + 1);         // padded floats per row in shared memory
  static constexpr int THREADS = kRows * G;
  __device__ static int smem_index(int j, int d) { return j * ROW + (d / P) * (P + 1) + d % P; }
};

// Sum over the G lanes that own one row (G consecutive lanes of a warp).
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = 1; o < G; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Stage rows r0..r0+kTile-1 of part `which` (0 q, 1 k, 2 v) of head h into sh (fp32),
// zeros past T.
template <int D>
__device__ __forceinline__ void stage_tile(float* sh, const bf16* qkv, int which, int b, int h,
                                           int r0, int T, int C) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int j = e / D, d = e % D, r = r0 + j;
    float x = 0.0f;
    if (r < T) x = ld_bf16(qkv[((int64_t)b * T + r) * 3 * C + which * C + h * D + d]);
    sh[Shape<D>::smem_index(j, d)] = x;
  }
}

template <int D>
__global__ void __launch_bounds__(Shape<D>::THREADS) flash_forward_kernel(
    bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int C,
    int NH, float scale_log2) {
  using S = Shape<D>;
  constexpr int G = S::G, P = S::P;
  GPUMIX_SHARED(float, Ks, [kTile * S::ROW]);
  GPUMIX_SHARED(float, Vs, [kTile * S::ROW]);
  const int part = threadIdx.x % G;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // longest tiles first
  const int qi = q0 + threadIdx.x / G;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const bool valid = qi < T;

  float q[P], acc[P];
  const int64_t qbase = ((int64_t)b * T + qi) * 3 * C + h * D + part * P;
#pragma unroll
  for (int d = 0; d < P; ++d) {
    q[d] = valid ? ld_bf16(qkv[qbase + d]) * scale_log2 : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int kv_end = min(T, q0 + kRows);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    stage_tile<D>(Ks, qkv, 1, b, h, k0, T, C);
    stage_tile<D>(Vs, qkv, 2, b, h, k0, T, C);
    __syncthreads();
    float s[kTile];
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float* kr = Ks + j * S::ROW + part * (P + 1);
      float dot = 0.0f;
#pragma unroll
      for (int d = 0; d < P; ++d) dot += q[d] * kr[d];
      dot = group_sum<G>(dot);
      const int key = k0 + j;
      s[j] = (key <= qi && key < T) ? dot : -INFINITY;
      mt = fmaxf(mt, s[j]);
    }
    const float m_new = fmaxf(m, mt);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float corr = exp2f(m - m_use);
    l *= corr;
#pragma unroll
    for (int d = 0; d < P; ++d) acc[d] *= corr;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float p = exp2f(s[j] - m_use);
      l += p;
      const float* vr = Vs + j * S::ROW + part * (P + 1);
#pragma unroll
      for (int d = 0; d < P; ++d) acc[d] += p * vr[d];
    }
    m = m_new;
  }
  if (valid) {
    const float inv = 1.0f / l;
    bf16* o = out + ((int64_t)b * T + qi) * C + h * D + part * P;
#pragma unroll
    for (int d = 0; d < P; ++d) o[d] = to_bf16(acc[d] * inv);
    if (part == 0) lse[(int64_t)bh * T + qi] = (m + log2f(l)) * kLn2;
  }
}

template <int D>
__global__ void __launch_bounds__(Shape<D>::THREADS) flash_backward_dq_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const bf16* __restrict__ out, const float* __restrict__ lse,
    int T, int C, int NH, float scale, float scale_log2) {
  using S = Shape<D>;
  constexpr int G = S::G, P = S::P;
  GPUMIX_SHARED(float, Ks, [kTile * S::ROW]);
  GPUMIX_SHARED(float, Vs, [kTile * S::ROW]);
  const int part = threadIdx.x % G;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int qi = q0 + threadIdx.x / G;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const bool valid = qi < T;

  float q[P], g[P], dq[P];
  const int64_t qbase = ((int64_t)b * T + qi) * 3 * C + h * D + part * P;
  const int64_t obase = ((int64_t)b * T + qi) * C + h * D + part * P;
  float dl = 0.0f;
#pragma unroll
  for (int d = 0; d < P; ++d) {
    q[d] = valid ? ld_bf16(qkv[qbase + d]) * scale_log2 : 0.0f;
    g[d] = valid ? ld_bf16(dout[obase + d]) : 0.0f;
    dl += valid ? g[d] * ld_bf16(out[obase + d]) : 0.0f;
    dq[d] = 0.0f;
  }
  dl = group_sum<G>(dl);  // Delta = rowsum(dO * O)
  const float lse2 = valid ? lse[(int64_t)bh * T + qi] * kLog2e : 0.0f;
  if (valid && part == 0) delta[(int64_t)bh * T + qi] = dl;

  const int kv_end = min(T, q0 + kRows);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    stage_tile<D>(Ks, qkv, 1, b, h, k0, T, C);
    stage_tile<D>(Vs, qkv, 2, b, h, k0, T, C);
    __syncthreads();
#pragma unroll 2
    for (int j = 0; j < kTile; ++j) {
      const float* kr = Ks + j * S::ROW + part * (P + 1);
      const float* vr = Vs + j * S::ROW + part * (P + 1);
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < P; ++d) {
        s += q[d] * kr[d];
        dp += g[d] * vr[d];
      }
      s = group_sum<G>(s);
      dp = group_sum<G>(dp);
      const int key = k0 + j;
      const float p = (key <= qi && key < T) ? exp2f(s - lse2) : 0.0f;
      const float ds = p * (dp - dl);
#pragma unroll
      for (int d = 0; d < P; ++d) dq[d] += ds * kr[d];
    }
  }
  if (valid) {
    bf16* o = dqkv + qbase;
#pragma unroll
    for (int d = 0; d < P; ++d) o[d] = to_bf16(ld_bf16(o[d]) + dq[d] * scale);
  }
}

template <int D>
__global__ void __launch_bounds__(Shape<D>::THREADS) flash_backward_dkv_kernel(
    bf16* __restrict__ dqkv, const float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const float* __restrict__ lse, int T, int C, int NH,
    float scale, float scale_log2) {
  using S = Shape<D>;
  constexpr int G = S::G, P = S::P;
  GPUMIX_SHARED(float, Qs, [kTile * S::ROW]);
  GPUMIX_SHARED(float, Gs, [kTile * S::ROW]);  // dO
  GPUMIX_SHARED(float, Ls, [kTile]);            // lse in the log2 domain
  GPUMIX_SHARED(float, Ds, [kTile]);            // Delta
  const int part = threadIdx.x % G;
  const int k0 = blockIdx.x * kRows;  // the first key tiles have the most queries: first
  const int kj = k0 + threadIdx.x / G;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const bool valid = kj < T;

  float k[P], v[P], dk[P], dv[P];
  const int64_t kbase = ((int64_t)b * T + kj) * 3 * C + C + h * D + part * P;
#pragma unroll
  for (int d = 0; d < P; ++d) {
    k[d] = valid ? ld_bf16(qkv[kbase + d]) * scale_log2 : 0.0f;
    v[d] = valid ? ld_bf16(qkv[kbase + C + d]) : 0.0f;
    dk[d] = 0.0f;
    dv[d] = 0.0f;
  }
  for (int q0 = (k0 / kTile) * kTile; q0 < T; q0 += kTile) {
    __syncthreads();
    stage_tile<D>(Qs, qkv, 0, b, h, q0, T, C);
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int i = e / D, d = e % D, r = q0 + i;
      Gs[S::smem_index(i, d)] =
          r < T ? ld_bf16(dout[((int64_t)b * T + r) * C + h * D + d]) : 0.0f;
    }
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      const int r = q0 + i;
      Ls[i] = r < T ? lse[(int64_t)bh * T + r] * kLog2e : 0.0f;
      Ds[i] = r < T ? delta[(int64_t)bh * T + r] : 0.0f;
    }
    __syncthreads();
#pragma unroll 2
    for (int i = 0; i < kTile; ++i) {
      const float* qr = Qs + i * S::ROW + part * (P + 1);
      const float* gr = Gs + i * S::ROW + part * (P + 1);
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < P; ++d) {
        s += k[d] * qr[d];
        dp += v[d] * gr[d];
      }
      s = group_sum<G>(s);
      dp = group_sum<G>(dp);
      const int qi = q0 + i;
      const float p = (qi >= kj && qi < T) ? exp2f(s - Ls[i]) : 0.0f;
      const float ds = p * (dp - Ds[i]);
#pragma unroll
      for (int d = 0; d < P; ++d) {
        dv[d] += p * gr[d];
        dk[d] += ds * qr[d];
      }
    }
  }
  if (valid) {
    bf16* ok = dqkv + kbase;
    bf16* ov = dqkv + kbase + C;
#pragma unroll
    for (int d = 0; d < P; ++d) {
      ok[d] = to_bf16(ld_bf16(ok[d]) + dk[d] * scale);
      ov[d] = to_bf16(ld_bf16(ov[d]) + dv[d]);
    }
  }
}

// ---- forward on tensor cores (FlashAttention-2), head size 64 -------------------------------
// A block of 4 warps owns 64 query rows of one (b, h), 16 per warp. Q (64 x 64) and tiles of 64
// keys of K and V stream into shared memory by cp.async (rows past T zero-filled), K and V
// double-buffered: the next tile's copies run while this one is computed. Per warp and tile:
// S (16 x 64) = Q K^T by 32 mma m16n8k16 (Q's fragments loaded once by ldmatrix, K's by
// ldmatrix as B (key, d)); scale, the causal mask (only on tiles that reach the diagonal) and
// keys past T; online softmax in fp32 in the log2 domain on the accumulator fragments (a lane
// holds 2 rows; the 4 lanes of a quad one row: the row max by 2 shuffles, the row sum kept per
// lane and summed once at the end); P rounded to bf16 and reused in registers as the A operand
// of O += P V (32 mma, V's fragments by ldmatrix.trans). Out bf16; lse fp32 from m and l.
constexpr int kTcD = 64, kTcRows = 64, kTcKeys = 64;
constexpr int kTcStride = kTcD + 8;  // 144-byte rows: 16-byte aligned, ldmatrix conflict-free

__global__ void __launch_bounds__(128) flash_forward_tc_kernel(
    bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int C,
    int NH, float scale_log2) {
  using namespace detail;
  GPUMIX_SHARED(bf16, Qs, [kTcRows][kTcStride]);
  GPUMIX_SHARED(bf16, Ks, [2][kTcKeys][kTcStride]);
  GPUMIX_SHARED(bf16, Vs, [2][kTcKeys][kTcStride]);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTcRows;  // longest tiles first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t row_stride = 3 * (int64_t)C;
  const bf16* head = qkv + (int64_t)b * T * row_stride + h * kTcD;  // q of row 0 of (b, h)

  // Rows r0..r0+63 of part `which` (0 q, 1 k, 2 v): 512 chunks of 16 bytes, 4 per thread.
  auto load_tile = [&](bf16(*sh)[kTcStride], int which, int r0) {
    for (int c = tid; c < kTcRows * kTcD / 8; c += 128) {
      const int r = c / 8, col = (c % 8) * 8, row = r0 + r;
      const bf16* src = head + (int64_t)min(row, T - 1) * row_stride + which * C + col;
      cp_async_cg16_zfill(&sh[r][col], src, row < T ? 16 : 0);
    }
  };

  const int kv_end = min(T, q0 + kTcRows);
  const int tiles = (kv_end + kTcKeys - 1) / kTcKeys;
  load_tile(Qs, 0, q0);
  load_tile(Ks[0], 1, 0);
  load_tile(Vs[0], 2, 0);
  cp_async_commit();

  const int row0 = q0 + warp * 16 + g;  // this lane's rows: row0 and row0 + 8
  uint32_t qa[4][4];
  float o[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int it = 0; it < tiles; ++it) {
    const int buf = it % 2, k0 = it * kTcKeys;
    if (it + 1 < tiles) {
      load_tile(Ks[buf ^ 1], 1, k0 + kTcKeys);
      load_tile(Vs[buf ^ 1], 2, k0 + kTcKeys);
      cp_async_commit();
      cp_async_wait<1>();  // this tile (and Q) landed; the next may be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        ldmatrix<4>(qa[ks], &Qs[warp * 16 + lane % 16][ks * 16 + (lane / 16) * 8]);
    }
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < 4; ks += 2) {  // K rows j*8.., d = ks*16 .. ks*16 + 31
        uint32_t kb[4];
        ldmatrix<4>(kb, &Ks[buf][j * 8 + lane % 8][ks * 16 + (lane / 8) * 8]);
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        mma_bf16_16816(s[j], qa[ks], b0, s[j]);
        mma_bf16_16816(s[j], qa[ks + 1], b1, s[j]);
      }
    }
    // Keys past the warp's first row or past T exist only in the last tiles.
    const bool masked = k0 + kTcKeys - 1 > q0 + warp * 16 || k0 + kTcKeys > T;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + j * 8 + 2 * t + (i & 1), row = row0 + (i >> 1) * 8;
        float v = s[j][i] * scale_log2;
        if (masked && (key > row || key >= T)) v = -INFINITY;
        s[j][i] = v;
        mx[i >> 1] = fmaxf(mx[i >> 1], v);
      }
    float mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      mu[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
      const float corr = exp2f(m[r] - mu[r]);
      m[r] = mx[r];
      l[r] *= corr;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        o[j][2 * r] *= corr;
        o[j][2 * r + 1] *= corr;
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = exp2f(s[j][i] - mu[i >> 1]);
        s[j][i] = p;
        l[i >> 1] += p;
      }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // keys kk*16 .. kk*16 + 15: P's A fragment from S's
      const uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]),
                              pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dj = 0; dj < 8; dj += 2) {  // d = dj*8 .. dj*8 + 15
        uint32_t vb[4];
        ldmatrix_trans<4>(vb, &Vs[buf][kk * 16 + lane % 16][dj * 8 + (lane / 16) * 8]);
        const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        mma_bf16_16816(o[dj], pa, b0, o[dj]);
        mma_bf16_16816(o[dj + 1], pa, b1, o[dj + 1]);
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this buffer
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = row0 + r * 8;
    if (row >= T) continue;
    const float inv = 1.0f / l[r];
    uint32_t* dst = (uint32_t*)(out + ((int64_t)b * T + row) * C + h * kTcD + 2 * t);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[j * 4] = pack_bf16x2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (t == 0) lse[(int64_t)bh * T + row] = (m[r] + log2f(l[r])) * kLn2;
  }
}

void check_shape(const char* what, int B, int T, int C, int NH) {
  if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0)
    throw std::invalid_argument(std::string(what) + ": bad shape B=" + std::to_string(B) +
                                " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                                " NH=" + std::to_string(NH) + " (C must be a multiple of NH)");
}

void check_flash(const char* what, int B, int T, int C, int NH) {
  check_shape(what, B, T, C, NH);
  if (!attention_flash_supported(C / NH))
    throw std::invalid_argument(std::string(what) + ": head size " + std::to_string(C / NH) +
                                " is not supported by the flash kernels (16, 32, 64, 128); "
                                "use attention_*_ref");
}

template <int D>
void flash_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                   cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kRows), B * NH);
  const float scale_log2 = kLog2e / sqrtf((float)D);
  GPUMIX_LAUNCH(flash_forward_kernel<D>, grid, Shape<D>::THREADS, 0, stream, out, lse, qkv, T, C, NH,
                                                                  scale_log2);
  CUDA_CHECK_LAST();
}

// The tensor-core forward needs 16-byte aligned qkv rows (cp.async) and 4-byte aligned out
// (two bf16 per store); the SIMT kernel takes the rest.
bool flash_forward_tc_fits(const bf16* out, const bf16* qkv, int C, int NH) {
  return C / NH == kTcD && detail::aligned16(qkv) && ((uintptr_t)out & 3u) == 0;
}

void flash_forward_tc(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                      cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kTcRows), B * NH);
  const float scale_log2 = kLog2e / sqrtf((float)kTcD);
  GPUMIX_LAUNCH(flash_forward_tc_kernel, grid, 128, 0, stream, out, lse, qkv, T, C, NH,
                scale_log2);
  CUDA_CHECK_LAST();
}

template <int D>
void flash_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                    const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kRows), B * NH);
  const float scale = 1.0f / sqrtf((float)D);
  const float scale_log2 = kLog2e * scale;
  float* delta = (float*)detail::scratch_alloc(sizeof(float) * (size_t)B * NH * T, stream);
  GPUMIX_LAUNCH(flash_backward_dq_kernel<D>, grid, Shape<D>::THREADS, 0, stream, 
      dqkv, delta, dout, qkv, out, lse, T, C, NH, scale, scale_log2);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(flash_backward_dkv_kernel<D>, grid, Shape<D>::THREADS, 0, stream, 
      dqkv, delta, dout, qkv, lse, T, C, NH, scale, scale_log2);
  CUDA_CHECK_LAST();
  detail::scratch_free(delta, stream);
}

// ---- reference ------------------------------------------------------------------------------

// S (BH,T,T) = causal scores q.k * scale (masked: -inf).
__global__ void ref_scores_kernel(float* S, const bf16* qkv, int B, int T, int C, int NH,
                                  float scale) {
  const int HS = C / NH;
  const int64_t n = (int64_t)B * NH * T * T;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(e % T), i = (int)((e / T) % T);
    const int bh = (int)(e / ((int64_t)T * T)), b = bh / NH, h = bh % NH;
    float s = -INFINITY;
    if (j <= i) {
      const bf16* q = qkv + ((int64_t)b * T + i) * 3 * C + h * HS;
      const bf16* k = qkv + ((int64_t)b * T + j) * 3 * C + C + h * HS;
      float dot = 0.0f;
      for (int d = 0; d < HS; ++d) dot += ld_bf16(q[d]) * ld_bf16(k[d]);
      s = dot * scale;
    }
    S[e] = s;
  }
}

// Per row: lse, and S replaced by the probabilities.
__global__ void ref_softmax_kernel(float* S, float* lse, int BH, int T) {
  const int64_t rows = (int64_t)BH * T;
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
       r += (int64_t)gridDim.x * blockDim.x) {
    float* s = S + r * T;
    float m = -INFINITY;
    for (int j = 0; j < T; ++j) m = fmaxf(m, s[j]);
    float sum = 0.0f;
    for (int j = 0; j < T; ++j) sum += expf(s[j] - m);
    const float l = m + logf(sum);
    for (int j = 0; j < T; ++j) s[j] = expf(s[j] - l);
    if (lse) lse[r] = l;
  }
}

__global__ void ref_out_kernel(bf16* out, const float* Pm, const bf16* qkv, int B, int T, int C,
                               int NH) {
  const int HS = C / NH;
  const int64_t n = (int64_t)B * T * C;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int c = (int)(e % C), h = c / HS, d = c % HS;
    const int64_t bt = e / C;
    const int b = (int)(bt / T), i = (int)(bt % T);
    const float* p = Pm + (((int64_t)b * NH + h) * T + i) * T;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j)
      acc += p[j] * ld_bf16(qkv[((int64_t)b * T + j) * 3 * C + 2 * C + h * HS + d]);
    out[e] = to_bf16(acc);
  }
}

// dP (BH,T,T) = dO_i . v_j
__global__ void ref_dp_kernel(float* dP, const bf16* dout, const bf16* qkv, int B, int T, int C,
                              int NH) {
  const int HS = C / NH;
  const int64_t n = (int64_t)B * NH * T * T;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(e % T), i = (int)((e / T) % T);
    const int bh = (int)(e / ((int64_t)T * T)), b = bh / NH, h = bh % NH;
    const bf16* g = dout + ((int64_t)b * T + i) * C + h * HS;
    const bf16* v = qkv + ((int64_t)b * T + j) * 3 * C + 2 * C + h * HS;
    float dot = 0.0f;
    for (int d = 0; d < HS; ++d) dot += ld_bf16(g[d]) * ld_bf16(v[d]);
    dP[e] = dot;
  }
}

// dS = P * (dP - rowsum(P * dP)), in place of dP.
__global__ void ref_ds_kernel(float* dP, const float* Pm, int BH, int T) {
  const int64_t rows = (int64_t)BH * T;
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
       r += (int64_t)gridDim.x * blockDim.x) {
    float* dp = dP + r * T;
    const float* p = Pm + r * T;
    float dot = 0.0f;
    for (int j = 0; j < T; ++j) dot += p[j] * dp[j];
    for (int j = 0; j < T; ++j) dp[j] = p[j] * (dp[j] - dot);
  }
}

// dqkv += (dq, dk, dv), one thread per (b, t, channel of q|k|v).
__global__ void ref_dqkv_kernel(bf16* dqkv, const float* dS, const float* Pm, const bf16* dout,
                                const bf16* qkv, int B, int T, int C, int NH, float scale) {
  const int HS = C / NH;
  const int64_t n = (int64_t)B * T * 3 * C;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int c3 = (int)(e % (3 * C)), which = c3 / C, c = c3 % C, h = c / HS, d = c % HS;
    const int64_t bt = e / (3 * C);
    const int b = (int)(bt / T), t = (int)(bt % T);
    const int64_t bhT = ((int64_t)b * NH + h) * T;
    float acc = 0.0f;
    if (which == 0) {  // dq_t = scale * sum_j dS_tj k_j
      for (int j = 0; j <= t; ++j)
        acc += dS[(bhT + t) * T + j] * ld_bf16(qkv[((int64_t)b * T + j) * 3 * C + C + h * HS + d]);
      acc *= scale;
    } else if (which == 1) {  // dk_t = scale * sum_i dS_it q_i
      for (int i = t; i < T; ++i)
        acc += dS[(bhT + i) * T + t] * ld_bf16(qkv[((int64_t)b * T + i) * 3 * C + h * HS + d]);
      acc *= scale;
    } else {  // dv_t = sum_i P_it dO_i
      for (int i = t; i < T; ++i)
        acc += Pm[(bhT + i) * T + t] * ld_bf16(dout[((int64_t)b * T + i) * C + h * HS + d]);
    }
    dqkv[e] = to_bf16(ld_bf16(dqkv[e]) + acc);
  }
}

}  // namespace

bool attention_flash_supported(int HS) { return HS == 16 || HS == 32 || HS == 64 || HS == 128; }

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
  check_flash("attention_forward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  switch (C / NH) {
    case 16: flash_forward<16>(out, lse, qkv, B, T, C, NH, stream); break;
    case 32: flash_forward<32>(out, lse, qkv, B, T, C, NH, stream); break;
    case 64:
      if (flash_forward_tc_fits(out, qkv, C, NH))
        flash_forward_tc(out, lse, qkv, B, T, C, NH, stream);
      else
        flash_forward<64>(out, lse, qkv, B, T, C, NH, stream);
      break;
    case 128: flash_forward<128>(out, lse, qkv, B, T, C, NH, stream); break;
  }
}

void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  check_flash("attention_backward", B, T, C, NH);
  if (B == 0 || T == 0 || dqkv == nullptr) return;
  switch (C / NH) {
    case 16: flash_backward<16>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); break;
    case 32: flash_backward<32>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); break;
    case 64: flash_backward<64>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); break;
    case 128: flash_backward<128>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); break;
  }
}

void attention_forward_ref(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                           cudaStream_t stream) {
  check_shape("attention_forward_ref", B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int BH = B * NH;
  const float scale = 1.0f / sqrtf((float)(C / NH));
  const int64_t nTT = (int64_t)BH * T * T;
  float* S = (float*)detail::scratch_alloc(sizeof(float) * nTT, stream);
  GPUMIX_LAUNCH(ref_scores_kernel, detail::grid_for(nTT, 256), 256, 0, stream, S, qkv, B, T, C, NH, scale);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_softmax_kernel, detail::grid_for((int64_t)BH * T, 128), 128, 0, stream, S, lse, BH, T);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_out_kernel, detail::grid_for((int64_t)B * T * C, 256), 256, 0, stream, out, S, qkv, B, T,
                                                                                C, NH);
  CUDA_CHECK_LAST();
  detail::scratch_free(S, stream);
}

void attention_backward_ref(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                            const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  (void)out;
  (void)lse;
  check_shape("attention_backward_ref", B, T, C, NH);
  if (B == 0 || T == 0 || dqkv == nullptr) return;
  const int BH = B * NH;
  const float scale = 1.0f / sqrtf((float)(C / NH));
  const int64_t nTT = (int64_t)BH * T * T;
  float* Pm = (float*)detail::scratch_alloc(sizeof(float) * nTT, stream);
  float* dS = (float*)detail::scratch_alloc(sizeof(float) * nTT, stream);
  GPUMIX_LAUNCH(ref_scores_kernel, detail::grid_for(nTT, 256), 256, 0, stream, Pm, qkv, B, T, C, NH, scale);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_softmax_kernel, detail::grid_for((int64_t)BH * T, 128), 128, 0, stream, Pm, nullptr, BH,
                                                                                 T);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_dp_kernel, detail::grid_for(nTT, 256), 256, 0, stream, dS, dout, qkv, B, T, C, NH);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_ds_kernel, detail::grid_for((int64_t)BH * T, 128), 128, 0, stream, dS, Pm, BH, T);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_dqkv_kernel, detail::grid_for((int64_t)B * T * 3 * C, 256), 256, 0, stream, 
      dqkv, dS, Pm, dout, qkv, B, T, C, NH, scale);
  CUDA_CHECK_LAST();
  detail::scratch_free(dS, stream);
  detail::scratch_free(Pm, stream);
}

}  // namespace gpumix::kernels::cuda
