// Kernels of tests/cuda/test_tensor_core.cpp: each primitive of kernels/cuda/tensor_core.cuh
// in a small kernel, and a GEMM built from ldmatrix, mma and cp.async (tensor_core_kernels.h).
#include "tests/cuda/tensor_core_kernels.h"

#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace gpumix::test::tc {

using gpumix::kernels::cuda::bf16;
using namespace gpumix::kernels::cuda::detail;

namespace {

__global__ void mma_tile_kernel(float* D, const bf16* A, const bf16* B, const float* C) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i % 2) * 8, col = 2 * t + (i / 2) * 8;
    a[i] = (uint32_t)A[row * 16 + col].bits | (uint32_t)A[row * 16 + col + 1].bits << 16;
  }
  for (int i = 0; i < 2; ++i) {
    const int k = 2 * t + i * 8;
    b[i] = (uint32_t)B[k * 8 + g].bits | (uint32_t)B[(k + 1) * 8 + g].bits << 16;
  }
  for (int i = 0; i < 4; ++i) c[i] = C[(g + (i / 2) * 8) * 8 + 2 * t + i % 2];
  mma_bf16_16816(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[(g + (i / 2) * 8) * 8 + 2 * t + i % 2] = d[i];
}

template <int N, bool Trans>
__global__ void ldmatrix_kernel(uint32_t* out, const bf16* src) {
  // Rows of 8 b16 at a stride of 24 (48 bytes): each lane's row address is its own.
  GPUMIX_SHARED(bf16, sh, [4 * 8][24]);
  const int l = threadIdx.x;
  for (int i = l; i < N * 64; i += 32) sh[i / 8][i % 8] = src[i];
  __syncwarp();
  uint32_t r[N];
  if (Trans)
    ldmatrix_trans<N>(r, &sh[l % (8 * N)][0]);
  else
    ldmatrix<N>(r, &sh[l % (8 * N)][0]);
  for (int m = 0; m < N; ++m) out[l * N + m] = r[m];
}

constexpr int kTile = 32;        // block tile of C: 4 warps of 16 x 16
constexpr int kStrideNK = 24;    // B tile as [n][k]: 16 k + 8 padding (rows 48 bytes apart)
constexpr int kStrideKN = 40;    // B tile as [k][n]: 32 n + 8 padding (80 bytes)

__global__ void gemm_kernel(float* C, const bf16* A, const bf16* B, int M, int N, int K,
                            bool b_nk, FragmentBug bug) {
  GPUMIX_SHARED(bf16, sa, [2][kTile][kStrideNK]);
  GPUMIX_SHARED(bf16, sb, [2][kTile * kStrideNK]);  // >= 16 * kStrideKN
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  const int wm = (warp / 2) * 16, wn = (warp % 2) * 16;
  (void)M;
  // One stage: 64 chunks of 16 bytes of A (threads 0..63) and of B (64..127), one group.
  auto load = [&](int stage, int k0) {
    if (tid < 64) {
      const int r = tid / 2, c = (tid % 2) * 8;
      cp_async_cg16(&sa[stage][r][c], A + (size_t)(m0 + r) * K + k0 + c);
    } else if (b_nk) {
      const int r = (tid - 64) / 2, c = (tid % 2) * 8;
      cp_async_cg16(&sb[stage][r * kStrideNK + c], B + (size_t)(n0 + r) * K + k0 + c);
    } else {
      const int r = (tid - 64) / 4, c = (tid % 4) * 8;
      cp_async_ca16(&sb[stage][r * kStrideKN + c], B + (size_t)(k0 + r) * N + n0 + c);
    }
    cp_async_commit();
  };
  float acc[2][4] = {};
  const int steps = K / 16;
  load(0, 0);
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) {
      load((s + 1) % 2, (s + 1) * 16);
      cp_async_wait<1>();  // stage s landed; s + 1 may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int st = s % 2;
    uint32_t a[4];
    const int arow = bug == FragmentBug::a_lane_off_by_one ? (lane + 1) % 16 : lane % 16;
    ldmatrix<4>(a, &sa[st][wm + arow][(lane / 16) * 8]);
    for (int j = 0; j < 2; ++j) {
      uint32_t b[2];
      if (b_nk) {
        const int n = wn + j * 8 + (bug == FragmentBug::b_row_off_by_one ? (lane + 1) % 8 : lane % 8);
        ldmatrix<2>(b, &sb[st][n * kStrideNK + (lane / 8 % 2) * 8]);
      } else {
        const int k = bug == FragmentBug::b_row_off_by_one ? (lane + 1) % 16 : lane % 16;
        ldmatrix_trans<2>(b, &sb[st][k * kStrideKN + wn + j * 8]);
      }
      mma_bf16_16816(acc[j], a, b, acc[j]);
    }
    __syncthreads();  // the next stage's copies overwrite this one
  }
  const int g = lane / 4, t = lane % 4;
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 4; ++i)
      C[(size_t)(m0 + wm + g + (i / 2) * 8) * N + n0 + wn + j * 8 + 2 * t + i % 2] = acc[j][i];
}

