// Internal to kernels/cpu: small single-threaded fp32 GEMMs on tiles that sit in a thread's
// cache, for the fused kernels (attention), which run one tile product after another
// inside their own OpenMP tasks (a oneDNN call per 64 x 64 tile costs more than the
// product).
//
//   c (m, n) = a (m, k) @ b (k, n)      (accumulate: c += ...)
//
// a's element (i, l) is at a[i * a_rs + l * a_cs], so a transposed tile is the same
// memory with the strides swapped; b is row-major with leading dimension ldb; c has ldc.
#pragma once

#include <cstdint>

#include "kernels/half_types.h"

#include "kernels/cpu/isa.h"

namespace gpumix::kernels::cpu {

void tile_gemm_portable(int m, int n, int k, const float* a, int64_t a_rs, int64_t a_cs,
                        const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);
// AVX-512 F: register blocks of 4 rows x 64 columns, masked at the edges.
GPUMIX_TARGET_AVX512 void tile_gemm_avx512(int m, int n, int k, const float* a, int64_t a_rs,
                                           int64_t a_cs, const float* b, int64_t ldb, float* c,
                                           int64_t ldc, bool accumulate);

// bf16 operands, fp32 products and accumulation (AVX-512 BF16 vdpbf16ps: 32 products a
// step). a is read in pairs along k (k even; a padding element of an odd k zero): the pair
// (i, l / 2) is the two bf16 at a[i * a_rs + (l / 2) * a_ps], so a row-major a has
// a_rs = lda, a_ps = 2, and the transpose of a tile packed in pairs along its rows (as b
// below) has a_rs = 2, a_ps = its ldb; b is packed in pairs along k: element (l, j) at
// b[(l / 2) * ldb + 2 j + l % 2] (ldb >= 2 n; a padding row of an odd k zero).
GPUMIX_TARGET_AVX512_BF16 void tile_gemm_bf16(int m, int n, int k, const bf16* a, int64_t a_rs,
                                              int64_t a_ps, const bf16* b, int64_t ldb, float* c,
                                              int64_t ldc, bool accumulate);

// The two fp32 ones as policies, for kernel bodies written once over the path.
struct TilePortable {
  static void gemm(int m, int n, int k, const float* a, int64_t a_rs, int64_t a_cs,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    tile_gemm_portable(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
  }
};
struct TileAvx512 {
  GPUMIX_TARGET_AVX512 static void gemm(int m, int n, int k, const float* a, int64_t a_rs,
                                        int64_t a_cs, const float* b, int64_t ldb, float* c,
                                        int64_t ldc, bool accumulate) {
    tile_gemm_avx512(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
  }
};

}  // namespace gpumix::kernels::cpu
