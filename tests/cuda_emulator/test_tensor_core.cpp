// The emulated device's tensor-core instructions (kernels/cuda_emulator/ptx.h through
// kernels/cuda/tensor_core.cuh) and warp intrinsics fail as hardware would: a warp that is not
// whole or not converged at mma / ldmatrix, a mask that does not match, a misaligned or
// non-shared address, and a read of cp.async's destination before its wait (NaN). Their
// results against plain products are tests/cuda/test_tensor_core.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/tensor_core.cuh"
#include "kernels/cuda_emulator/emulator.h"

namespace {

using namespace gpumix::kernels::cuda::detail;

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc((void**)&p, sizeof(T) * n), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, sizeof(T) * n), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

class EmulatedTensorCore : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the process has worker threads
    (void)cudaGetLastError();
  }
};

#define EXPECT_DEVICE_FAULT(launch, pattern) \
  EXPECT_DEATH(                              \
      {                                      \
        launch;                              \
        cudaDeviceSynchronize();             \
      },                                     \
      pattern)

// ---- mma: the whole warp, converged -------------------------------------------------------

// Lanes below `active` run one mma; `split` >= 0 sends lanes >= split to a second mma call
// site (the same instruction elsewhere: divergence); `shuffle_lane` >= 0 sends that lane to a
// shuffle instead.
__global__ void mma_kernel(float* out, int active, int split, int shuffle_lane) {
  const int l = threadIdx.x % 32;
  if (l >= active) return;
  const uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};  // 1.0 bf16
  const uint32_t b[2] = {0x3f803f80u, 0x3f803f80u};
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (l == shuffle_lane) {
    d[0] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  } else if (split >= 0 && l >= split) {
    mma_bf16_16816(d, a, b, d);
  } else {
    mma_bf16_16816(d, a, b, d);
  }
  out[threadIdx.x] = d[0];
}

TEST_F(EmulatedTensorCore, MmaOfAWholeWarpRuns) {
  Dev<float> out(64);
  GPUMIX_LAUNCH(mma_kernel, 1, 64, 0, nullptr, out.p, 32, -1, -1);
  for (float v : out.get()) EXPECT_EQ(v, 16.0f);  // 16 products of 1 * 1
}

TEST_F(EmulatedTensorCore, MmaInAWarpOfFewerThan32ThreadsIsRefused) {
  Dev<float> out(48);
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(mma_kernel, 1, 48, 0, nullptr, out.p, 32, -1, -1),
                      "device fault in kernel mma_kernel .*block \\(0,0,0\\) thread \\([0-9]+,0,0\\): "
                      "the warp has 16 lanes .*needs all 32 lanes.*mma.sync.aligned.m16n8k16.*"
                      "test_tensor_core.cpp:[0-9]+");
}

TEST_F(EmulatedTensorCore, MmaWithExitedLanesIsRefused) {
  Dev<float> out(32);
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(mma_kernel, 1, 32, 0, nullptr, out.p, 31, -1, -1),
                      "device fault in kernel mma_kernel.*(lanes of its warp have exited|returned "
                      "while lanes of its warp wait in mma)");
}

TEST_F(EmulatedTensorCore, MmaAtTwoCallSitesIsADivergentWarp) {
  Dev<float> out(32);
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(mma_kernel, 1, 32, 0, nullptr, out.p, 32, 16, -1),
                      "device fault in kernel mma_kernel.*divergent warp: lane [0-9]+ waits in "
                      "mma.sync.aligned.*test_tensor_core.cpp:[0-9]+.*this lane reached mma.*"
                      "test_tensor_core.cpp:[0-9]+");
}

TEST_F(EmulatedTensorCore, MmaAgainstAShuffleIsADivergentWarp) {
  Dev<float> out(32);
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(mma_kernel, 1, 32, 0, nullptr, out.p, 32, -1, 7),
                      "device fault in kernel mma_kernel.*divergent warp.*(mma.sync|__shfl_xor_sync)");
}

// ---- ldmatrix: 16-byte aligned rows in shared memory ---------------------------------------

// Row addresses from shared memory at `offset` bytes past 16-byte aligned rows, or from the
// global buffer `global` when given.
__global__ void ldmatrix_address_kernel(uint32_t* out, const uint16_t* global, int offset) {
  GPUMIX_SHARED(uint16_t, sh, [16][16]);
  const int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) sh[i / 16][i % 16] = (uint16_t)i;
  __syncwarp();
  const char* row = global ? (const char*)(global + (l % 8) * 8) : (const char*)&sh[l % 8][0] + offset;
  uint32_t r[1];
  ldmatrix<1>(r, row);
  out[l] = r[0];
}

