// The emulated CUDA runtime (kernels/cuda_emulator/runtime.cpp): memory and its capacity,
// pools, streams, events, copies with their documented host synchronisation, errors,
// device properties, and the refusals. A slow producer is stream work that sleeps before
// writing (cuda_emulator::enqueue), standing for a long kernel: a consumer that waits for it
// reads its values. Where a test reads what is there before the producer ran (the poison), the
// producer is held by a Gate instead, which the test opens after reading: a sleep would be
// outlasted by a host thread descheduled on a loaded machine.
//
// Its own main: the device memory (64 MiB) and count (2) are set before the first call.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "kernels/cuda_emulator/emulator.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;  // freed device memory is ASan-poisoned: not read here
#else
constexpr bool kAsan = false;
#endif

namespace {

constexpr size_t kMiB = 1 << 20;

#define CU(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Stream work that sleeps `ms`, then fills n floats at p with `value`.
void slow_fill(cudaStream_t s, float* p, size_t n, float value, int ms = 50) {
  cuda_emulator::enqueue(s, "slow_fill", [=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (size_t i = 0; i < n; ++i) p[i] = value;
  });
}

// Holds a stream's work until the test opens it, at any load of the machine. Opened when it
// goes at the latest (declare it after the streams), so that a failed assertion leaves no
// worker waiting.
class Gate {
 public:
  ~Gate() { open(); }
  void open() {
    if (!opened_) promise_.set_value();
    opened_ = true;
  }
  // Stream work that waits for open().
  std::function<void()> work() const {
    const std::shared_future<void> f = future_;
    return [f] { f.wait(); };
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
  bool opened_ = false;
};

// Stream work that waits for `gate`, then fills n floats at p with `value`.
void gated_fill(cudaStream_t s, const Gate& gate, float* p, size_t n, float value) {
  cuda_emulator::enqueue(s, "gate", gate.work());
  cuda_emulator::enqueue(s, "fill", [=] {
    for (size_t i = 0; i < n; ++i) p[i] = value;
  });
}

bool is_poison(const void* p, size_t bytes) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != 0xFF) return false;
  return true;
}

struct Streams {
  cudaStream_t a = nullptr, b = nullptr;
  Streams() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  }
  ~Streams() {
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
};

TEST(Runtime, DeviceMemoryIsPoisonedAtAllocationAndAfterFree) {
  float* p = nullptr;
  CU(cudaMalloc(&p, 1000 * sizeof(float)));
  EXPECT_EQ((uintptr_t)p % 256, 0u);
  EXPECT_TRUE(is_poison(p, 1000 * sizeof(float)));  // emulator's memory is host memory
  EXPECT_TRUE(std::isnan(p[0]));
  CU(cudaMemset(p, 0, 1000 * sizeof(float)));
  CU(cudaDeviceSynchronize());
  EXPECT_EQ(p[999], 0.0f);
  CU(cudaFree(p));
  if (!kAsan) EXPECT_TRUE(is_poison(p, 1000 * sizeof(float)));  // a read after free sees NaN
  EXPECT_EQ(cuda_emulator::classify(p), cuda_emulator::Memory::pageable_host);
}

