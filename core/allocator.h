// Per-device memory allocator: a capacity, bytes in use and their peak, and a caching pool.
//
// - Past the capacity, allocate() throws OutOfMemory with the request, the bytes in use,
//   the capacity and the device: on an emulated device exactly as a real GPU would fail.
// - Freed blocks are kept in a pool keyed by their rounded size and reused, so that a
//   training step, which allocates the same sizes every time, makes no system allocation
//   after the first step. Cached blocks count against the capacity; when a request would
//   not fit, the cache is released first.
// - Thread-safe: ranks that run as threads of one process each use their own device, but
//   tests may share one.
// - On a cuda device the system allocator is cudaMalloc / cudaFree on the device's GPU
//   (DeviceProps::ordinal), and the default capacity is the GPU's free memory when the
//   device is first used (or `mem=` of the device spec). The pool is stream-ordered: a
//   freed block is reused at once, safe only because its next user runs on the same
//   stream as its last, the device's compute stream, where every core op runs. A tensor
//   that another stream uses (comm, offload) must be joined back to the compute stream
//   (Event::record on that stream, Event::wait on compute) before it is dropped.
//   empty_cache() synchronises the device before it returns blocks to the system.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace gpumix {

class OutOfMemory : public Error {
 public:
  OutOfMemory(Device device, int64_t requested, int64_t in_use, int64_t capacity);
  Device device;
  int64_t requested, in_use, capacity;
};

struct AllocatorStats {
  int64_t capacity = 0;
  int64_t in_use = 0;      // bytes held by live tensors (rounded block sizes)
  int64_t peak = 0;        // highest in_use since the last reset_peak()
  int64_t cached = 0;      // bytes in the pool, free for reuse
  int64_t system_allocs = 0;  // calls to the system allocator so far
};

class Allocator {
 public:
  Allocator(Device device, int64_t capacity);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns memory for `bytes` (64-byte aligned; nullptr for 0 bytes).
  void* allocate(int64_t bytes);
  void release(void* ptr, int64_t bytes);

  AllocatorStats stats() const;
  int64_t capacity() const;
  void set_capacity(int64_t capacity);
  void reset_peak();
  void empty_cache();

  // Rounded size of a block holding `bytes`: what in_use and peak count.
  static int64_t block_size(int64_t bytes);

 private:
  void* system_alloc(int64_t bytes);
  void system_free(void* ptr);
  void empty_cache_locked();

  Device device_;
  mutable std::mutex mutex_;
  AllocatorStats stats_;
  std::map<int64_t, std::vector<void*>> pool_;  // block size -> free blocks
};

// The allocator of a device (created on first use, lives for the process).
Allocator& allocator(Device device);

}  // namespace gpumix
