#include "kernels/cpu/tile_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace gpumix::kernels::cpu {

void tile_gemm_portable(int m, int n, int k, const float* a, int64_t a_rs, int64_t a_cs,
                        const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int i = 0; i < m; i++) {
    float* ci = c + i * ldc;
    if (!accumulate) std::fill(ci, ci + n, 0.0f);
    for (int l = 0; l < k; l++) {
      const float ail = a[i * a_rs + l * a_cs];
      const float* bl = b + l * ldb;
#pragma omp simd
      for (int j = 0; j < n; j++) ci[j] += ail * bl[j];
    }
  }
}

namespace {

// One register block: MR rows x NV vectors of 16 columns, the last vector masked by
// `last`. Per step of l: NV loads of b, MR broadcasts of a, MR * NV FMAs.
template <int MR, int NV>
GPUMIX_TARGET_AVX512 inline void block(int k, const float* a, int64_t a_rs, int64_t a_cs,
                                       const float* b, int64_t ldb, float* c, int64_t ldc,
                                       bool accumulate, __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      acc[i][v] = accumulate ? _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, c + i * ldc + 16 * v)
                             : _mm512_setzero_ps();
  for (int l = 0; l < k; l++) {
    const float* bl = b + l * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) bv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, bl + 16 * v);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      const __m512 ai = _mm512_set1_ps(a[i * a_rs + l * a_cs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      _mm512_mask_storeu_ps(c + i * ldc + 16 * v, v == NV - 1 ? last : 0xffff, acc[i][v]);
}

template <int MR>
GPUMIX_TARGET_AVX512 inline void block_row(int nv, int k, const float* a, int64_t a_rs,
                                           int64_t a_cs, const float* b, int64_t ldb, float* c,
                                           int64_t ldc, bool accumulate, __mmask16 last) {
  switch (nv) {
    case 1: block<MR, 1>(k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, last); break;
    case 2: block<MR, 2>(k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, last); break;
    case 3: block<MR, 3>(k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, last); break;
    default: block<MR, 4>(k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, last); break;
  }
}

}  // namespace

GPUMIX_TARGET_AVX512 void tile_gemm_avx512(int m, int n, int k, const float* a, int64_t a_rs,
                                           int64_t a_cs, const float* b, int64_t ldb, float* c,
                                           int64_t ldc, bool accumulate) {
  for (int j0 = 0; j0 < n; j0 += 64) {
    const int nj = std::min(64, n - j0);
    const int nv = (nj + 15) / 16, tail = nj - 16 * (nv - 1);
    const __mmask16 last = (__mmask16)(tail == 16 ? 0xffff : (1u << tail) - 1);
    for (int i0 = 0; i0 < m; i0 += 4) {
      const float* ai = a + i0 * a_rs;
      float* ci = c + i0 * ldc + j0;
      switch (std::min(4, m - i0)) {
        case 1: block_row<1>(nv, k, ai, a_rs, a_cs, b + j0, ldb, ci, ldc, accumulate, last); break;
        case 2: block_row<2>(nv, k, ai, a_rs, a_cs, b + j0, ldb, ci, ldc, accumulate, last); break;
        case 3: block_row<3>(nv, k, ai, a_rs, a_cs, b + j0, ldb, ci, ldc, accumulate, last); break;
        default: block_row<4>(nv, k, ai, a_rs, a_cs, b + j0, ldb, ci, ldc, accumulate, last); break;
      }
    }
  }
}

namespace {

// As block above, over pairs of k: per pair, NV loads of 16 column pairs of b, MR
// broadcasts of a's pair, MR * NV vdpbf16ps.
template <int MR, int NV>
GPUMIX_TARGET_AVX512_BF16 inline void block_bf16(int kp, const bf16* a, int64_t a_rs, int64_t a_ps,
                                                 const bf16* b, int64_t ldb, float* c,
                                                 int64_t ldc, bool accumulate, __mmask16 last) {
  // The pairs of the last vector's columns: two bf16 lanes per column.
  const int tail = __builtin_popcount(last);
  const __mmask32 lastb = tail == 16 ? 0xffffffffu : (__mmask32)((1u << (2 * tail)) - 1);
  __m512 acc[MR][NV];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      acc[i][v] = accumulate ? _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, c + i * ldc + 16 * v)
                             : _mm512_setzero_ps();
  for (int p = 0; p < kp; p++) {
    const bf16* bp = b + p * ldb;
    __m512i bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      bv[v] = _mm512_maskz_loadu_epi16(v == NV - 1 ? lastb : 0xffffffffu, bp + 32 * v);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      int32_t pair;
      std::memcpy(&pair, a + i * a_rs + p * a_ps, 4);
      const __m512i ai = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)ai, (__m512bh)bv[v]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      _mm512_mask_storeu_ps(c + i * ldc + 16 * v, v == NV - 1 ? last : 0xffff, acc[i][v]);
}

template <int MR>
GPUMIX_TARGET_AVX512_BF16 inline void block_row_bf16(int nv, int kp, const bf16* a, int64_t a_rs,
                                                     int64_t a_ps, const bf16* b, int64_t ldb, float* c,
                                                     int64_t ldc, bool accumulate, __mmask16 last) {
  switch (nv) {
    case 1: block_bf16<MR, 1>(kp, a, a_rs, a_ps, b, ldb, c, ldc, accumulate, last); break;
    case 2: block_bf16<MR, 2>(kp, a, a_rs, a_ps, b, ldb, c, ldc, accumulate, last); break;
    case 3: block_bf16<MR, 3>(kp, a, a_rs, a_ps, b, ldb, c, ldc, accumulate, last); break;
    default: block_bf16<MR, 4>(kp, a, a_rs, a_ps, b, ldb, c, ldc, accumulate, last); break;
  }
}

}  // namespace

GPUMIX_TARGET_AVX512_BF16 void tile_gemm_bf16(int m, int n, int k, const bf16* a, int64_t a_rs,
                                              int64_t a_ps, const bf16* b, int64_t ldb, float* c,
                                              int64_t ldc, bool accumulate) {
  const int kp = (k + 1) / 2;
  for (int j0 = 0; j0 < n; j0 += 64) {
    const int nj = std::min(64, n - j0);
    const int nv = (nj + 15) / 16, tail = nj - 16 * (nv - 1);
    const __mmask16 last = (__mmask16)(tail == 16 ? 0xffff : (1u << tail) - 1);
    const bf16* bj = b + 2 * j0;
    for (int i0 = 0; i0 < m; i0 += 4) {
      const bf16* ai = a + i0 * a_rs;
      float* ci = c + i0 * ldc + j0;
      switch (std::min(4, m - i0)) {
        case 1: block_row_bf16<1>(nv, kp, ai, a_rs, a_ps, bj, ldb, ci, ldc, accumulate, last); break;
        case 2: block_row_bf16<2>(nv, kp, ai, a_rs, a_ps, bj, ldb, ci, ldc, accumulate, last); break;
        case 3: block_row_bf16<3>(nv, kp, ai, a_rs, a_ps, bj, ldb, ci, ldc, accumulate, last); break;
        default: block_row_bf16<4>(nv, kp, ai, a_rs, a_ps, bj, ldb, ci, ldc, accumulate, last); break;
      }
    }
  }
}

}  // namespace gpumix::kernels::cpu