TEST(Runtime, MissingStreamWaitEventGivesPoison) {
  Streams s;
  const size_t n = 1024;
  float *src = nullptr, *dst = nullptr;
  CU(cudaMalloc(&src, n * 4));
  CU(cudaMalloc(&dst, n * 4));
  std::vector<float> host(n);

  // With the wait: stream b copies what stream a produced.
  cudaEvent_t produced;
  CU(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  slow_fill(s.a, src, n, 3.0f);
  CU(cudaEventRecord(produced, s.a));
  CU(cudaStreamWaitEvent(s.b, produced, 0));
  CU(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice, s.b));
  CU(cudaStreamSynchronize(s.b));
  CU(cudaMemcpy(host.data(), dst, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 3.0f) << i;

  // Without it: b's copy runs while a is held, and copies the poison.
  float* src2 = nullptr;
  CU(cudaMalloc(&src2, n * 4));
  Gate gate;
  gated_fill(s.a, gate, src2, n, 4.0f);
  CU(cudaMemcpyAsync(dst, src2, n * 4, cudaMemcpyDeviceToDevice, s.b));
  CU(cudaStreamSynchronize(s.b));
  gate.open();  // dst holds what b copied; a's fill writes src2
  CU(cudaMemcpy(host.data(), dst, n * 4, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(is_poison(host.data(), n * 4)) << "host[0] = " << host[0];
  CU(cudaStreamSynchronize(s.a));
  CU(cudaEventDestroy(produced));
  CU(cudaFree(src));
  CU(cudaFree(src2));
  CU(cudaFree(dst));
}

TEST(Runtime, PinnedDeviceToHostBeforeSyncSeesPoison) {
  Streams s;
  const size_t n = 256;
  float* d = nullptr;
  float* pinned = nullptr;
  CU(cudaMalloc(&d, n * 4));
  CU(cudaMallocHost(&pinned, n * 4));
  EXPECT_EQ(cuda_emulator::classify(pinned), cuda_emulator::Memory::pinned_host);
  Gate gate;
  gated_fill(s.a, gate, d, n, 7.0f);
  const int64_t syncs = cuda_emulator::host_sync_count();
  CU(cudaMemcpyAsync(pinned, d, n * 4, cudaMemcpyDeviceToHost, s.a));  // fully asynchronous
  EXPECT_EQ(cuda_emulator::host_sync_count(), syncs);
  EXPECT_TRUE(is_poison(pinned, n * 4)) << "read before the sync: " << pinned[0];
  gate.open();
  CU(cudaStreamSynchronize(s.a));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(pinned[i], 7.0f);
  CU(cudaFreeHost(pinned));
  CU(cudaFree(d));
}

TEST(Runtime, PageableCopiesSynchroniseAsDocumented) {
  Streams s;
  const size_t n = 256;
  float* d = nullptr;
  CU(cudaMalloc(&d, n * 4));
  // Device -> pageable host returns once the copy is done: no sync needed to read it.
  slow_fill(s.a, d, n, 5.0f);
  std::vector<float> host(n, 0.0f);
  int64_t syncs = cuda_emulator::host_sync_count();
  CU(cudaMemcpyAsync(host.data(), d, n * 4, cudaMemcpyDeviceToHost, s.a));
  EXPECT_EQ(cuda_emulator::host_sync_count(), syncs + 1);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 5.0f);
  // Pageable host -> device is staged at the call: overwriting the source afterwards does
  // not change what arrives, and the call does not wait for the stream.
  slow_fill(s.a, d, n, 6.0f);
  std::vector<float> src(n, 9.0f);
  syncs = cuda_emulator::host_sync_count();
  CU(cudaMemcpyAsync(d, src.data(), n * 4, cudaMemcpyHostToDevice, s.a));
  EXPECT_EQ(cuda_emulator::host_sync_count(), syncs);
  std::fill(src.begin(), src.end(), -1.0f);
  CU(cudaStreamSynchronize(s.a));
  CU(cudaMemcpy(host.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 9.0f);
  CU(cudaFree(d));
}

TEST(Runtime, HostSyncCountCountsEachSynchronisingCall) {
  Streams s;
  float *d = nullptr, *d2 = nullptr, *pinned = nullptr;
  CU(cudaMalloc(&d, 64));
  CU(cudaMalloc(&d2, 64));
  CU(cudaMallocHost(&pinned, 64));
  float host[16];
  cudaEvent_t e;
  CU(cudaEventCreate(&e));
  CU(cudaMemset(d, 0, 64));
  const int64_t before = cuda_emulator::host_sync_count();
  CU(cudaMemcpyAsync(d2, d, 64, cudaMemcpyDeviceToDevice, s.a));   // 0
  CU(cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, s.a));  // 0
  CU(cudaMemcpyAsync(d, host, 64, cudaMemcpyHostToDevice, s.a));    // 0: staged
  CU(cudaEventRecord(e, s.a));
  CU(cudaEventSynchronize(e));                                      // 1
  CU(cudaStreamSynchronize(s.a));                                   // 2
  CU(cudaMemcpyAsync(host, d, 64, cudaMemcpyDeviceToHost, s.a));    // 3: pageable
  CU(cudaMemcpy(host, d, 64, cudaMemcpyDeviceToHost));              // 4
  CU(cudaMemcpy(d2, d, 64, cudaMemcpyDeviceToDevice));              // 4: no host sync
  CU(cudaDeviceSynchronize());                                      // 5
  EXPECT_EQ(cuda_emulator::host_sync_count() - before, 5);
  CU(cudaEventDestroy(e));
  CU(cudaFreeHost(pinned));
  CU(cudaFree(d));
  CU(cudaFree(d2));
}

TEST(Runtime, CapacityAndMemGetInfo) {
  size_t free0 = 0, total = 0;
  CU(cudaMemGetInfo(&free0, &total));
  EXPECT_EQ(total, 64 * kMiB);  // GPUMIX_EMULATED_GPU_MEMORY, set by main
  void* a = nullptr;
  CU(cudaMalloc(&a, 40 * kMiB));
  size_t free1 = 0;
  CU(cudaMemGetInfo(&free1, &total));
  EXPECT_EQ(free0 - free1, 40 * kMiB);
  void* b = nullptr;
  EXPECT_EQ(cudaMalloc(&b, 40 * kMiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky: reset by the read
  CU(cudaFree(a));
  CU(cudaMalloc(&b, 40 * kMiB));  // fits again
  CU(cudaFree(b));
  CU(cudaMemGetInfo(&free1, &total));
  EXPECT_EQ(free1, free0);
}

cudaMemPool_t make_pool(int device, uint64_t threshold) {
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  return pool;
}

uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  uint64_t v = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, a, &v), cudaSuccess);
  return v;
}

TEST(Runtime, PoolsAreStreamOrderedAndCounted) {
  Streams s;
  size_t free0 = 0, total = 0;
  CU(cudaMemGetInfo(&free0, &total));
  cudaMemPool_t pool = make_pool(0, UINT64_MAX);
  float* p = nullptr;
  CU(cudaMallocFromPoolAsync(&p, 8 * kMiB, pool, s.a));
  EXPECT_EQ(cuda_emulator::classify(p), cuda_emulator::Memory::device);
  size_t free1 = 0;
  CU(cudaMemGetInfo(&free1, &total));
  EXPECT_EQ(free0 - free1, 8 * kMiB);  // the pool's reservation counts against the capacity
  Gate gate;
  gated_fill(s.a, gate, p, 16, 1.0f);
  CU(cudaFreeAsync(p, s.a));
  // Freed on stream a: reusable on a at once (stream order), not on b before the free ran.
  float* q = nullptr;
  CU(cudaMallocFromPoolAsync(&q, 8 * kMiB, pool, s.b));
  EXPECT_NE(q, p);
  float* r = nullptr;
  CU(cudaMallocFromPoolAsync(&r, 8 * kMiB, pool, s.a));
  EXPECT_EQ(r, p);
  gate.open();
  CU(cudaStreamSynchronize(s.a));
  EXPECT_TRUE(is_poison(r, 16 * 4)) << "the free re-poisons: " << r[0];
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 16 * kMiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 16 * kMiB);
  CU(cudaFreeAsync(q, s.b));
  CU(cudaFreeAsync(r, s.a));
  CU(cudaDeviceSynchronize());
  // The threshold (UINT64_MAX) keeps the memory; cudaMemPoolTrimTo gives it back.
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 16 * kMiB);
  CU(cudaMemPoolTrimTo(pool, 0));
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  CU(cudaMemGetInfo(&free1, &total));
  EXPECT_EQ(free1, free0);
  // Past the capacity: cudaErrorMemoryAllocation.
  void* big = nullptr;
  EXPECT_EQ(cudaMallocFromPoolAsync(&big, 65 * kMiB, pool, s.a), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  CU(cudaMemPoolDestroy(pool));
}