TEST_F(EmulatedTensorCore, LdmatrixRowsAreRead) {
  Dev<uint32_t> out(32);
  GPUMIX_LAUNCH(ldmatrix_address_kernel, 1, 32, 0, nullptr, out.p, nullptr, 0);
  const std::vector<uint32_t> got = out.get();
  for (int l = 0; l < 32; ++l) {
    const uint32_t e = (uint32_t)((l / 4) * 16 + 2 * (l % 4));
    EXPECT_EQ(got[l], e | (e + 1) << 16) << l;
  }
}

TEST_F(EmulatedTensorCore, LdmatrixMisalignedRowIsRefused) {
  Dev<uint32_t> out(32);
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(ldmatrix_address_kernel, 1, 32, 0, nullptr, out.p, nullptr, 8),
      "device fault in kernel ldmatrix_address_kernel.*thread \\(0,0,0\\): row address .* "
      "\\(matrix 0, row 0\\) is not 16-byte aligned \\(ldmatrix.sync.aligned.m8n8.x1.shared.b16 at "
      ".*test_tensor_core.cpp:[0-9]+\\)");
}

TEST_F(EmulatedTensorCore, LdmatrixFromGlobalMemoryIsRefused) {
  Dev<uint32_t> out(32);
  Dev<uint16_t> global(64);
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(ldmatrix_address_kernel, 1, 32, 0, nullptr, out.p, global.p, 0),
      "device fault in kernel ldmatrix_address_kernel.*row address .* is not in the block's "
      "shared memory");
}

// ---- cp.async ------------------------------------------------------------------------------

// Each of 64 threads copies 16 bytes; `wait` false reads the destination before the wait
// (the bug), `src_offset` / `dst_offset` misalign, `to_global` copies to global memory,
// `host_src` (an address the launcher does not see as a pointer) copies from host memory.
__global__ void cp_async_kernel(float* out, const float* src, bool wait, int src_offset,
                                int dst_offset, float* to_global, uintptr_t host_src) {
  GPUMIX_SHARED(float, sh, [64 * 4 + 4]);
  const int t = threadIdx.x;
  void* dst = to_global ? (void*)(to_global + 4 * t) : (void*)((char*)&sh[4 * t] + dst_offset);
  if (host_src) src = reinterpret_cast<const float*>(host_src);
  cp_async_cg16(dst, (const char*)(src + 4 * t) + src_offset);
  if (wait) cp_async_wait_all();
  __syncthreads();
  for (int i = 0; i < 4; ++i) out[4 * t + i] = sh[4 * ((t + 1) % 64) + i];  // a neighbour's copy
}

bool all_ones(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u == 0xffffffffu;
}

TEST_F(EmulatedTensorCore, CpAsyncDestinationIsPoisonUntilItsWait) {
  std::vector<float> h(256);
  for (int i = 0; i < 256; ++i) h[i] = (float)i;
  Dev<float> src(256), out(256);
  ASSERT_EQ(cudaMemcpy(src.p, h.data(), 1024, cudaMemcpyHostToDevice), cudaSuccess);
  GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, true, 0, 0, nullptr, 0);
  std::vector<float> got = out.get();
  for (int i = 0; i < 256; ++i) ASSERT_EQ(got[i], (float)((i + 4) % 256)) << i;
  if (!cuda_emulator::racecheck_hooks_here)
    GTEST_SKIP() << "built with -Demulated_racecheck=false: the race detector does not see "
                    "plain loads and stores";
  // Without the wait, the race detector names the read of a copy in flight...
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, false, 0, 0, nullptr, 0),
      "device fault in kernel cp_async_kernel.*shared-memory race \\(cp.async in flight\\): "
      "thread \\([0-9]+,0,0\\) reads 0x[0-9a-f]+ \\(byte [0-9]+ of __shared__ sh\\) at "
      "[^ ]*test_tensor_core.cpp:[0-9]+ .*the destination of a cp.async that thread "
      "\\([0-9]+,0,0\\) issued at [^ ]*test_tensor_core.cpp:[0-9]+ \\(cp.async\\)");
  // ... and without it, every thread reads NaN where its neighbour's copy was to land.
  cuda_emulator::set_racecheck(0);
  GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, false, 0, 0, nullptr, 0);
  got = out.get();
  cuda_emulator::set_racecheck(-1);
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(all_ones(got[i])) << i << ": " << got[i];
}

