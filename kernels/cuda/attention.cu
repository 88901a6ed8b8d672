// Causal multi-head self-attention, 16-bit qkv/out (bf16 or f16: one source templated over the
// format H), fp32 arithmetic and lse.
//
// Tensor-core version (v2, head sizes 64 and 128; FlashAttention-2's schedule, forward and
// backward): mma.sync bf16 with fp32 accumulation, ldmatrix, cp.async double buffering
// (flash_*_tc_kernel below); P and dS are rounded to bf16 before the products that take them,
// as FlashAttention-2 does; the backward recomputes S and dP in its dQ kernel (7 products, not
// FlashAttention-2's 5) so that no atomics are needed. The SIMT version takes every other head
// size (16, 32) and buffers the tensor-core kernels cannot load (not 16-byte aligned).
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
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace gpumix::kernels::cuda {

namespace {

using detail::to_f32;
using detail::from_f32;

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
template <class H, int D>
__device__ __forceinline__ void stage_tile(float* sh, const H* qkv, int which, int b, int h,
                                           int r0, int T, int C) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int j = e / D, d = e % D, r = r0 + j;
    float x = 0.0f;
    if (r < T) x = to_f32(qkv[((int64_t)b * T + r) * 3 * C + which * C + h * D + d]);
    sh[Shape<D>::smem_index(j, d)] = x;
  }
}

template <class H, int D>
__global__ void __launch_bounds__(Shape<D>::THREADS) flash_forward_kernel(
    H* __restrict__ out, float* __restrict__ lse, const H* __restrict__ qkv, int T, int C,
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
    q[d] = valid ? to_f32(qkv[qbase + d]) * scale_log2 : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int kv_end = min(T, q0 + kRows);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    stage_tile<H, D>(Ks, qkv, 1, b, h, k0, T, C);
    stage_tile<H, D>(Vs, qkv, 2, b, h, k0, T, C);
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
    H* o = out + ((int64_t)b * T + qi) * C + h * D + part * P;
#pragma unroll
    for (int d = 0; d < P; ++d) o[d] = from_f32<H>(acc[d] * inv);
    if (part == 0) lse[(int64_t)bh * T + qi] = (m + log2f(l)) * kLn2;
  }
}

template <class H, int D>
__global__ void __launch_bounds__(Shape<D>::THREADS) flash_backward_dq_kernel(
    H* __restrict__ dqkv, float* __restrict__ delta, const H* __restrict__ dout,
    const H* __restrict__ qkv, const H* __restrict__ out, const float* __restrict__ lse,
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
    q[d] = valid ? to_f32(qkv[qbase + d]) * scale_log2 : 0.0f;
    g[d] = valid ? to_f32(dout[obase + d]) : 0.0f;
    dl += valid ? g[d] * to_f32(out[obase + d]) : 0.0f;
    dq[d] = 0.0f;
  }
  dl = group_sum<G>(dl);  // Delta = rowsum(dO * O)
  const float lse2 = valid ? lse[(int64_t)bh * T + qi] * kLog2e : 0.0f;
  if (valid && part == 0) delta[(int64_t)bh * T + qi] = dl;

  const int kv_end = min(T, q0 + kRows);
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    stage_tile<H, D>(Ks, qkv, 1, b, h, k0, T, C);
    stage_tile<H, D>(Vs, qkv, 2, b, h, k0, T, C);
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
    H* o = dqkv + qbase;
#pragma unroll
    for (int d = 0; d < P; ++d) o[d] = from_f32<H>(to_f32(o[d]) + dq[d] * scale);
  }
}

template <class H, int D>
__global__ void __launch_bounds__(Shape<D>::THREADS) flash_backward_dkv_kernel(
    H* __restrict__ dqkv, const float* __restrict__ delta, const H* __restrict__ dout,
    const H* __restrict__ qkv, const float* __restrict__ lse, int T, int C, int NH,
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
    k[d] = valid ? to_f32(qkv[kbase + d]) * scale_log2 : 0.0f;
    v[d] = valid ? to_f32(qkv[kbase + C + d]) : 0.0f;
    dk[d] = 0.0f;
    dv[d] = 0.0f;
  }
  for (int q0 = (k0 / kTile) * kTile; q0 < T; q0 += kTile) {
    __syncthreads();
    stage_tile<H, D>(Qs, qkv, 0, b, h, q0, T, C);
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int i = e / D, d = e % D, r = q0 + i;
      Gs[S::smem_index(i, d)] =
          r < T ? to_f32(dout[((int64_t)b * T + r) * C + h * D + d]) : 0.0f;
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
    H* ok = dqkv + kbase;
    H* ov = dqkv + kbase + C;
#pragma unroll
    for (int d = 0; d < P; ++d) {
      ok[d] = from_f32<H>(to_f32(ok[d]) + dk[d] * scale);
      ov[d] = from_f32<H>(to_f32(ov[d]) + dv[d]);
    }
  }
}