TEST(Runtime, PoolReleaseThresholdZeroReleasesAtSync) {
  Streams s;
  cudaMemPool_t pool = make_pool(0, 0);
  void* p = nullptr;
  CU(cudaMallocFromPoolAsync(&p, 4 * kMiB, pool, s.a));
  CU(cudaFreeAsync(p, s.a));
  CU(cudaStreamSynchronize(s.a));
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  CU(cudaMemPoolDestroy(pool));
}

TEST(Runtime, EventsTimeOnTheWorkerAndRefuseWithoutTiming) {
  Streams s;
  cudaEvent_t start, end, untimed;
  CU(cudaEventCreate(&start));
  CU(cudaEventCreate(&end));
  CU(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  Gate gate;  // holds the stream while the host asks, at any load
  cuda_emulator::enqueue(s.a, "gate", gate.work());
  CU(cudaEventRecord(start, s.a));
  cuda_emulator::enqueue(s.a, "sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  CU(cudaEventRecord(end, s.a));
  CU(cudaEventRecord(untimed, s.a));
  EXPECT_EQ(cudaEventQuery(end), cudaErrorNotReady);
  (void)cudaGetLastError();
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  gate.open();
  CU(cudaEventSynchronize(end));
  CU(cudaEventQuery(end));
  CU(cudaEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 29.0f);  // the sleep lies between the two records on the worker
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CU(cudaEventDestroy(start));
  CU(cudaEventDestroy(end));
  CU(cudaEventDestroy(untimed));
}

TEST(Runtime, ErrorsNamesAndLastError) {
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  EXPECT_EQ(cudaSetDevice(99), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cuda_emulator::set_last_error(cudaErrorInvalidConfiguration);  // the launcher's path
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

TEST(Runtime, DevicePropertiesOfTheNamedGpu) {
  int n = 0;
  CU(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, 2);
  cudaDeviceProp p;
  CU(cudaGetDeviceProperties(&p, 0));
  if (!getenv("GPUMIX_EMULATED_GPU")) {  // the default: H200
    EXPECT_STREQ(p.name, "NVIDIA H200");
    EXPECT_EQ(p.major, 9);
    EXPECT_EQ(p.minor, 0);
    EXPECT_EQ(p.multiProcessorCount, 132);
  }
  int v = 0;
  CU(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 1));
  EXPECT_EQ(v, p.multiProcessorCount);
  CU(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
  EXPECT_EQ(v, p.major);
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 2), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}

TEST(Runtime, CurrentDeviceIsPerHostThreadAndPeersCopy) {
  CU(cudaSetDevice(0));
  int seen = -1;
  std::thread t([&] {
    cudaSetDevice(1);
    cudaGetDevice(&seen);
  });
  t.join();
  EXPECT_EQ(seen, 1);
  int dev = -1;
  CU(cudaGetDevice(&dev));
  EXPECT_EQ(dev, 0);

  int can = 0;
  CU(cudaDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(can, 1);
  cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
  EXPECT_TRUE(e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  (void)cudaGetLastError();

  float* on0 = nullptr;
  float* on1 = nullptr;
  CU(cudaMalloc(&on0, 64));
  CU(cudaSetDevice(1));
  CU(cudaMalloc(&on1, 64));
  int ord = -1;
  EXPECT_EQ(cuda_emulator::classify(on1, &ord), cuda_emulator::Memory::device);
  EXPECT_EQ(ord, 1);
  cudaStream_t s1;
  CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CU(cudaSetDevice(0));
  CU(cudaMemset(on0, 0, 64));
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpyPeerAsync(on1, 1, on0, 0, 64, s1));
  CU(cudaStreamSynchronize(s1));
  EXPECT_EQ(on1[15], 0.0f);
  CU(cudaStreamDestroy(s1));
  CU(cudaFree(on0));
  CU(cudaFree(on1));
}

// ---- refusals and faults (each in a child process) ---------------------------------------

TEST(RuntimeDeathTest, CopyDirectionsAreChecked) {
  std::vector<float> host(16);
  EXPECT_DEATH(
      {
        cudaMemcpy(host.data(), host.data() + 8, 32, cudaMemcpyHostToDevice);
      },
      "cudaMemcpy \\(cudaMemcpyHostToDevice\\) dst.*not device memory");
  EXPECT_DEATH(
      {
        float* d = nullptr;
        cudaMalloc(&d, 64);
        cudaMemcpy(host.data(), d, 68, cudaMemcpyDeviceToHost);
      },
      "ends 4 bytes past it");
  EXPECT_DEATH(
      {
        float* d = nullptr;
        cudaMalloc(&d, 64);
        cudaMemcpy(d, host.data(), 64, cudaMemcpyDeviceToDevice);
      },
      "src.*not device memory");
}

TEST(RuntimeDeathTest, UnmodelledFlagsAreRefused) {
  EXPECT_DEATH(
      {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamDefault);
      },
      "only cudaStreamNonBlocking streams are emulated");
  EXPECT_DEATH(
      {
        void* p;
        cudaHostAlloc(&p, 64, cudaHostAllocMapped);
      },
      "cudaHostAllocMapped");
  EXPECT_DEATH(
      {
        cudaEvent_t e;
        cudaEventCreateWithFlags(&e, cudaEventInterprocess);
      },
      "cudaEventInterprocess is not emulated");
  EXPECT_DEATH({ cudaFree((void*)0x1000); }, "not a live cudaMalloc allocation");
}

TEST(RuntimeDeathTest, WorkErrorsAreStickyAndReportedBySync) {
  EXPECT_EXIT(
      {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cuda_emulator::enqueue(s, "kernel faulty", [] {
          throw cuda_emulator::WorkError(cudaErrorIllegalAddress, "index 17 out of bounds");
        });
        const cudaError_t e1 = cudaStreamSynchronize(s);
        const cudaError_t e2 = cudaGetLastError();
        const cudaError_t e3 = cudaGetLastError();  // sticky: still there
        _exit(e1 == cudaErrorIllegalAddress && e2 == e1 && e3 == e1 ? 3 : 1);
      },
      ::testing::ExitedWithCode(3), "kernel faulty on stream .* failed: index 17 out of bounds");
}

#if defined(__SANITIZE_ADDRESS__)
// Sanitized builds only: one element past a device allocation is an ASan report (the
// arena's redzones), as a kernel's off-by-one index would be.
TEST(RuntimeDeathTest, AsanReportsAReadPastAnAllocation) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 10 * sizeof(float));
        volatile float x = p[10];
        (void)x;
      },
      "AddressSanitizer: use-after-poison");
}
#endif

}  // namespace

int main(int argc, char** argv) {
  setenv("GPUMIX_EMULATED_GPU_MEMORY", "64MiB", 1);
  setenv("GPUMIX_EMULATED_GPU_COUNT", "2", 1);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  return RUN_ALL_TESTS();
}
