// The emulated CUDA device's device language and launcher (kernels/cuda_emulator): each
// modelled bug makes a small kernel fail as it would on a GPU (a wrong or poisoned result, a
// launch error, or a device fault naming the kernel), and the correct kernel passes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_emulator/emulator.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#endif

namespace {

#define CHECK_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc((void**)&p, sizeof(T) * n), cudaSuccess);
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

bool all_ones(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u == 0xffffffffu;
}

class EmulatedDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    // Death tests fork a process that has stream and block worker threads: re-execute.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    (void)cudaGetLastError();
  }
};

// ---- barriers ---------------------------------------------------------------------------

constexpr int kBlock = 256;

// Block sum of 256 values by a shared-memory tree; `with_barrier` false removes the barrier
// between the writes and the reads (the classic bug).
__global__ void block_sum_kernel(float* out, const float* in, bool with_barrier) {
  GPUMIX_SHARED(float, sh, [kBlock]);
  const int t = threadIdx.x;
  sh[t] = in[blockIdx.x * kBlock + t];
  if (with_barrier) __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    if (with_barrier) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = sh[0];
}

void block_sums(bool with_barrier, std::vector<float>* got, std::vector<float>* want) {
  const int blocks = 16;
  std::vector<float> h(blocks * kBlock);
  want->assign(blocks, 0.0f);
  for (int i = 0; i < blocks * kBlock; ++i) {
    h[i] = (float)(i % 7 + 1);  // small integers: every order of summation is exact
    (*want)[i / kBlock] += h[i];
  }
  Dev<float> in(h.size()), out(blocks);
  in.set(h);
  GPUMIX_LAUNCH(block_sum_kernel, blocks, kBlock, 0, nullptr, out.p, in.p, with_barrier);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  *got = out.get();
}

TEST_F(EmulatedDevice, BlockReductionWithBarriersIsExact) {
  std::vector<float> got, want;
  block_sums(true, &got, &want);
  EXPECT_EQ(got, want);
}

// The race detector names the race: a thread reads what another wrote in the same barrier
// interval (the tree's first step reads sh[t + s] that thread t + s wrote before).
TEST_F(EmulatedDevice, RemovedSyncthreadsIsAReadAfterWriteRace) {
  if (!cuda_emulator::racecheck_hooks_here)
    GTEST_SKIP() << "built with -Demulated_racecheck=false: the race detector does not see "
                    "plain loads and stores";
  std::vector<float> got, want;
  EXPECT_DEATH(block_sums(false, &got, &want),
               "device fault in kernel block_sum_kernel .*shared-memory race \\((read after "
               "write|write after read)\\): thread \\([0-9]+,0,0\\) (reads|writes) 0x[0-9a-f]+ "
               "\\(byte [0-9]+ of __shared__ sh\\) at [^ ]*test_device.cpp:[0-9]+ .*; thread "
               "\\([0-9]+,0,0\\) (wrote|read) it at [^ ]*test_device.cpp:[0-9]+ .*since the "
               "block's start");
}

// Without the detector, the same kernel still fails: a wrong result, from the interleaving.
TEST_F(EmulatedDevice, RemovedSyncthreadsGivesAWrongResultWithoutTheDetector) {
  cuda_emulator::set_racecheck(0);
  std::vector<float> got, want;
  block_sums(false, &got, &want);
  cuda_emulator::set_racecheck(-1);
  int wrong = 0;
  for (size_t b = 0; b < got.size(); ++b) wrong += !(got[b] == want[b]);
  EXPECT_GT(wrong, 0) << "every block summed correctly without its barriers";
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

TEST_F(EmulatedDevice, BarrierInDivergentCodeIsReported) {
  Dev<int> out(64);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr, out.p);
        cudaDeviceSynchronize();
      },
      "device fault in kernel divergent_barrier_kernel .*test_device.cpp:[0-9]+.*block "
      "\\(0,0,0\\) thread .*different barriers");
}