// The formats the tensor-core kernels take: bf16 (mma .bf16). f16 runs the SIMT kernels until
// the f16 mma (sm_80+, the same fragment layouts) is wired in, with the emulator's twin.
template <class H>
constexpr bool kTcFormat = std::is_same<H, bf16>::value;

// ---- FlashAttention-2 on tensor cores, head sizes 64 and 128 ---------------------------------
// Every kernel: a block of 4 warps owns 64 rows (queries, or keys for dK/dV) of one (b, h), 16
// per warp, and streams tiles of 64 rows of the other side through shared memory by cp.async
// (rows past T zero-filled), double-buffered: the next tile's copies run while this one is
// computed. Products are mma m16n8k16 bf16 -> fp32 on fragments loaded by ldmatrix (.trans for
// an operand stored K x N); a warp's 16 x 64 score tile lives in accumulator fragments (a lane
// holds rows g and g + 8, columns 2t, 2t + 1 of each 8-column tile: tensor_core.cuh), and is
// reused in registers, rounded to bf16, as the A operand of the next product (P or dS), as
// FlashAttention-2 does. The causal mask and T's end are applied only on the tiles that reach
// them. Shared memory rows are padded to D + 8 bf16 (16-byte aligned, ldmatrix conflict-free)
// and dynamic (5 or 6 tiles: 46-104 KiB; cudaFuncSetAttribute above 48 KiB).
// - forward: S = Q K^T, online softmax in fp32 in the log2 domain (the row max by 2 shuffles
//   within the lane quad, the row sum kept per lane and summed once at the end), O += P V;
//   out bf16, lse fp32. Q's fragments stay in registers.
// - backward: 7 products in two kernels, no atomics, so dQ is written by one block per row and
//   the result is bitwise reproducible (fp32 atomics into a dQ accumulator would save two
//   products, S and dP recomputed in the dQ kernel, but their order, hence dQ's rounding,
//   changes from run to run). dQ kernel (per query tile): D = rowsum(dO o O) first (saved for
//   dK/dV), then per key tile S = Q K^T, dP = dO V^T, P = exp(S - lse), dS = P o (dP - D),
//   dQ += dS K. dK/dV kernel (per key tile, from the diagonal query tile to T): S^T = K Q^T,
//   dP^T = V dO^T, P^T, dS^T as above with lse and D per column, dV += P^T dO, dK += dS^T Q.
//   The A operands (Q, dO; K, V) are ldmatrix'd from shared memory per product: at head size
//   128 register-resident fragments would spill. dqkv += the results (bf16 read-modify-write;
//   the kernels write disjoint parts).
constexpr int kTcRows = 64;  // rows per block (4 warps x 16), and rows per streamed tile

// Two barriers of flash_forward_tc_kernel that tests/cuda_emulator/test_seeded_bugs.cpp removes
// in its own copy of this file (defining the macro first), to show that the emulated device
// fails without each; everywhere else a plain __syncthreads().
#ifndef GPUMIX_SEEDED_BARRIER
#define GPUMIX_SEEDED_BARRIER(which) __syncthreads()
#endif

template <int D>
struct Tc {
  static_assert(D % 32 == 0, "the tensor-core attention takes head sizes that are multiples of 32");
  static constexpr int STRIDE = D + 8;                        // bf16 per shared-memory row
  static constexpr int TILE_BYTES = kTcRows * STRIDE * 2;     // one 64-row tile
  using Tile = bf16 (*)[STRIDE];
  __device__ static Tile tile(void* base, int i) {
    return reinterpret_cast<Tile>(static_cast<char*>(base) + (size_t)i * TILE_BYTES);
  }
};

// Rows r0..r0+63 of a bf16 matrix with row stride ld (elements), D columns from src, into sh;
// rows past T zero-filled (their source clamped to row T - 1: an aligned address, nothing read).
template <int D>
__device__ __forceinline__ void tc_load_tile(typename Tc<D>::Tile sh, const bf16* src, int64_t ld,
                                             int r0, int T) {
  for (int c = threadIdx.x; c < kTcRows * D / 8; c += 128) {
    const int r = c / (D / 8), col = (c % (D / 8)) * 8, row = r0 + r;
    detail::cp_async_cg16_zfill(&sh[r][col], src + (int64_t)min(row, T - 1) * ld + col,
                                row < T ? 16 : 0);
  }
}