TEST_F(EmulatedTensorCore, CpAsyncMisalignedOrNotGlobalToSharedIsRefused) {
  Dev<float> src(260), out(256), global(256);
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, true, 4, 0, nullptr, 0),
      "device fault in kernel cp_async_kernel.*source .* is not 16-byte aligned \\(cp.async 16 "
      "bytes at .*test_tensor_core.cpp:[0-9]+\\)");
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, true, 0, 8, nullptr, 0),
      "device fault in kernel cp_async_kernel.*destination .* is not 16-byte aligned");
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, true, 0, 0, global.p, 0),
      "device fault in kernel cp_async_kernel.*destination .* is not in the block's shared memory");
  alignas(16) static float host[256];
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(cp_async_kernel, 1, 64, 0, nullptr, out.p, src.p, true, 0, 0,
                                    nullptr, (uintptr_t)host),
                      "device fault in kernel cp_async_kernel.*source .* is not in one live device "
                      "allocation");
}

// ---- warp intrinsics: masks ------------------------------------------------------------------

// kind 0: __shfl_sync, 1: __shfl_down_sync, 2: __ballot_sync, 3: __syncwarp, each with `mask`
// on the lanes below `active`.
__global__ void masked_kernel(int* out, unsigned mask, int active, int kind) {
  const int l = threadIdx.x % 32;
  if (l >= active) return;
  int v = l;
  if (kind == 0) v = __shfl_sync(mask, v, 0);
  if (kind == 1) v = __shfl_down_sync(mask, v, 1);
  if (kind == 2) v = (int)__ballot_sync(mask, l % 2);
  if (kind == 3) __syncwarp(mask);
  out[threadIdx.x] = v;
}

TEST_F(EmulatedTensorCore, MaskNotNamingTheCallerIsRefused) {
  Dev<int> out(32);
  const char* names[] = {"__shfl_sync", "__shfl_down_sync", "__ballot_sync", "__syncwarp"};
  for (int kind = 0; kind < 4; ++kind)
    EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(masked_kernel, 1, 32, 0, nullptr, out.p, 0x0000ffffu, 32, kind),
                        std::string("device fault in kernel masked_kernel.*does not name the calling "
                                    "lane.*") + names[kind]);
}

TEST_F(EmulatedTensorCore, MaskNamingExitedLanesIsRefused) {
  Dev<int> out(32);
  for (int kind = 0; kind < 4; ++kind)
    EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(masked_kernel, 1, 32, 0, nullptr, out.p, 0xffffffffu, 20, kind),
                        "device fault in kernel masked_kernel.*(exited|returned while lanes)");
}

// Lanes 0..15 with mask 0xffff, lanes 16..31 with the full mask: lane 16 waits for lanes
// 0..15, which wait for each other only; then lanes 0..15 ... never join the full mask.
__global__ void mismatched_masks_kernel(int* out) {
  const int l = threadIdx.x;
  const unsigned mask = l < 16 ? 0x0000ffffu : 0xffffffffu;
  out[l] = __shfl_sync(mask, l, 0);
}

TEST_F(EmulatedTensorCore, LanesShufflingWithDifferentMasksAreRefused) {
  Dev<int> out(32);
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(mismatched_masks_kernel, 1, 32, 0, nullptr, out.p),
                      "device fault in kernel mismatched_masks_kernel.*(divergent warp|deadlock|"
                      "returned while lanes)");
}

TEST_F(EmulatedTensorCore, PartialMasksRunAsDocumented) {
  Dev<int> out(32);
  GPUMIX_LAUNCH(masked_kernel, 1, 32, 0, nullptr, out.p, 0x0000ffffu, 16, 2);
  std::vector<int> got = out.get();
  for (int l = 0; l < 16; ++l) EXPECT_EQ((unsigned)got[l], 0xaaaau) << l;  // odd lanes of 0..15
  GPUMIX_LAUNCH(masked_kernel, 1, 32, 0, nullptr, out.p, 0x0000ffffu, 16, 1);
  got = out.get();
  // lane 15 reads lane 16, outside the mask: undefined on a GPU, all-ones bits here
  for (int l = 0; l < 15; ++l) EXPECT_EQ(got[l], l + 1) << l;
  EXPECT_EQ(got[15], -1);
}

}  // namespace