__global__ void early_return_kernel(float* out, int n) {
  GPUMIX_SHARED(float, sh, [64]);
  if ((int)threadIdx.x >= n) return;  // the bug: these threads never reach the barrier
  sh[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = sh[(threadIdx.x + 1) % n];
}

TEST_F(EmulatedDevice, ReturnBeforeABarrierOthersReachIsReported) {
  Dev<float> out(64);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(early_return_kernel, 1, 64, 0, nullptr, out.p, 40);
        cudaDeviceSynchronize();
      },
      "device fault in kernel early_return_kernel.*(returned while|after thread)");
  // Every thread in range: no fault, the right values.
  GPUMIX_LAUNCH(early_return_kernel, 1, 64, 0, nullptr, out.p, 64);
  for (float v : out.get()) EXPECT_EQ(v, 1.0f);
}

// ---- warp shuffles ----------------------------------------------------------------------

__global__ void warp_sum_kernel(float* out, const float* in, unsigned mask, int active) {
  const int t = threadIdx.x;
  if (t >= active) return;
  float v = in[t];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  out[t] = v;
}

TEST_F(EmulatedDevice, ShuffleSumsWithinEachWarp) {
  std::vector<float> h(64);
  for (int i = 0; i < 64; ++i) h[i] = (float)i;
  Dev<float> in(64), out(64);
  in.set(h);
  GPUMIX_LAUNCH(warp_sum_kernel, 1, 64, 0, nullptr, out.p, in.p, 0xffffffffu, 64);
  const std::vector<float> got = out.get();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], i < 32 ? 496.0f : 1520.0f) << i;
}

__global__ void half_warp_xor16_kernel(float* out) {
  const int t = threadIdx.x;
  if (t < 16) out[t] = __shfl_xor_sync(0x0000ffffu, 1.0f, 16);  // lane t ^ 16 is not in the mask
}

TEST_F(EmulatedDevice, ShuffleFromALaneOutsideTheMaskIsPoison) {
  Dev<float> out(16);
  GPUMIX_LAUNCH(half_warp_xor16_kernel, 1, 32, 0, nullptr, out.p);
  for (float v : out.get()) EXPECT_TRUE(all_ones(v)) << v;
}

TEST_F(EmulatedDevice, ShuffleMaskNotNamingTheCallerIsReported) {
  Dev<float> in(32), out(32);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(warp_sum_kernel, 1, 32, 0, nullptr, out.p, in.p, 0x0000ffffu, 32);
        cudaDeviceSynchronize();
      },
      "device fault in kernel warp_sum_kernel.*does not name the calling lane");
}

TEST_F(EmulatedDevice, ShuffleMaskNamingExitedLanesIsReported) {
  Dev<float> in(32), out(32);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(warp_sum_kernel, 1, 32, 0, nullptr, out.p, in.p, 0xffffffffu, 20);
        cudaDeviceSynchronize();
      },
      "device fault in kernel warp_sum_kernel.*(exited|returned while lanes)");
}

TEST_F(EmulatedDevice, ShuffleMaskNamingLanesOutsideTheBlockIsReported) {
  Dev<float> in(32), out(32);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(warp_sum_kernel, 1, 24, 0, nullptr, out.p, in.p, 0xffffffffu, 24);
        cudaDeviceSynchronize();
      },
      "device fault in kernel warp_sum_kernel.*do not exist");
}

__global__ void barrier_vs_shuffle_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x < 32) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else __syncthreads();
  out[threadIdx.x] = v;
}

TEST_F(EmulatedDevice, DeadlockIsReportedNotHung) {
  Dev<float> out(64);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(barrier_vs_shuffle_kernel, 1, 64, 0, nullptr, out.p);
        cudaDeviceSynchronize();
      },
      "device fault in kernel barrier_vs_shuffle_kernel.*(deadlock|returned while)");
}

// ---- shared memory ----------------------------------------------------------------------

// Reads its shared array before anything wrote it.
__global__ void read_unwritten_shared_kernel(float* out) {
  GPUMIX_SHARED(float, sh, [128]);
  out[blockIdx.x * 128 + threadIdx.x] = sh[threadIdx.x];
  __syncthreads();
  sh[threadIdx.x] = 0.0f;  // a later block on the same worker must see poison again
}