// The A fragments of the 16 x 16 block (rows of a, columns ks*16..) of a row-major tile.
template <int D>
__device__ __forceinline__ void tc_load_a(uint32_t (&a)[4], typename Tc<D>::Tile a_rows, int ks,
                                          int lane) {
  detail::ldmatrix<4>(a, &a_rows[lane % 16][ks * 16 + (lane / 16) * 8]);
}

// acc[j] += A[:, ks*16 .. ks*16+31] B[j*8 .. j*8+7, same columns]^T for the N column tiles j of a
// 16 x 8N product A B^T, B stored as 8N rows of D (N x K: K in Q K^T); a0, a1: A's fragments for
// ks and ks + 1.
template <int D, int N>
__device__ __forceinline__ void tc_abt_step(float (&acc)[N][4], const uint32_t (&a0)[4],
                                            const uint32_t (&a1)[4], typename Tc<D>::Tile b,
                                            int ks, int lane) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    uint32_t kb[4];
    detail::ldmatrix<4>(kb, &b[j * 8 + lane % 8][ks * 16 + (lane / 8) * 8]);
    const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
    detail::mma_bf16_16816(acc[j], a0, b0, acc[j]);
    detail::mma_bf16_16816(acc[j], a1, b1, acc[j]);
  }
}

// acc (16 x 8N) = A B^T, A the warp's 16 rows of a shared tile, B 8N rows of one.
template <int D, int N>
__device__ __forceinline__ void tc_abt(float (&acc)[N][4], typename Tc<D>::Tile a_rows,
                                       typename Tc<D>::Tile b, int lane) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ks += 2) {
    uint32_t a0[4], a1[4];
    tc_load_a<D>(a0, a_rows, ks, lane);
    tc_load_a<D>(a1, a_rows, ks + 1, lane);
    tc_abt_step<D, N>(acc, a0, a1, b, ks, lane);
  }
}

