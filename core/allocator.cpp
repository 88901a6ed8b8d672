#include "core/allocator.h"

#include <cstdlib>

#include "core/runtime.h"

namespace gpumix {

OutOfMemory::OutOfMemory(Device device, int64_t requested, int64_t in_use, int64_t capacity)
    : Error(str("out of memory on ", device.str(), " (", device_props(device).name, "): requested ",
                format_bytes(requested), " with ", format_bytes(in_use), " in use of ",
                format_bytes(capacity), " capacity; use a smaller batch or micro-batch, a smaller "
                "model, or give this device a smaller share of the state")),
      device(device), requested(requested), in_use(in_use), capacity(capacity) {}

Allocator::Allocator(Device device, int64_t capacity) : device_(device) {
  stats_.capacity = capacity;
}

Allocator::~Allocator() { empty_cache_locked(); }

int64_t Allocator::block_size(int64_t bytes) {
  // Small blocks round to 64 B; larger ones to 1/16 of their power of two, so that a pool
  // keyed by exact block size still serves sizes that differ slightly (e.g. the last
  // micro-batch) with at most ~6% waste.
  if (bytes <= 4096) return (bytes + 63) / 64 * 64;
  int64_t pow2 = 4096;
  while (pow2 * 2 <= bytes) pow2 *= 2;
  const int64_t step = pow2 / 16;
  return (bytes + step - 1) / step * step;
}

void* Allocator::allocate(int64_t bytes) {
  GPUMIX_CHECK(bytes >= 0, "allocate: negative size ", bytes);
  if (bytes == 0) return nullptr;
  const int64_t size = block_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pool_.find(size);
  if (it != pool_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    stats_.cached -= size;
    stats_.in_use += size;
    if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
    return p;
  }
  if (stats_.in_use + size > stats_.capacity)
    throw OutOfMemory(device_, bytes, stats_.in_use, stats_.capacity);
  if (stats_.in_use + stats_.cached + size > stats_.capacity) empty_cache_locked();
  void* p = system_alloc(size);
  stats_.system_allocs++;
  stats_.in_use += size;
  if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
  return p;
}

void Allocator::release(void* ptr, int64_t bytes) {
  if (!ptr) return;
  const int64_t size = block_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.in_use -= size;
  stats_.cached += size;
  pool_[size].push_back(ptr);
}

AllocatorStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int64_t Allocator::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.capacity;
}

void Allocator::set_capacity(int64_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  GPUMIX_CHECK(capacity >= stats_.in_use, "cannot set the capacity of ", device_.str(), " to ",
               format_bytes(capacity), ": ", format_bytes(stats_.in_use), " are already in use");
  stats_.capacity = capacity;
  if (stats_.in_use + stats_.cached > capacity) empty_cache_locked();
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.in_use;
}

void Allocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  empty_cache_locked();
}

void Allocator::empty_cache_locked() {
  if (pool_.empty()) return;
  device_runtime(device_).synchronize(device_);  // queued work may still use cached blocks
  for (auto& [size, blocks] : pool_)
    for (void* p : blocks) system_free(p);
  pool_.clear();
  stats_.cached = 0;
}

void* Allocator::system_alloc(int64_t bytes) {
  void* p = device_runtime(device_).alloc(device_, bytes);
  if (!p) throw OutOfMemory(device_, bytes, stats_.in_use, stats_.capacity);
  return p;
}

void Allocator::system_free(void* ptr) { device_runtime(device_).free(device_, ptr); }

}  // namespace gpumix