TEST_F(EmulatedDevice, SharedMemoryIsPoisonedAtEveryBlockStart) {
  Dev<float> out(8 * 128);
  GPUMIX_LAUNCH(read_unwritten_shared_kernel, 8, 128, 0, nullptr, out.p);
  for (float v : out.get()) ASSERT_TRUE(all_ones(v)) << v;
}

__global__ void dynamic_shared_kernel(float* out, int n) {
  GPUMIX_SHARED_DYNAMIC(float, dyn);
  GPUMIX_SHARED(float, st, [4]);
  if (threadIdx.x == 0) out[0] = dyn[n - 1];  // poison: nothing wrote it
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = (float)i;
  if (threadIdx.x < 4) st[threadIdx.x] = 0.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[1] = dyn[n - 1];
}

TEST_F(EmulatedDevice, DynamicSharedMemoryIsPerBlockAndPoisoned) {
  Dev<float> out(2);
  const int n = 1000;
  GPUMIX_LAUNCH(dynamic_shared_kernel, 3, 64, n * sizeof(float), nullptr, out.p, n);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = out.get();
  EXPECT_TRUE(all_ones(got[0]));
  EXPECT_EQ(got[1], (float)(n - 1));
}

// One past the end of a shared array.
__global__ void shared_off_by_one_kernel(float* out) {
  GPUMIX_SHARED(float, sh, [64]);
  sh[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = sh[threadIdx.x + 1];  // thread 63 reads sh[64]
}

TEST_F(EmulatedDevice, SharedOffByOneIsCaught) {
  Dev<float> out(64);
#if defined(TEST_ASAN)
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(shared_off_by_one_kernel, 1, 64, 0, nullptr, out.p);
        cudaDeviceSynchronize();
      },
      // UBSan's bounds check (a static shared array keeps its type) or ASan's redzone,
      // whichever is first: both name this file's line.
      "(AddressSanitizer.*\n(.*\n)*.*test_device.cpp|test_device.cpp:[0-9]+:[0-9]+: runtime error: index 64 out of bounds)");
#else
  GPUMIX_LAUNCH(shared_off_by_one_kernel, 1, 64, 0, nullptr, out.p);
  const std::vector<float> got = out.get();
  for (int i = 0; i < 63; ++i) EXPECT_EQ(got[i], 2.0f);
  EXPECT_TRUE(all_ones(got[63])) << "sh[64] read " << got[63] << ", not poison";
#endif
}

// ---- launch limits ----------------------------------------------------------------------

__global__ void mark_kernel(int* out) { out[0] = 1; }