// A 16 x 8N accumulator (N tiles of 16 x 8) rounded to bf16 as the A operand of a product over
// its 8N columns: for columns kk*16 .. kk*16+15, tiles 2kk and 2kk + 1 (the layouts match).
template <int N>
__device__ __forceinline__ void tc_pack_a(uint32_t (&a)[N / 2][4], const float (&s)[N][4]) {
  using detail::pack_bf16x2;
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    a[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// acc (16 x D) += A (16 x 16K, packed) B, B 16K rows of D stored K x N (V in P V): ldmatrix.trans.
template <int D, int K>
__device__ __forceinline__ void tc_ab(float (&acc)[D / 8][4], const uint32_t (&a)[K][4],
                                      typename Tc<D>::Tile b, int lane) {
#pragma unroll
  for (int kk = 0; kk < K; ++kk)
#pragma unroll
    for (int dj = 0; dj < D / 8; dj += 2) {  // columns dj*8 .. dj*8 + 15
      uint32_t vb[4];
      detail::ldmatrix_trans<4>(vb, &b[kk * 16 + lane % 16][dj * 8 + (lane / 16) * 8]);
      const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
      detail::mma_bf16_16816(acc[dj], a[kk], b0, acc[dj]);
      detail::mma_bf16_16816(acc[dj + 1], a[kk], b1, acc[dj + 1]);
    }
}

// dst (bf16, rows row and row + 8 for r = 0, 1; 2 columns per lane per 8-column tile) +=
// acc * mul, rows at or past T skipped.
template <int D>
__device__ __forceinline__ void tc_add_rows(bf16* dst, int64_t ld, const float (&acc)[D / 8][4],
                                            float mul, int row, int T, int t) {
  using namespace detail;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row + 8 * r >= T) continue;
    uint32_t* p = (uint32_t*)(dst + (int64_t)(row + 8 * r) * ld + 2 * t);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const uint32_t old = p[j * 4];
      p[j * 4] = pack_bf16x2(bf16x2_lo(old) + acc[j][2 * r] * mul,
                             bf16x2_hi(old) + acc[j][2 * r + 1] * mul);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(128) flash_forward_tc_kernel(
    bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int C,
    int NH, float scale_log2) {
  using namespace detail;
  using S = Tc<D>;
  GPUMIX_SHARED_DYNAMIC(float4, smem);  // Q, K[2], V[2]
  const typename S::Tile Qs = S::tile(smem, 0);
  auto Ks = [&](int buf) { return S::tile(smem, 1 + buf); };
  auto Vs = [&](int buf) { return S::tile(smem, 3 + buf); };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTcRows;  // longest tiles first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t ld = 3 * (int64_t)C;
  const bf16* head = qkv + (int64_t)b * T * ld + h * D;  // q of row 0 of (b, h)

  const int kv_end = min(T, q0 + kTcRows);
  const int tiles = (kv_end + kTcRows - 1) / kTcRows;
  tc_load_tile<D>(Qs, head, ld, q0, T);
  tc_load_tile<D>(Ks(0), head + C, ld, 0, T);
  tc_load_tile<D>(Vs(0), head + 2 * C, ld, 0, T);
  cp_async_commit();

  const int row0 = q0 + warp * 16 + g;  // this lane's rows: row0 and row0 + 8
  uint32_t qa[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int it = 0; it < tiles; ++it) {
    const int buf = it % 2, k0 = it * kTcRows;
    if (it + 1 < tiles) {
      tc_load_tile<D>(Ks(buf ^ 1), head + C, ld, k0 + kTcRows, T);
      tc_load_tile<D>(Vs(buf ^ 1), head + 2 * C, ld, k0 + kTcRows, T);
      cp_async_commit();
      cp_async_wait<1>();  // this tile (and Q) landed; the next may be in flight
    } else {
      cp_async_wait<0>();
    }
    GPUMIX_SEEDED_BARRIER(after_wait);
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) tc_load_a<D>(qa[ks], Qs + warp * 16, ks, lane);
    }
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks += 2) tc_abt_step<D, 8>(s, qa[ks], qa[ks + 1], Ks(buf), ks, lane);
    // Keys past the warp's first row or past T exist only in the last tiles.
    const bool masked = k0 + kTcRows - 1 > q0 + warp * 16 || k0 + kTcRows > T;
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
      for (int j = 0; j < D / 8; ++j) {
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
    uint32_t pa[4][4];
    tc_pack_a<8>(pa, s);
    tc_ab<D, 4>(o, pa, Vs(buf), lane);
    GPUMIX_SEEDED_BARRIER(before_overwrite);  // the next iteration's copies overwrite this buffer
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = row0 + r * 8;
    if (row >= T) continue;
    const float inv = 1.0f / l[r];
    uint32_t* dst = (uint32_t*)(out + ((int64_t)b * T + row) * C + h * D + 2 * t);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) dst[j * 4] = pack_bf16x2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (t == 0) lse[(int64_t)bh * T + row] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// dQ, and Delta = rowsum(dO o O) into delta (B, NH, T) for the dK/dV kernel.
template <int D>
__global__ void __launch_bounds__(128) flash_backward_dq_tc_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const bf16* __restrict__ out, const float* __restrict__ lse,
    int T, int C, int NH, float scale, float scale_log2) {
  using namespace detail;
  using S = Tc<D>;
  GPUMIX_SHARED_DYNAMIC(float4, smem);  // Q, dO, K[2], V[2]
  const typename S::Tile Qs = S::tile(smem, 0), Gs = S::tile(smem, 1);
  auto Ks = [&](int buf) { return S::tile(smem, 2 + buf); };
  auto Vs = [&](int buf) { return S::tile(smem, 4 + buf); };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTcRows;  // longest tiles first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t ld = 3 * (int64_t)C;
  const bf16* head = qkv + (int64_t)b * T * ld + h * D;
  const bf16* ghead = dout + (int64_t)b * T * C + h * D;

  const int kv_end = min(T, q0 + kTcRows);
  const int tiles = (kv_end + kTcRows - 1) / kTcRows;
  tc_load_tile<D>(Qs, head, ld, q0, T);
  tc_load_tile<D>(Gs, ghead, C, q0, T);
  tc_load_tile<D>(Ks(0), head + C, ld, 0, T);
  tc_load_tile<D>(Vs(0), head + 2 * C, ld, 0, T);
  cp_async_commit();

  // This lane's rows row0 and row0 + 8: lse (log2 domain) and Delta, the latter summed over
  // the quad's 4 lanes (channels t, t + 4, ...) from the bf16 out the forward stored.
  const int row0 = q0 + warp * 16 + g;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    float acc = 0.0f;
    if (row < T) {
      const bf16* go = ghead + (int64_t)row * C;
      const bf16* oo = out + ((int64_t)b * T + row) * C + h * D;
      for (int d = t; d < D; d += 4) acc += to_f32(go[d]) * to_f32(oo[d]);
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    dl[r] = acc;
    lse2[r] = row < T ? lse[(int64_t)bh * T + row] * kLog2e : 0.0f;
    if (row < T && t == 0) delta[(int64_t)bh * T + row] = acc;
  }

  float dq[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) dq[j][i] = 0.0f;
  for (int it = 0; it < tiles; ++it) {
    const int buf = it % 2, k0 = it * kTcRows;
    if (it + 1 < tiles) {
      tc_load_tile<D>(Ks(buf ^ 1), head + C, ld, k0 + kTcRows, T);
      tc_load_tile<D>(Vs(buf ^ 1), head + 2 * C, ld, k0 + kTcRows, T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    float s[8][4], dp[8][4];
    tc_abt<D, 8>(s, Qs + warp * 16, Ks(buf), lane);
    tc_abt<D, 8>(dp, Gs + warp * 16, Vs(buf), lane);
    const bool masked = k0 + kTcRows - 1 > q0 + warp * 16 || k0 + kTcRows > T;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + j * 8 + 2 * t + (i & 1), row = row0 + (i >> 1) * 8;
        const float p = masked && (key > row || key >= T)
                            ? 0.0f : exp2f(s[j][i] * scale_log2 - lse2[i >> 1]);
        s[j][i] = p * (dp[j][i] - dl[i >> 1]);  // dS
      }
    uint32_t dsa[4][4];
    tc_pack_a<8>(dsa, s);
    tc_ab<D, 4>(dq, dsa, Ks(buf), lane);
    __syncthreads();
  }
  tc_add_rows<D>(dqkv + (int64_t)b * T * ld + h * D, ld, dq, scale, row0, T, t);
}

// dK and dV of 64 keys, over the query tiles from the diagonal one to T.
template <int D>
__global__ void __launch_bounds__(128) flash_backward_dkv_tc_kernel(
    bf16* __restrict__ dqkv, const float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const float* __restrict__ lse, int T, int C, int NH,
    float scale, float scale_log2) {
  using namespace detail;
  using S = Tc<D>;
  // Queries per pass over a tile: at head size 128, dK and dV hold 128 fp32 accumulators per lane,
  // and two 16 x 64 fp32 score tiles (S^T, dP^T: 64 more) spilled (ptxas: 255 registers, 64 B);
  // 32 at a time, in a loop kept rolled: 254 registers, no spill (bench/results/gpu-static.md).
  constexpr int kCols = D > 64 ? 32 : 64;
  GPUMIX_SHARED_DYNAMIC(float4, smem);  // K, V, Q[2], dO[2], then lse (log2) [2][64], Delta [2][64]
  const typename S::Tile Ks = S::tile(smem, 0), Vs = S::tile(smem, 1);
  auto Qs = [&](int buf) { return S::tile(smem, 2 + buf); };
  auto Gs = [&](int buf) { return S::tile(smem, 4 + buf); };
  float(*Ls)[kTcRows] = reinterpret_cast<float(*)[kTcRows]>(S::tile(smem, 6));
  float(*Ds)[kTcRows] = Ls + 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int k0 = blockIdx.x * kTcRows;  // the first key tiles have the most queries: first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int64_t ld = 3 * (int64_t)C;
  const bf16* head = qkv + (int64_t)b * T * ld + h * D;
  const bf16* ghead = dout + (int64_t)b * T * C + h * D;

  // Query tile q0's lse and Delta into buffer buf (plain stores: visible after the barrier
  // that follows the tile's cp.async wait).
  auto load_rows = [&](int buf, int q0) {
    for (int i = tid; i < kTcRows; i += 128) {
      const int r = q0 + i;
      Ls[buf][i] = r < T ? lse[(int64_t)bh * T + r] * kLog2e : 0.0f;
      Ds[buf][i] = r < T ? delta[(int64_t)bh * T + r] : 0.0f;
    }
  };
  const int tiles = (T - k0 + kTcRows - 1) / kTcRows;  // query tiles k0, k0 + 64, ...
  tc_load_tile<D>(Ks, head + C, ld, k0, T);
  tc_load_tile<D>(Vs, head + 2 * C, ld, k0, T);
  tc_load_tile<D>(Qs(0), head, ld, k0, T);
  tc_load_tile<D>(Gs(0), ghead, C, k0, T);
  load_rows(0, k0);
  cp_async_commit();

  const int key0 = k0 + warp * 16 + g;  // this lane's keys: key0 and key0 + 8
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[j][i] = dv[j][i] = 0.0f;
  for (int it = 0; it < tiles; ++it) {
    const int buf = it % 2, q0 = k0 + it * kTcRows;
    if (it + 1 < tiles) {
      tc_load_tile<D>(Qs(buf ^ 1), head, ld, q0 + kTcRows, T);
      tc_load_tile<D>(Gs(buf ^ 1), ghead, C, q0 + kTcRows, T);
      load_rows(buf ^ 1, q0 + kTcRows);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    // Queries before the warp's last key or past T exist only in the first and last tiles.
    const bool masked = q0 < k0 + warp * 16 + 15 || q0 + kTcRows > T;
#pragma unroll 1  // unrolled, ptxas interleaves the two passes at head size 128 and spills
    for (int c0 = 0; c0 < kTcRows; c0 += kCols) {  // the tile's queries, kCols at a time
      float s[kCols / 8][4], dp[kCols / 8][4];       // S^T and dP^T: 16 keys x kCols queries
      tc_abt<D, kCols / 8>(s, Ks + warp * 16, Qs(buf) + c0, lane);
      tc_abt<D, kCols / 8>(dp, Vs + warp * 16, Gs(buf) + c0, lane);
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = c0 + j * 8 + 2 * t + (i & 1), query = q0 + c, key = key0 + (i >> 1) * 8;
          const float p = masked && (query < key || query >= T)
                              ? 0.0f : exp2f(s[j][i] * scale_log2 - Ls[buf][c]);
          dp[j][i] = p * (dp[j][i] - Ds[buf][c]);  // dS^T
          s[j][i] = p;
        }
      uint32_t pa[kCols / 16][4], dsa[kCols / 16][4];
      tc_pack_a<kCols / 8>(pa, s);
      tc_pack_a<kCols / 8>(dsa, dp);
      tc_ab<D, kCols / 16>(dv, pa, Gs(buf) + c0, lane);
      tc_ab<D, kCols / 16>(dk, dsa, Qs(buf) + c0, lane);
    }
    __syncthreads();
  }
  bf16* dhead = dqkv + (int64_t)b * T * ld + h * D;
  tc_add_rows<D>(dhead + C, ld, dk, scale, key0, T, t);
  tc_add_rows<D>(dhead + 2 * C, ld, dv, 1.0f, key0, T, t);
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

template <class H, int D>
void flash_forward(H* out, float* lse, const H* qkv, int B, int T, int C, int NH,
                   cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kRows), B * NH);
  const float scale_log2 = kLog2e / sqrtf((float)D);
  auto* flash_forward_simt = &flash_forward_kernel<H, D>;
  GPUMIX_LAUNCH(flash_forward_simt, grid, Shape<D>::THREADS, 0, stream, out, lse, qkv, T, C, NH, scale_log2);
  CUDA_CHECK_LAST();
}

