// The emulated CUDA device's PTX instructions: what kernels/cuda/tensor_core.cuh runs in the
// emulated build where nvcc would emit inline PTX. Included by that header only.
//
// Each function takes the caller's file and line (tensor_core.cuh passes its own caller's) and
// is implemented in device.cpp on the block's fibers:
// - mma and ldmatrix are warp-collective (.sync.aligned): all 32 lanes of the warp must exist,
//   be alive and reach the same instruction at the same call site; the last lane to arrive
//   gathers every lane's fragment as the PTX ISA lays it out, computes, and scatters the
//   results. A lane that exits, waits elsewhere (a barrier, a shuffle, another instruction)
//   or a warp with fewer than 32 threads is a device fault, as is an ldmatrix row address
//   outside the block's shared memory or not 16-byte aligned.
// - cp.async is per thread: the source is read at the issue and the destination poisoned
//   (0xff bytes); the bytes land when the issuing thread's cp.async.wait_group (or wait_all)
//   covers their group. A kernel that reads the destination before that reads NaN. The source
//   must be device memory and the destination the block's shared memory, both 16-byte
//   aligned; else a device fault.
// A device fault prints the kernel, its launch site, the block and thread, and the call site,
// then aborts (launch.h).
#pragma once

#include <cstdint>

namespace cuda_emulator::ptx {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + c (d may be c).
void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c,
                       const char* file, int line);
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16: num = 1, 2 or 4 registers.
void ldmatrix_m8n8(uint32_t* r, int num, bool trans, const void* row, const char* file, int line);
// cp.async.{ca,cg}.shared.global [dst], [src], 16, src_bytes: src_bytes in [0, 16] read, the
// rest of the 16 zero-filled.
void cp_async_16(void* dst, const void* src, int src_bytes, const char* file, int line);
void cp_async_commit_group(const char* file, int line);
// cp.async.wait_group n (cp.async.wait_all is commit_group then wait_group 0).
void cp_async_wait_group(int n, const char* file, int line);

}  // namespace cuda_emulator::ptx