__global__ void cp_async_kernel(Half8<bf16>* out, const Half8<bf16>* src) {
  using Bf16x8 = Half8<bf16>;  // one 16-byte word
  GPUMIX_SHARED(Bf16x8, sh, [3][64]);
  const int t = threadIdx.x;
  cp_async_cg16(&sh[0][t], &src[t]);
  cp_async_commit();
  cp_async_ca16(&sh[1][t], &src[64 + t]);
  cp_async_commit();
  cp_async_cg16_zfill(&sh[2][t], &src[128 + t], 8);
  cp_async_commit();
  cp_async_wait<2>();
  out[t * 3 + 0] = sh[0][t];
  cp_async_wait<1>();
  out[t * 3 + 1] = sh[1][t];
  cp_async_wait<0>();
  out[t * 3 + 2] = sh[2][t];
}

__global__ void warp_intrinsics_kernel(int* out, const int* in) {
  GPUMIX_SHARED(int, sh, [64]);
  const int t = threadIdx.x, l = t % 32;
  const int v = in[t];
  const int from5 = __shfl_sync(0xffffffffu, v, 5);
  const int seg3 = __shfl_sync(0xffffffffu, v, 3, 8);
  int sum = v;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  const unsigned vote = __ballot_sync(0xffffffffu, v > 0);
  unsigned half_vote = 0;
  int half_sum = 0;
  if (l < 16) {
    half_vote = __ballot_sync(0x0000ffffu, v > 0);
    half_sum = v;
    for (int o = 8; o > 0; o >>= 1) half_sum += __shfl_down_sync(0x0000ffffu, half_sum, o, 16);
  }
  sh[t] = v;
  __syncwarp();
  const int mirror = sh[t - l + 31 - l];
  int* o = out + t * 7;
  o[0] = from5;
  o[1] = seg3;
  o[2] = sum;
  o[3] = (int)vote;
  o[4] = (int)half_vote;
  o[5] = half_sum;
  o[6] = mirror;
}

}  // namespace

void mma_tile(float* d, const uint16_t* a, const uint16_t* b, const float* c) {
  GPUMIX_LAUNCH(mma_tile_kernel, 1, 32, 0, nullptr, d, (const bf16*)a, (const bf16*)b, c);
  CUDA_CHECK_LAST();
}

void ldmatrix_registers(uint32_t* out, const uint16_t* src, int num, bool trans) {
  void (*k)(uint32_t*, const bf16*) = nullptr;
  if (num == 1) k = trans ? &ldmatrix_kernel<1, true> : &ldmatrix_kernel<1, false>;
  if (num == 2) k = trans ? &ldmatrix_kernel<2, true> : &ldmatrix_kernel<2, false>;
  if (num == 4) k = trans ? &ldmatrix_kernel<4, true> : &ldmatrix_kernel<4, false>;
  if (k == nullptr) throw std::invalid_argument("ldmatrix_registers: num is 1, 2 or 4");
  GPUMIX_LAUNCH(k, 1, 32, 0, nullptr, out, (const bf16*)src);
  CUDA_CHECK_LAST();
}

void gemm(float* c, const uint16_t* a, const uint16_t* b, int M, int N, int K, bool b_nk,
          FragmentBug bug) {
  if (M % kTile || N % kTile || K % 16 || K <= 0)
    throw std::invalid_argument("tc::gemm: M, N multiples of 32 and K of 16");
  GPUMIX_LAUNCH(gemm_kernel, dim3(N / kTile, M / kTile), 128, 0, nullptr, c, (const bf16*)a, (const bf16*)b, M, N,
                K, b_nk, bug);
  CUDA_CHECK_LAST();
}

void cp_async_groups(uint16_t* out, const uint16_t* src) {
  GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, (Half8<bf16>*)out, (const Half8<bf16>*)src);
  CUDA_CHECK_LAST();
}

void warp_intrinsics(int* out, const int* in) {
  GPUMIX_LAUNCH(warp_intrinsics_kernel, 1, 64, 0, nullptr, out, in);
  CUDA_CHECK_LAST();
}

}  // namespace gpumix::test::tc