TEST_F(EmulatedDevice, LaunchLimitsFailAsOnAGpu) {
  Dev<int> out(1);
  CHECK_CUDA(cudaMemset(out.p, 0, sizeof(int)));
  GPUMIX_LAUNCH(mark_kernel, 1, 1025, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  GPUMIX_LAUNCH(mark_kernel, 1, dim3(32, 32, 2), 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPUMIX_LAUNCH(mark_kernel, 1, dim3(1, 1, 65), 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPUMIX_LAUNCH(mark_kernel, dim3(1, 65536), 1, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPUMIX_LAUNCH(mark_kernel, 0, 1, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPUMIX_LAUNCH(mark_kernel, 1, 1, 48 * 1024 + 4, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(out.get()[0], 0) << "a failed launch ran";
  // The largest legal launches run.
  GPUMIX_LAUNCH(mark_kernel, 1, 1024, 48 * 1024, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.get()[0], 1);
  CHECK_CUDA(cudaMemset(out.p, 0, sizeof(int)));
  GPUMIX_LAUNCH(mark_kernel, dim3(1, 65535), 1, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  GPUMIX_LAUNCH(mark_kernel, 1, dim3(1, 1, 64), 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.get()[0], 1);
}

__global__ void big_dynamic_kernel(float* out, int n) {
  GPUMIX_SHARED_DYNAMIC(float, dyn);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += dyn[i];
    out[0] = s;
  }
}

TEST_F(EmulatedDevice, DynamicSharedOver48KiBNeedsTheAttribute) {
  Dev<float> out(1);
  const int n = 64 * 1024 / 4;
  GPUMIX_LAUNCH(big_dynamic_kernel, 1, 256, n * 4, nullptr, out.p, n);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(big_dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);  // over the H200's 227 KiB opt-in
  CHECK_CUDA(cudaFuncSetAttribute(big_dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  n * 4));
  GPUMIX_LAUNCH(big_dynamic_kernel, 1, 256, n * 4, nullptr, out.p, n);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.get()[0], (float)n);
  GPUMIX_LAUNCH(big_dynamic_kernel, 1, 256, n * 4 + 4, nullptr, out.p, n);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // over the raised limit
}

__global__ void static_40k_kernel(float* out) {
  GPUMIX_SHARED(float, big, [10 * 1024]);  // 40 KiB
  big[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = big[threadIdx.x];
}

TEST_F(EmulatedDevice, StaticPlusDynamicSharedOver48KiBFails) {
  Dev<float> out(32);
  // First launch: the static size is learnt while running, so the overflow is a fault.
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(static_40k_kernel, 1, 32, 16 * 1024, nullptr, out.p);
        cudaDeviceSynchronize();
      },
      "device fault in kernel static_40k_kernel.*__shared__ big .*over its limit of 49152");
  // Once the kernel has run, a launch over the limit fails at the launch, as on a GPU.
  GPUMIX_LAUNCH(static_40k_kernel, 1, 32, 0, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CHECK_CUDA(cudaDeviceSynchronize());
  GPUMIX_LAUNCH(static_40k_kernel, 1, 32, 16 * 1024, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  GPUMIX_LAUNCH(static_40k_kernel, 1, 32, 8 * 1024, nullptr, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  for (float v : out.get()) EXPECT_EQ(v, 1.0f);
}

// ---- pointers -----------------------------------------------------------------------------

TEST_F(EmulatedDevice, HostPointerArgumentIsRefused) {
  std::vector<int> host(1);
  EXPECT_DEATH(GPUMIX_LAUNCH(mark_kernel, 1, 1, 0, nullptr, host.data()),
               "kernel mark_kernel launched at .*test_device.cpp:[0-9]+: argument 0 .* is not "
               "device memory");
  int* pinned = nullptr;
  CHECK_CUDA(cudaMallocHost((void**)&pinned, sizeof(int)));
  EXPECT_DEATH(GPUMIX_LAUNCH(mark_kernel, 1, 1, 0, nullptr, pinned),
               "kernel mark_kernel .*argument 0 .* is pinned host memory");
  CHECK_CUDA(cudaFreeHost(pinned));
}

// Device memory is one arena: an index past a buffer is caught under ASan only (the runtime
// poisons what lies outside live allocations); without ASan it lands on poison or another
// buffer, which the kernels' tests see as a wrong result.
#if defined(TEST_ASAN)
__global__ void write_n_kernel(float* out, int n) {
  for (int i = threadIdx.x; i <= n; i += blockDim.x) out[i] = 1.0f;  // the bug: <= n
}

TEST_F(EmulatedDevice, DeviceOffByOneIsCaughtUnderASan) {
  Dev<float> out(256);
  EXPECT_DEATH(
      {
        GPUMIX_LAUNCH(write_n_kernel, 1, 64, 0, nullptr, out.p, 256);
        cudaDeviceSynchronize();
      },
      "AddressSanitizer.*\n(.*\n)*.*test_device.cpp");
}
#endif

// ---- blocks, built-ins --------------------------------------------------------------------

__global__ void builtins_kernel(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int nthreads = blockDim.x * blockDim.y * blockDim.z;
  out[block * nthreads + thread] = block * 1000 + thread;
}

TEST_F(EmulatedDevice, BuiltinsCoverA3DGridOf3DBlocks) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  Dev<int> out(12 * 24);
  GPUMIX_LAUNCH(builtins_kernel, grid, block, 0, nullptr, out.p);
  const std::vector<int> got = out.get();
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t) ASSERT_EQ(got[b * 24 + t], b * 1000 + t);
}

__global__ void ticket_kernel(unsigned* counter, int* order) {
  if (threadIdx.x == 0) order[atomicAdd(counter, 1u)] = blockIdx.x;
}

TEST_F(EmulatedDevice, BlocksRunInAShuffledOrder) {
  const int blocks = 64;
  Dev<unsigned> counter(1);
  Dev<int> order(blocks);
  CHECK_CUDA(cudaMemset(counter.p, 0, sizeof(unsigned)));
  GPUMIX_LAUNCH(ticket_kernel, blocks, 32, 0, nullptr, counter.p, order.p);
  const std::vector<int> got = order.get();
  std::set<int> seen(got.begin(), got.end());
  EXPECT_EQ(seen.size(), (size_t)blocks);  // every block once
  int in_place = 0;
  for (int i = 0; i < blocks; ++i) in_place += got[i] == i;
  EXPECT_LT(in_place, blocks / 2) << "blocks ran (nearly) in index order";
}

// ---- atomics ------------------------------------------------------------------------------

__global__ void atomics_kernel(int* isum, float* fsum, unsigned long long* umin, int* imax) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(isum, 1);
  atomicAdd(fsum, 1.0f);
  atomicMin(umin, (unsigned long long)(100000 - i));
  atomicMax(imax, i);
}

// The order threads first run in, per schedule: a ticket per thread before the barrier and
// one after. fixed: the warps interleave (a seeded shuffle of the threads); warp-ahead: one
// warp runs to the barrier before any other starts; warp-shuffle: every warp runs to the
// barrier before the next starts, in both intervals.
__global__ void schedule_ticket_kernel(int* first, int* second, int* counter) {
  first[threadIdx.x] = atomicAdd(&counter[0], 1);
  __syncthreads();
  second[threadIdx.x] = atomicAdd(&counter[1], 1);
}

// How many of the warps' tickets (per interval) are 32 consecutive numbers starting at a
// multiple of 32, and whether the first 32 tickets of the first interval are one warp's.
void tickets(const char* schedule, int* whole_warps, bool* leader) {
  cuda_emulator::set_schedule(schedule);
  Dev<int> first(128), second(128), counter(2);
  CHECK_CUDA(cudaMemset(counter.p, 0, 8));
  GPUMIX_LAUNCH(schedule_ticket_kernel, 1, 128, 0, nullptr, first.p, second.p, counter.p);
  const std::vector<int> a = first.get(), b = second.get();
  cuda_emulator::set_schedule(nullptr);
  *whole_warps = 0;
  for (const std::vector<int>* t : {&a, &b})
    for (int w = 0; w < 4; ++w) {
      const int base = (*t)[w * 32] / 32 * 32;
      bool whole = true;
      for (int l = 0; l < 32; ++l) whole = whole && (*t)[w * 32 + l] / 32 * 32 == base;
      *whole_warps += whole;
    }
  *leader = false;
  for (int w = 0; w < 4; ++w) {
    bool lead = true;
    for (int l = 0; l < 32; ++l) lead = lead && a[w * 32 + l] < 32;
    *leader = *leader || lead;
  }
}

TEST_F(EmulatedDevice, SchedulesLetWarpsRunAhead) {
  int whole = 0;
  bool leader = false;
  tickets("fixed", &whole, &leader);
  EXPECT_EQ(whole, 0);
  EXPECT_FALSE(leader);
  tickets("warp-ahead", &whole, &leader);
  EXPECT_TRUE(leader);
  EXPECT_GE(whole, 2);  // the leader of each interval
  tickets("warp-shuffle", &whole, &leader);
  EXPECT_TRUE(leader);
  EXPECT_EQ(whole, 8);
  EXPECT_DEATH(cuda_emulator::set_schedule("ahead"), "set_schedule: 'ahead' is not a schedule");
}

TEST_F(EmulatedDevice, AtomicsAreExactReadModifyWrites) {
  Dev<int> isum(1), imax(1);
  Dev<float> fsum(1);
  Dev<unsigned long long> umin(1);
  isum.set({0});
  imax.set({-1});
  fsum.set({0.0f});
  umin.set({~0ull});
  GPUMIX_LAUNCH(atomics_kernel, 64, 256, 0, nullptr, isum.p, fsum.p, umin.p, imax.p);
  EXPECT_EQ(isum.get()[0], 64 * 256);
  EXPECT_EQ(fsum.get()[0], 64.0f * 256.0f);  // integers below 2^24: exact in any order
  EXPECT_EQ(umin.get()[0], 100000ull - (64 * 256 - 1));
  EXPECT_EQ(imax.get()[0], 64 * 256 - 1);
}

// ---- bf16 ---------------------------------------------------------------------------------

TEST_F(EmulatedDevice, Bf16ConversionsAreBitExact) {
  std::mt19937 gen(7);
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu,
                                0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu,
                                0x7f7f8000u, 0x3f7f8000u};
  for (int i = 0; i < 200000; ++i) bits.push_back(gen());
  for (uint32_t u : bits) {
    float f;
    memcpy(&f, &u, 4);
    const __nv_bfloat16 h = __float2bfloat16(f);
    if (std::isnan(f)) {
      EXPECT_EQ(__bfloat16_as_ushort(h), 0x7fffu) << std::hex << u;  // CUDA's canonical NaN
      EXPECT_TRUE(std::isnan(gpumix::bf16_bits_to_f32(gpumix::f32_to_bf16_bits(f))));
      continue;
    }
    ASSERT_EQ(__bfloat16_as_ushort(h), gpumix::f32_to_bf16_bits(f)) << std::hex << u;
    ASSERT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(f)), __bfloat16_as_ushort(h));
    const float back = __bfloat162float(h);
    ASSERT_EQ(gpumix::bf16_bits_to_f32(__bfloat16_as_ushort(h)), back);
  }
  // Ties to even, explicitly: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16(1.0f + 0x1p-8f)), 0x3f80u);
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16(1.0f + 3 * 0x1p-8f)), 0x3f82u);
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16(3.4e38f)), 0x7f80u);  // overflow: inf
}