// The tensor-core kernels need 16-byte aligned qkv and dout rows (cp.async; C is a multiple of
// D, so every row start is aligned when the base is) and 4-byte aligned out / dqkv (two bf16
// per store); the SIMT kernels take the rest.
bool flash_tc_fits(int D, const void* a, const void* b, const void* pairs) {
  return (D == 64 || D == 128) && detail::aligned16(a) && detail::aligned16(b) &&
         ((uintptr_t)pairs & 3u) == 0;
}

// Dynamic shared memory over the 48 KiB default needs the kernel's opt-in (per launch: cheap,
// and right on whichever device is current).
template <class Kernel>
void tc_smem_opt_in(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int D>
void flash_forward_tc(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                      cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kTcRows), B * NH);
  const float scale_log2 = kLog2e / sqrtf((float)D);
  const size_t smem = 5 * (size_t)Tc<D>::TILE_BYTES;
  tc_smem_opt_in(flash_forward_tc_kernel<D>, smem);
  GPUMIX_LAUNCH(flash_forward_tc_kernel<D>, grid, 128, smem, stream, out, lse, qkv, T, C, NH,
                scale_log2);
  CUDA_CHECK_LAST();
}

template <int D>
void flash_backward_tc(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                       const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kTcRows), B * NH);
  const float scale = 1.0f / sqrtf((float)D);
  const float scale_log2 = kLog2e * scale;
  float* delta = (float*)detail::scratch_alloc(sizeof(float) * (size_t)B * NH * T, stream);
  const size_t smem_dq = 6 * (size_t)Tc<D>::TILE_BYTES;
  const size_t smem_dkv = smem_dq + 4 * kTcRows * sizeof(float);
  tc_smem_opt_in(flash_backward_dq_tc_kernel<D>, smem_dq);
  tc_smem_opt_in(flash_backward_dkv_tc_kernel<D>, smem_dkv);
  GPUMIX_LAUNCH(flash_backward_dq_tc_kernel<D>, grid, 128, smem_dq, stream, dqkv, delta, dout,
                qkv, out, lse, T, C, NH, scale, scale_log2);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(flash_backward_dkv_tc_kernel<D>, grid, 128, smem_dkv, stream, dqkv, delta, dout,
                qkv, lse, T, C, NH, scale, scale_log2);
  CUDA_CHECK_LAST();
  detail::scratch_free(delta, stream);
}

