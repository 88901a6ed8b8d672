// The emulated device tested as a checker (docs/design.md, "the emulated GPU"): a seeded bug of
// each class it claims to catch must fail, with the message that names it, and the same kernel
// without the bug must pass. Scratch kernels: a missing read-after-write barrier, a missing
// write-after-read barrier, a barrier inside a warp-divergent branch, a launch past the
// kernel's __launch_bounds__. Then the real tensor-core attention forward
// (kernels/cuda/attention.cu, compiled into this file with two of its barriers made
// removable by GPUMIX_SEEDED_BARRIER): without the barrier after the cp.async wait, a warp
// reads tiles other threads are still copying; without the trailing barrier, the next
// iteration's copies overwrite a tile other warps still read. Both fail under every schedule,
// the fixed one included: the race detector needs no unlucky interleaving.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_emulator/emulator.h"

namespace seeded {
bool drop_after_wait = false;        // the __syncthreads() after cp_async_wait
bool drop_before_overwrite = false;  // the loop's trailing __syncthreads()
}  // namespace seeded
#define GPUMIX_SEEDED_BARRIER(which) \
  do {                               \
    if (!seeded::drop_##which) __syncthreads(); \
  } while (0)
// This file's own copy of the attention kernels (its symbols replace the library's).
#include "kernels/cuda/attention.cu"

namespace {

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
  void set(const std::vector<T>& h) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), sizeof(T) * n, cudaMemcpyHostToDevice), cudaSuccess);
  }
};

class SeededBug : public ::testing::Test {
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

// ---- a missing read-after-write barrier ---------------------------------------------------

// Each thread reads its neighbour's element; `barrier` false drops the barrier between the
// writes and the reads.
__global__ void neighbour_kernel(float* out, const float* in, bool barrier) {
  GPUMIX_SHARED(float, sh, [128]);
  const int t = threadIdx.x;
  sh[t] = in[t];
  if (barrier) __syncthreads();
  out[t] = sh[(t + 1) % 128];
}

TEST_F(SeededBug, MissingReadAfterWriteBarrier) {
  if (!cuda_emulator::racecheck_hooks_here)
    GTEST_SKIP() << "built with -Demulated_racecheck=false: the race detector does not see "
                    "plain loads and stores";
  std::vector<float> h(128);
  for (int i = 0; i < 128; ++i) h[i] = (float)i;
  Dev<float> in(128), out(128);
  in.set(h);
  GPUMIX_LAUNCH(neighbour_kernel, 1, 128, 0, nullptr, out.p, in.p, true);
  const std::vector<float> got = out.get();
  for (int i = 0; i < 128; ++i) ASSERT_EQ(got[i], (float)((i + 1) % 128)) << i;
  // Which of the two accesses comes second depends on the order the threads ran in.
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(neighbour_kernel, 1, 128, 0, nullptr, out.p, in.p, false),
      "device fault in kernel neighbour_kernel .*test_seeded_bugs.cpp.*shared-memory race "
      "\\((read after write|write after read)\\): thread \\([0-9]+,0,0\\) (reads|writes) "
      "0x[0-9a-f]+ \\(byte [0-9]+ of __shared__ sh\\) at [^ ]*test_seeded_bugs.cpp:[0-9]+ .*; "
      "thread \\([0-9]+,0,0\\) (wrote|read) it at [^ ]*test_seeded_bugs.cpp:[0-9]+ .*in the "
      "same barrier interval \\(since the block's start\\)");
}

// ---- a missing write-after-read barrier ---------------------------------------------------

// One warp: each lane reads its neighbour's element, then overwrites its own. `order` 0: a
// shuffle between the two (which orders no memory access: the race stays), 1: __syncwarp()
// (which does), 2: __syncthreads().
__global__ void overwrite_kernel(float* out, const float* in, int order) {
  GPUMIX_SHARED(float, sh, [32]);
  const int t = threadIdx.x;
  sh[t] = in[t];
  __syncthreads();
  float v = sh[(t + 1) % 32];
  if (order == 0) v = __shfl_sync(0xffffffffu, v, t);  // every lane has read: none has written
  if (order == 1) __syncwarp();
  if (order == 2) __syncthreads();
  sh[t] = 2.0f * v;
  __syncthreads();
  out[t] = sh[t];
}

TEST_F(SeededBug, MissingWriteAfterReadBarrier) {
  if (!cuda_emulator::racecheck_hooks_here)
    GTEST_SKIP() << "built with -Demulated_racecheck=false: the race detector does not see "
                    "plain loads and stores";
  std::vector<float> h(32);
  for (int i = 0; i < 32; ++i) h[i] = (float)i;
  Dev<float> in(32), out(32);
  in.set(h);
  for (int order : {1, 2}) {
    GPUMIX_LAUNCH(overwrite_kernel, 1, 32, 0, nullptr, out.p, in.p, order);
    const std::vector<float> got = out.get();
    for (int i = 0; i < 32; ++i) ASSERT_EQ(got[i], 2.0f * (float)((i + 1) % 32)) << order << " " << i;
  }
  EXPECT_DEVICE_FAULT(
      GPUMIX_LAUNCH(overwrite_kernel, 1, 32, 0, nullptr, out.p, in.p, 0),
      "device fault in kernel overwrite_kernel .*shared-memory race \\(write after read\\): "
      "thread \\([0-9]+,0,0\\) writes 0x[0-9a-f]+ \\(byte [0-9]+ of __shared__ sh\\) at "
      "[^ ]*test_seeded_bugs.cpp:[0-9]+ .*; thread \\([0-9]+,0,0\\) read it at "
      "[^ ]*test_seeded_bugs.cpp:[0-9]+ .*since the __syncthreads\\(\\) at "
      "[^ ]*test_seeded_bugs.cpp:[0-9]+\\) with no __syncthreads\\(\\) or __syncwarp\\(\\) naming "
      "both lanes between them");
}

