// Tensor-core primitives: the Ampere/Hopper (sm_80+) warp-level instructions of GPUMix's
// tensor-core kernels, one small function each. Two implementations, one interface:
// - nvcc: inline PTX, for sm_80 and newer (an older target is a compile error, never a silent
//   fallback);
// - the emulated build (GPUMIX_CUDA_EMULATOR): kernels/cuda_emulator/ptx.h, which follows the
//   PTX ISA's fragment layouts (cited there), runs mma and ldmatrix as warp collectives and
//   faults on what hardware would not run (a lane missing or elsewhere, a misaligned or
//   non-shared address); cp.async's destination reads as NaN until its wait_group.
// The warp intrinsics these kernels use with them (__shfl_sync, __shfl_down_sync,
// __shfl_xor_sync, __ballot_sync, __syncwarp) are CUDA's own (device_language.h emulates them).
//
// Fragments (PTX ISA 9.7.14.5.8, mma.m16n8k16 .bf16; g = lane / 4, t = lane % 4; a register
// holds two bf16, the lower column (A, C) or row (B) in the lower 16 bits):
//   A 16x16 row-major   a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
//                       a[2] = A[g][2t+8..+9]    a[3] = A[g+8][2t+8..+9]
//   B 16x8 (K x N)      b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
//   C, D 16x8 fp32      c[0..1] = C[g][2t..2t+1] c[2..3] = C[g+8][2t..2t+1]
// ldmatrix gives exactly these from shared memory (PTX ISA 9.7.14.5.15; lane l supplies the
// address of row l % 8 of matrix l / 8, 16-byte aligned):
//   A tile [16][16] row-major, stride ld:  ldmatrix<4>(a, &A[l % 16][(l / 16) * 8])
//   B stored as N x K ([n][k], e.g. K in Q K^T):  ldmatrix<2>(b, &Bt[l % 8][(l / 8 % 2) * 8])
//   B stored as K x N ([k][n], e.g. V in P V):    ldmatrix_trans<2>(b, &B[l % 16][0])
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

#if defined(GPUMIX_CUDA_EMULATOR)
#include "kernels/cuda_emulator/ptx.h"
// The caller's file and line for the emulator's messages (g++ and clang builtins).
#define GPUMIX_PTX_SITE , const char *gpumix_file = __builtin_FILE(), int gpumix_line = __builtin_LINE()
#define GPUMIX_PTX_SITE_ONLY const char *gpumix_file = __builtin_FILE(), int gpumix_line = __builtin_LINE()
#else
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "kernels/cuda/tensor_core.cuh needs sm_80 or newer (mma bf16, ldmatrix, cp.async): set -Dgpu_archs"
#endif
#define GPUMIX_PTX_SITE
#define GPUMIX_PTX_SITE_ONLY
#endif

namespace gpumix::kernels::cuda::detail {

// Two fp32 rounded to bf16 (as kernels/half_types.h: nearest, ties to even) in one register.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) { return pack2<bf16>(lo, hi); }
__device__ __forceinline__ float bf16x2_lo(uint32_t r) { return __uint_as_float(r << 16); }
__device__ __forceinline__ float bf16x2_hi(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }

#if !defined(GPUMIX_CUDA_EMULATOR)
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

// d = a b + c over one 16x8x16 tile, fp32 accumulation; the whole warp, converged. d may be c.
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2],
                                               const float (&c)[4] GPUMIX_PTX_SITE) {
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::mma_m16n8k16_bf16(d, a, b, c, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#endif
}

// N (1, 2, 4) 8x8 b16 matrices from shared memory, matrix m's rows at the addresses of lanes
// 8m..8m+7 (each 16 bytes, 16-byte aligned); lane l gets r[m] = row l/4, columns 2(l%4), +1.
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}.shared.b16
template <int N>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void* row GPUMIX_PTX_SITE) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix: .x1, .x2 or .x4");
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::ldmatrix_m8n8(r, N, false, row, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  const uint32_t s = smem_addr(row);
  if constexpr (N == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#endif
}

// The same, transposed: lane l gets r[m] = elements [2(l%4)][l/4] and [2(l%4)+1][l/4].
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}.trans.shared.b16
template <int N>
__device__ __forceinline__ void ldmatrix_trans(uint32_t (&r)[N], const void* row GPUMIX_PTX_SITE) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix: .x1, .x2 or .x4");
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::ldmatrix_m8n8(r, N, true, row, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  const uint32_t s = smem_addr(row);
  if constexpr (N == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(s));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#endif
}

// 16 bytes global -> shared, asynchronously, per thread; both 16-byte aligned. Complete (and
// visible to this thread) only after a cp_async_wait covering its group; to the block after
// that and a __syncthreads(). cg: cached in L2 only (streamed tiles); ca: in L1 too.
// cp.async.cg.shared.global [dst], [src], 16
__device__ __forceinline__ void cp_async_cg16(void* smem_dst, const void* gmem_src GPUMIX_PTX_SITE) {
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::cp_async_16(smem_dst, gmem_src, 16, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src)
               : "memory");
#endif
}
// The same, reading only src_bytes (0..16) and zero-filling the rest: rows past a tensor's end
// (src_bytes 0 reads nothing; gmem_src must still be an aligned address).
// cp.async.cg.shared.global [dst], [src], 16, src_bytes
__device__ __forceinline__ void cp_async_cg16_zfill(void* smem_dst, const void* gmem_src,
                                                    int src_bytes GPUMIX_PTX_SITE) {
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::cp_async_16(smem_dst, gmem_src, src_bytes, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
#endif
}
// cp.async.ca.shared.global [dst], [src], 16
__device__ __forceinline__ void cp_async_ca16(void* smem_dst, const void* gmem_src GPUMIX_PTX_SITE) {
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::cp_async_16(smem_dst, gmem_src, 16, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)),
               "l"(gmem_src)
               : "memory");
#endif
}

// Closes this thread's group of the cp.asyncs issued since the last commit (maybe none).
// cp.async.commit_group
__device__ __forceinline__ void cp_async_commit(GPUMIX_PTX_SITE_ONLY) {
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::cp_async_commit_group(gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are pending (the newest N).
// cp.async.wait_group N
template <int N>
__device__ __forceinline__ void cp_async_wait(GPUMIX_PTX_SITE_ONLY) {
  static_assert(N >= 0, "cp.async.wait_group N: N >= 0");
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::cp_async_wait_group(N, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Commits the pending cp.asyncs and waits for all of this thread's groups.
// cp.async.wait_all (= cp.async.commit_group; cp.async.wait_group 0)
__device__ __forceinline__ void cp_async_wait_all(GPUMIX_PTX_SITE_ONLY) {
#if defined(GPUMIX_CUDA_EMULATOR)
  ::cuda_emulator::ptx::cp_async_commit_group(gpumix_file, gpumix_line);
  ::cuda_emulator::ptx::cp_async_wait_group(0, gpumix_file, gpumix_line);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace gpumix::kernels::cuda::detail

#undef GPUMIX_PTX_SITE
#undef GPUMIX_PTX_SITE_ONLY