// ---- math and time ------------------------------------------------------------------------

__global__ void math_kernel(float* out, const float* in) {
  const float x = in[threadIdx.x];
  out[threadIdx.x * 4 + 0] = __expf(x) - expf(x);
  out[threadIdx.x * 4 + 1] = rsqrtf(x * x + 1.0f) * sqrtf(x * x + 1.0f) - 1.0f;
  out[threadIdx.x * 4 + 2] = __uint_as_float(__float_as_uint(x)) - x;
  out[threadIdx.x * 4 + 3] = __fadd_rn(__fmul_rn(x, 3.0f), __fsub_rn(1.0f, x)) - (2.0f * x + 1.0f);
}

TEST_F(EmulatedDevice, MathIntrinsics) {
  std::vector<float> h(32);
  for (int i = 0; i < 32; ++i) h[i] = (float)(i - 16) / 4.0f;  // exact in every operation above
  Dev<float> in(32), out(128);
  in.set(h);
  GPUMIX_LAUNCH(math_kernel, 1, 32, 0, nullptr, out.p, in.p);
  const std::vector<float> got = out.get();
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(got[i], 0.0f, 2e-7f) << i;
}

__global__ void sleep_kernel(unsigned long long* out, int64_t ns) {
  const uint64_t start = cuda_emulator::global_timer_ns();
  while ((int64_t)(cuda_emulator::global_timer_ns() - start) < ns) __nanosleep(1000);
  out[0] = cuda_emulator::global_timer_ns() - start;
}

TEST_F(EmulatedDevice, GlobalTimerAndNanosleep) {
  Dev<unsigned long long> out(1);
  GPUMIX_LAUNCH(sleep_kernel, 1, 1, 0, nullptr, out.p, (int64_t)2000000);
  EXPECT_GE(out.get()[0], 2000000ull);
}

}  // namespace