template <class H, int D>
void flash_backward(H* dqkv, const H* dout, const H* qkv, const H* out,
                    const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  const dim3 grid(detail::ceil_div(T, kRows), B * NH);
  const float scale = 1.0f / sqrtf((float)D);
  const float scale_log2 = kLog2e * scale;
  float* delta = (float*)detail::scratch_alloc(sizeof(float) * (size_t)B * NH * T, stream);
  auto* flash_backward_dq = &flash_backward_dq_kernel<H, D>;
  GPUMIX_LAUNCH(flash_backward_dq, grid, Shape<D>::THREADS, 0, stream, dqkv, delta, dout, qkv, out, lse, T, C, NH,
                scale, scale_log2);
  CUDA_CHECK_LAST();
  auto* flash_backward_dkv = &flash_backward_dkv_kernel<H, D>;
  GPUMIX_LAUNCH(flash_backward_dkv, grid, Shape<D>::THREADS, 0, stream, dqkv, delta, dout, qkv, lse, T, C, NH, scale,
                scale_log2);
  CUDA_CHECK_LAST();
  detail::scratch_free(delta, stream);
}

// ---- reference ------------------------------------------------------------------------------

// S (BH,T,T) = causal scores q.k * scale (masked: -inf).
template <class H>
__global__ void ref_scores_kernel(float* S, const H* qkv, int B, int T, int C, int NH,
                                  float scale) {
  const int HS = C / NH;
  const int64_t n = (int64_t)B * NH * T * T;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(e % T), i = (int)((e / T) % T);
    const int bh = (int)(e / ((int64_t)T * T)), b = bh / NH, h = bh % NH;
    float s = -INFINITY;
    if (j <= i) {
      const H* q = qkv + ((int64_t)b * T + i) * 3 * C + h * HS;
      const H* k = qkv + ((int64_t)b * T + j) * 3 * C + C + h * HS;
      float dot = 0.0f;
      for (int d = 0; d < HS; ++d) dot += to_f32(q[d]) * to_f32(k[d]);
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

template <class H>
__global__ void ref_out_kernel(H* out, const float* Pm, const H* qkv, int B, int T, int C,
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
      acc += p[j] * to_f32(qkv[((int64_t)b * T + j) * 3 * C + 2 * C + h * HS + d]);
    out[e] = from_f32<H>(acc);
  }
}

// dP (BH,T,T) = dO_i . v_j
template <class H>
__global__ void ref_dp_kernel(float* dP, const H* dout, const H* qkv, int B, int T, int C,
                              int NH) {
  const int HS = C / NH;
  const int64_t n = (int64_t)B * NH * T * T;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(e % T), i = (int)((e / T) % T);
    const int bh = (int)(e / ((int64_t)T * T)), b = bh / NH, h = bh % NH;
    const H* g = dout + ((int64_t)b * T + i) * C + h * HS;
    const H* v = qkv + ((int64_t)b * T + j) * 3 * C + 2 * C + h * HS;
    float dot = 0.0f;
    for (int d = 0; d < HS; ++d) dot += to_f32(g[d]) * to_f32(v[d]);
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
template <class H>
__global__ void ref_dqkv_kernel(H* dqkv, const float* dS, const float* Pm, const H* dout,
                                const H* qkv, int B, int T, int C, int NH, float scale) {
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
        acc += dS[(bhT + t) * T + j] * to_f32(qkv[((int64_t)b * T + j) * 3 * C + C + h * HS + d]);
      acc *= scale;
    } else if (which == 1) {  // dk_t = scale * sum_i dS_it q_i
      for (int i = t; i < T; ++i)
        acc += dS[(bhT + i) * T + t] * to_f32(qkv[((int64_t)b * T + i) * 3 * C + h * HS + d]);
      acc *= scale;
    } else {  // dv_t = sum_i P_it dO_i
      for (int i = t; i < T; ++i)
        acc += Pm[(bhT + i) * T + t] * to_f32(dout[((int64_t)b * T + i) * C + h * HS + d]);
    }
    dqkv[e] = from_f32<H>(to_f32(dqkv[e]) + acc);
  }
}

