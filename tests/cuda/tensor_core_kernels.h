// Small kernels built on kernels/cuda/tensor_core.cuh, one per primitive, for
// tests/cuda/test_tensor_core.cpp (compiled by nvcc for a GPU, or as host C++ against the
// emulated device). Every pointer is device memory; bf16 values are passed as their bits.
// Each call launches on the legacy default stream and checks the launch.
#pragma once

#include <cstdint>

namespace gpumix::test::tc {

// D = A B + C over one m16n8k16 tile by one warp, the fragments built from global memory
// by the PTX ISA's layout: A (16, 16) row-major, B (16, 8) as [k][n], C and D (16, 8) fp32.
void mma_tile(float* d, const uint16_t* a, const uint16_t* b, const float* c);

// ldmatrix .x{num} (num 1, 2, 4), .trans or not, of src (num, 8, 8) b16 matrices placed in
// shared memory at a row stride of 48 bytes; out (32, num): lane l's registers.
void ldmatrix_registers(uint32_t* out, const uint16_t* src, int num, bool trans);

// Bugs a GEMM's fragment mapping can have, for the test that the comparison catches them.
enum class FragmentBug { none, a_lane_off_by_one, b_row_off_by_one };

// C (M, N) fp32 = A (M, K) B: A row-major; B as (N, K) when b_nk (ldmatrix), else (K, N)
// (ldmatrix .trans); 32 x 32 tiles of 4 warps, K in steps of 16 double-buffered by
// cp.async. M, N multiples of 32, K of 16.
void gemm(float* c, const uint16_t* a, const uint16_t* b, int M, int N, int K, bool b_nk,
          FragmentBug bug);

// cp.async by 64 threads, each copying 16 bytes into shared memory in three groups: src
// (3, 64, 8) bf16; group 0 by .cg, group 1 by .ca, group 2 by .cg of 8 source bytes
// (zero-filled). out (64, 3, 8): each thread's chunk of group g, read right after the
// wait_group that covers it (wait_group 2, 1, 0).
void cp_async_groups(uint16_t* out, const uint16_t* src);

// The warp intrinsics over 64 threads (2 warps), in (64) ints; out (64, 7) per thread:
// __shfl_sync from lane 5; __shfl_sync width 8 from segment lane 3; a __shfl_down_sync tree
// sum (offsets 16..1); __ballot_sync(in > 0); on lanes 0..15 only (mask 0xffff): the
// __ballot_sync and a __shfl_down_sync width-16 tree sum (offsets 8..1), 0 elsewhere; and
// the value of lane 31 - l read from shared memory after __syncwarp.
void warp_intrinsics(int* out, const int* in);

}  // namespace gpumix::test::tc
