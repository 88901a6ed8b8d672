// Device discovery, the scratch pools, and release_resources.
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/device.h"

namespace gpumix::kernels::cuda {

namespace detail {
void matmul_release_all();  // matmul.cu
}

int cuda_device_count(std::string* reason) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (reason) *reason = cuda_error_text(e);
    return 0;
  }
  if (n == 0 && reason) *reason = "the CUDA runtime found no device";
  return n;
}

DeviceInfo cuda_device_info(int index) {
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceInfo d;
  d.index = index;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_memory = (int64_t)p.totalGlobalMem;
  d.l2_cache = p.l2CacheSize;
  d.smem_per_block_optin = (int64_t)p.sharedMemPerBlockOptin;
  d.memory_bus_width = p.memoryBusWidth;
  // CUDA 13 dropped clockRate and memoryClockRate from cudaDeviceProp.
  CUDA_CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, index));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, index));
  return d;
}

std::string cuda_device_summary(int index) {
  const DeviceInfo d = cuda_device_info(index);
  char buf[256];
  snprintf(buf, sizeof buf, "%s (cc %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB)", d.name.c_str(),
           d.cc_major, d.cc_minor, d.sm_count, d.total_memory / 1073741824.0,
           d.l2_cache / 1048576.0);
  return buf;
}

namespace detail {

namespace {
std::mutex g_mutex;
std::unordered_map<int, int> g_sm_count;

// Scratch pools: one per (GPU, stream), never one per GPU. Several logical devices share a GPU
// (ranks as threads, emulated devices split from one card), each with its own streams. From a
// pool shared across streams, cudaMallocFromPoolAsync may hand stream B a block that stream A
// freed and whose free has not run yet, making B wait on A's work
// (cudaMemPoolReuseAllowInternalDependencies, on by default): one rank's scratch allocation
// would then stall behind another rank's kernels and its slow= spins, skewing profiles and
// step times. A pool only ever used on one stream reuses in that stream's order and never adds
// a dependency. (Switching the reuse attributes off on a shared pool would do as well, but the
// emulated device, which runs these kernels in CI, implements only the release threshold.)
struct PoolKey {
  int dev;
  cudaStream_t stream;
  bool operator==(const PoolKey& o) const { return dev == o.dev && stream == o.stream; }
};
struct PoolKeyHash {
  size_t operator()(const PoolKey& k) const {
    return std::hash<const void*>()(k.stream) * 31u + (size_t)k.dev;
  }
};
std::unordered_map<PoolKey, cudaMemPool_t, PoolKeyHash> g_pools;

cudaMemPool_t pool_of(cudaStream_t stream) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_pools.find(PoolKey{dev, stream});
  if (it != g_pools.end()) return it->second;
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool;
  CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t threshold = UINT64_MAX;  // keep freed blocks for reuse (release_resources trims)
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  g_pools[PoolKey{dev, stream}] = pool;
  return pool;
}
}  // namespace

int sm_count() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_sm_count.find(dev);
  if (it != g_sm_count.end()) return it->second;
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  g_sm_count[dev] = n;
  return n;
}

int grid_for(int64_t n, int threads) {
  const int64_t needed = (n + threads - 1) / threads;
  const int64_t cap = (int64_t)sm_count() * 16;  // 16 blocks per SM: full occupancy, waves
  const int64_t g = needed < cap ? needed : cap;
  return g < 1 ? 1 : (int)g;
}

void* scratch_alloc(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) bytes = 16;
  void* p = nullptr;
  CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_of(stream), stream));
  return p;
}

void scratch_free(void* p, cudaStream_t stream) {
  if (p) CUDA_CHECK(cudaFreeAsync(p, stream));
}

void scratch_trim_all() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& kv : g_pools) CUDA_CHECK(cudaMemPoolTrimTo(kv.second, 0));
}

}  // namespace detail

const void* scratch_pool(cudaStream_t stream) { return detail::pool_of(stream); }

void release_resources() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  detail::matmul_release_all();
  detail::scratch_trim_all();
}

}  // namespace gpumix::kernels::cuda