template <class H>
void attention_forward_t(H* out, float* lse, const H* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
  check_flash("attention_forward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  switch (C / NH) {
    case 16: flash_forward<H, 16>(out, lse, qkv, B, T, C, NH, stream); break;
    case 32: flash_forward<H, 32>(out, lse, qkv, B, T, C, NH, stream); break;
    case 64:
      if constexpr (kTcFormat<H>) {
        if (flash_tc_fits(64, qkv, qkv, out)) return flash_forward_tc<64>(out, lse, qkv, B, T, C, NH, stream);
      }
        flash_forward<H, 64>(out, lse, qkv, B, T, C, NH, stream);
      break;
    case 128:
      if constexpr (kTcFormat<H>) {
        if (flash_tc_fits(128, qkv, qkv, out)) return flash_forward_tc<128>(out, lse, qkv, B, T, C, NH, stream);
      }
        flash_forward<H, 128>(out, lse, qkv, B, T, C, NH, stream);
      break;
  }
}

template <class H>
void attention_backward_t(H* dqkv, const H* dout, const H* qkv, const H* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  check_flash("attention_backward", B, T, C, NH);
  if (B == 0 || T == 0 || dqkv == nullptr) return;
  switch (C / NH) {
    case 16: flash_backward<H, 16>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); break;
    case 32: flash_backward<H, 32>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); break;
    case 64:
      if constexpr (kTcFormat<H>) {
        if (flash_tc_fits(64, qkv, dout, dqkv))
          return flash_backward_tc<64>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
      }
        flash_backward<H, 64>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
      break;
    case 128:
      if constexpr (kTcFormat<H>) {
        if (flash_tc_fits(128, qkv, dout, dqkv))
          return flash_backward_tc<128>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
      }
        flash_backward<H, 128>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
      break;
  }
}