// ---- a barrier in warp-divergent code -------------------------------------------------------

// Half of each warp reaches the barrier; the other half goes on and returns.
__global__ void warp_divergent_barrier_kernel(int* out) {
  if (threadIdx.x % 32 < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

TEST_F(SeededBug, WarpDivergentBarrier) {
  Dev<int> out(64);
  EXPECT_DEVICE_FAULT(GPUMIX_LAUNCH(warp_divergent_barrier_kernel, 1, 64, 0, nullptr, out.p),
                      "device fault in kernel warp_divergent_barrier_kernel .*(returned while .* "
                      "wait at __syncthreads\\(\\) at [^ ]*test_seeded_bugs.cpp:[0-9]+|reached "
                      "__syncthreads\\(\\) at [^ ]*test_seeded_bugs.cpp:[0-9]+ after thread)");
}

// ---- a launch past the kernel's bounds ------------------------------------------------------

__global__ void __launch_bounds__(64) bounded_kernel(int* out) { out[threadIdx.x] = 1; }

template <int N>
__global__ void __launch_bounds__(N * 2, 1) bounded_template_kernel(int* out) {
  out[threadIdx.x] = N;
}

TEST_F(SeededBug, LaunchPastItsBounds) {
  Dev<int> out(256);
  GPUMIX_LAUNCH(bounded_kernel, 1, 64, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  auto* templated = &bounded_template_kernel<64>;  // __launch_bounds__(128, 1)
  GPUMIX_LAUNCH(templated, 1, dim3(64, 2), 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#if defined(__clang__)
  // clang takes only literal arguments in the attribute that carries the bound
  // (device_language.h): the emulated build of the sanitized suite does not enforce it.
  GPUMIX_LAUNCH(bounded_kernel, 1, 65, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "clang's build now enforces __launch_bounds__: "
                                                "make this test expect the failure";
#else
  ::testing::internal::CaptureStderr();
  GPUMIX_LAUNCH(bounded_kernel, 1, 65, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  GPUMIX_LAUNCH(templated, 1, dim3(32, 5), 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("kernel bounded_kernel launched at"), std::string::npos) << err;
  EXPECT_NE(err.find("with 65 threads per block, over its __launch_bounds__(64)"),
            std::string::npos) << err;
  EXPECT_NE(err.find("with 160 threads per block, over its __launch_bounds__(128)"),
            std::string::npos) << err;
#endif
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a failed launch runs nothing
}

// ---- the real attention kernel, each barrier removed ------------------------------------------

// B 1, T 192 (3 key tiles for the last query tile: the trailing barrier matters from the third),
// one head of 64 (the tensor-core kernel).
constexpr int kB = 1, kT = 192, kC = 64, kNH = 1;

std::vector<uint16_t> random_qkv() {
  std::vector<uint16_t> h((size_t)kB * kT * 3 * kC);
  uint32_t s = 12345;
  for (uint16_t& x : h) {
    s = s * 1664525u + 1013904223u;
    x = gpumix::f32_to_bf16_bits((float)((int)(s >> 9) % 2001 - 1000) / 1000.0f);
  }
  return h;
}

void run_attention_copy(std::vector<uint16_t>* out_tc, std::vector<uint16_t>* out_ref) {
  using gpumix::kernels::cuda::bf16;
  Dev<uint16_t> qkv((size_t)kB * kT * 3 * kC), out((size_t)kB * kT * kC), ref((size_t)kB * kT * kC);
  Dev<float> lse((size_t)kB * kNH * kT), lse_ref((size_t)kB * kNH * kT);
  qkv.set(random_qkv());
  gpumix::kernels::cuda::attention_forward((bf16*)out.p, lse.p, (const bf16*)qkv.p, kB, kT, kC, kNH,
                                           nullptr);
  if (out_tc) *out_tc = out.get();
  gpumix::kernels::cuda::attention_forward_ref((bf16*)ref.p, lse_ref.p, (const bf16*)qkv.p, kB, kT,
                                               kC, kNH, nullptr);
  if (out_ref) *out_ref = ref.get();
}

TEST_F(SeededBug, AttentionCopyWithItsBarriersMatchesTheReference) {
  std::vector<uint16_t> got, want;
  run_attention_copy(&got, &want);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = gpumix::bf16_bits_to_f32(got[i]), w = gpumix::bf16_bits_to_f32(want[i]);
    ASSERT_NEAR(g, w, 0.02f + 0.02f * std::fabs(w)) << i;  // bf16 P in the tensor-core kernel
  }
}

TEST_F(SeededBug, AttentionWithoutTheBarrierAfterTheCpAsyncWait) {
  EXPECT_DEATH(
      {
        seeded::drop_after_wait = true;
        run_attention_copy(nullptr, nullptr);
      },
      "device fault in kernel flash_forward_tc_kernel<D> .*shared-memory race "
      "\\((cp.async in flight|read after write)\\): thread \\([0-9]+,0,0\\) reads .* at "
      "[^ ]*attention.cu:[0-9]+ \\(ldmatrix.x4\\)");
}

TEST_F(SeededBug, AttentionWithoutTheTrailingBarrier) {
  EXPECT_DEATH(
      {
        seeded::drop_before_overwrite = true;
        run_attention_copy(nullptr, nullptr);
      },
      "device fault in kernel flash_forward_tc_kernel<D> .*shared-memory race "
      "\\((write after read|cp.async in flight)\\): thread \\([0-9]+,0,0\\) (writes|reads) .* at "
      "[^ ]*attention.cu:[0-9]+ \\((cp.async|ldmatrix.x4(.trans)?)\\)");
}

}  // namespace