template <class H>
void attention_forward_ref_t(H* out, float* lse, const H* qkv, int B, int T, int C, int NH,
                           cudaStream_t stream) {
  check_shape("attention_forward_ref", B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int BH = B * NH;
  const float scale = 1.0f / sqrtf((float)(C / NH));
  const int64_t nTT = (int64_t)BH * T * T;
  float* S = (float*)detail::scratch_alloc(sizeof(float) * nTT, stream);
  auto* ref_scores = &ref_scores_kernel<H>;
  GPUMIX_LAUNCH(ref_scores, detail::grid_for(nTT, 256), 256, 0, stream, S, qkv, B, T, C, NH, scale);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_softmax_kernel, detail::grid_for((int64_t)BH * T, 128), 128, 0, stream, S, lse, BH, T);
  CUDA_CHECK_LAST();
  auto* ref_out = &ref_out_kernel<H>;
  GPUMIX_LAUNCH(ref_out, detail::grid_for((int64_t)B * T * C, 256), 256, 0, stream, out, S, qkv, B, T,
      C, NH);
  CUDA_CHECK_LAST();
  detail::scratch_free(S, stream);
}

template <class H>
void attention_backward_ref_t(H* dqkv, const H* dout, const H* qkv, const H* out,
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
  auto* ref_scores = &ref_scores_kernel<H>;
  GPUMIX_LAUNCH(ref_scores, detail::grid_for(nTT, 256), 256, 0, stream, Pm, qkv, B, T, C, NH, scale);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_softmax_kernel, detail::grid_for((int64_t)BH * T, 128), 128, 0, stream, Pm, nullptr, BH,
                                                                                 T);
  CUDA_CHECK_LAST();
  auto* ref_dp = &ref_dp_kernel<H>;
  GPUMIX_LAUNCH(ref_dp, detail::grid_for(nTT, 256), 256, 0, stream, dS, dout, qkv, B, T, C, NH);
  CUDA_CHECK_LAST();
  GPUMIX_LAUNCH(ref_ds_kernel, detail::grid_for((int64_t)BH * T, 128), 128, 0, stream, dS, Pm, BH, T);
  CUDA_CHECK_LAST();
  auto* ref_dqkv = &ref_dqkv_kernel<H>;
  GPUMIX_LAUNCH(ref_dqkv, detail::grid_for((int64_t)B * T * 3 * C, 256), 256, 0, stream, 
      dqkv, dS, Pm, dout, qkv, B, T, C, NH, scale);
  CUDA_CHECK_LAST();
  detail::scratch_free(dS, stream);
  detail::scratch_free(Pm, stream);
}

}  // namespace

bool attention_flash_supported(int HS) { return HS == 16 || HS == 32 || HS == 64 || HS == 128; }

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  attention_forward_t(out, lse, qkv, B, T, C, NH, stream);
}
void attention_forward(f16* out, float* lse, const f16* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  attention_forward_t(out, lse, qkv, B, T, C, NH, stream);
}
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, int B,
                        int T, int C, int NH, cudaStream_t stream) {
  attention_backward_t(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
}
void attention_backward(f16* dqkv, const f16* dout, const f16* qkv, const f16* out, const float* lse, int B,
                        int T, int C, int NH, cudaStream_t stream) {
  attention_backward_t(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
}
void attention_forward_ref(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                           cudaStream_t stream) {
  attention_forward_ref_t(out, lse, qkv, B, T, C, NH, stream);
}
void attention_forward_ref(f16* out, float* lse, const f16* qkv, int B, int T, int C, int NH,
                           cudaStream_t stream) {
  attention_forward_ref_t(out, lse, qkv, B, T, C, NH, stream);
}
void attention_backward_ref(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                            int B, int T, int C, int NH, cudaStream_t stream) {
  attention_backward_ref_t(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
}
void attention_backward_ref(f16* dqkv, const f16* dout, const f16* qkv, const f16* out, const float* lse,
                            int B, int T, int C, int NH, cudaStream_t stream) {
  attention_backward_ref_t(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
}

}  // namespace gpumix::kernels::cuda
