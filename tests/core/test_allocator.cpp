// Allocator: capacity, in-use, peak; OutOfMemory with the numbers; the caching pool;
// set_capacity; emulated devices through configure_device. Each test uses its own device
// index (the registry is per process).
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

#include "core/allocator.h"
#include "core/tensor.h"
#include "test_util.h"

namespace gpumix {
namespace {

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

TEST(Allocator, BlockSizes) {
  EXPECT_EQ(Allocator::block_size(1), 64);
  EXPECT_EQ(Allocator::block_size(64), 64);
  EXPECT_EQ(Allocator::block_size(65), 128);
  EXPECT_EQ(Allocator::block_size(4096), 4096);
  EXPECT_EQ(Allocator::block_size(4097), 4096 + 256);
  EXPECT_EQ(Allocator::block_size(1 * MiB), 1 * MiB);
  EXPECT_EQ(Allocator::block_size(1 * MiB + 1), 1 * MiB + 64 * KiB);
  for (int64_t b : {1ll, 100ll, 5000ll, 123457ll, 10000019ll}) {
    EXPECT_GE(Allocator::block_size(b), b);
    EXPECT_LE(Allocator::block_size(b), b + b / 16 + 64);  // at most ~6% waste
  }
}

TEST(Allocator, InUseAndPeak) {
  Allocator a(Device::cpu(100), 1 * MiB);
  EXPECT_EQ(a.capacity(), 1 * MiB);
  EXPECT_EQ(a.stats().in_use, 0);
  void* p1 = a.allocate(1000);
  EXPECT_EQ((uintptr_t)p1 % 64, 0u);
  EXPECT_EQ(a.stats().in_use, 1024);
  void* p2 = a.allocate(100 * KiB);
  EXPECT_EQ((uintptr_t)p2 % 64, 0u);
  const int64_t both = 1024 + Allocator::block_size(100 * KiB);
  EXPECT_EQ(a.stats().in_use, both);
  EXPECT_EQ(a.stats().peak, both);
  a.release(p2, 100 * KiB);
  EXPECT_EQ(a.stats().in_use, 1024);
  EXPECT_EQ(a.stats().peak, both);  // the peak stays
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, 1024);
  void* p3 = a.allocate(64);
  EXPECT_EQ(a.stats().peak, 1024 + 64);
  a.release(p3, 64);
  a.release(p1, 1000);
  EXPECT_EQ(a.stats().in_use, 0);
  EXPECT_EQ(a.stats().peak, 1024 + 64);

  // Zero bytes: no memory, no accounting; release(nullptr) is a no-op.
  const AllocatorStats before = a.stats();
  EXPECT_EQ(a.allocate(0), nullptr);
  a.release(nullptr, 0);
  EXPECT_EQ(a.stats().in_use, before.in_use);
  EXPECT_EQ(a.stats().system_allocs, before.system_allocs);
  EXPECT_THROW_WITH(a.allocate(-5), Error, "negative size", "-5");
}

TEST(Allocator, OutOfMemoryCarriesTheNumbers) {
  const Device dev = Device::cpu(101);
  Allocator a(dev, 1 * MiB);
  try {
    a.allocate(2 * MiB);
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.device, dev);
    EXPECT_EQ(e.requested, 2 * MiB);
    EXPECT_EQ(e.in_use, 0);
    EXPECT_EQ(e.capacity, 1 * MiB);
    const std::string m = e.what();
    for (const char* piece : {"out of memory", "cpu:101", "requested 2.00 MiB", "0 B in use",
                              "1.00 MiB capacity"})
      EXPECT_NE(m.find(piece), std::string::npos) << "lacks \"" << piece << "\": " << m;
  }

  void* held = a.allocate(768 * KiB);
  EXPECT_THROW_WITH(a.allocate(512 * KiB), OutOfMemory, "cpu:101", "requested 512.0 KiB",
                    "768.0 KiB in use", "1.00 MiB capacity");
  try {
    a.allocate(300 * KiB);
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested, 300 * KiB);
    EXPECT_EQ(e.in_use, 768 * KiB);
    EXPECT_EQ(e.capacity, 1 * MiB);
  }
  // OutOfMemory is an Error: generic handlers catch it too.
  EXPECT_THROW(a.allocate(1 * MiB), Error);
  // The failed requests changed nothing: what fits still fits.
  EXPECT_EQ(a.stats().in_use, 768 * KiB);
  void* fits = a.allocate(256 * KiB);
  EXPECT_EQ(a.stats().in_use, 1 * MiB);
  a.release(fits, 256 * KiB);
  a.release(held, 768 * KiB);
  EXPECT_EQ(a.stats().in_use, 0);
}

TEST(Allocator, RepeatedPatternMakesNoNewSystemAllocations) {
  Allocator a(Device::cpu(102), 64 * MiB);
  // A "training step": the same sizes every time, some repeated, odd sizes included.
  const std::vector<int64_t> sizes = {1000, 5000, 70000, 1000, 3 * MiB + 17, 64, 123457};
  int64_t after_first = -1;
  for (int round = 0; round < 5; ++round) {
    std::vector<void*> ptrs;
    for (int64_t s : sizes) ptrs.push_back(a.allocate(s));
    for (size_t i = 0; i < sizes.size(); ++i) a.release(ptrs[i], sizes[i]);
    const AllocatorStats st = a.stats();
    EXPECT_EQ(st.in_use, 0);
    if (round == 0) {
      after_first = st.system_allocs;
      EXPECT_EQ(after_first, (int64_t)sizes.size());
    } else {
      EXPECT_EQ(st.system_allocs, after_first) << "round " << round << " allocated again";
    }
    int64_t expected_cache = 0;
    for (int64_t s : sizes) expected_cache += Allocator::block_size(s);
    EXPECT_EQ(st.cached, expected_cache);
  }
  // A slightly different size within the same block is served from the pool too.
  void* p = a.allocate(123457 - 100);
  EXPECT_EQ(a.stats().system_allocs, after_first);
  a.release(p, 123457 - 100);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached, 0);
}

TEST(Allocator, CacheIsReleasedWhenARequestWouldNotFitOtherwise) {
  Allocator a(Device::cpu(103), 1 * MiB);
  const int64_t b600 = Allocator::block_size(600 * KiB), b700 = Allocator::block_size(700 * KiB);
  void* p = a.allocate(600 * KiB);
  a.release(p, 600 * KiB);
  EXPECT_EQ(a.stats().cached, b600);
  EXPECT_EQ(a.stats().in_use, 0);
  // 600 KiB cached + 700 KiB > 1 MiB: the cache goes, the request succeeds.
  void* q = a.allocate(700 * KiB);
  EXPECT_NE(q, nullptr);
  const AllocatorStats st = a.stats();
  EXPECT_EQ(st.cached, 0);
  EXPECT_EQ(st.in_use, b700);
  EXPECT_EQ(st.system_allocs, 2);
  a.release(q, 700 * KiB);
  // A request that fits beside the cache keeps it.
  void* r = a.allocate(100 * KiB);
  EXPECT_EQ(a.stats().cached, b700);
  a.release(r, 100 * KiB);
}

TEST(Allocator, SetCapacity) {
  Allocator a(Device::cpu(104), 1 * MiB);
  void* p = a.allocate(512 * KiB);
  EXPECT_THROW_WITH(a.set_capacity(256 * KiB), Error, "cpu:104", "256.0 KiB", "512.0 KiB",
                    "already in use");
  EXPECT_EQ(a.capacity(), 1 * MiB);
  a.set_capacity(4 * MiB);
  EXPECT_EQ(a.capacity(), 4 * MiB);
  EXPECT_EQ(a.stats().capacity, 4 * MiB);
  void* q = a.allocate(2 * MiB);
  a.release(q, 2 * MiB);
  EXPECT_EQ(a.stats().cached, 2 * MiB);
  // Shrinking below in-use + cached drops the cache.
  a.set_capacity(1 * MiB);
  EXPECT_EQ(a.stats().cached, 0);
  EXPECT_THROW(a.allocate(600 * KiB), OutOfMemory);
  a.release(p, 512 * KiB);
}

TEST(Allocator, ThreadSafe) {
  Allocator a(Device::cpu(105), 64 * MiB);
  auto work = [&a](int seed) {
    for (int i = 0; i < 2000; ++i) {
      const int64_t bytes = 64 + ((i * 7919 + seed * 104729) % 20000);
      void* p = a.allocate(bytes);
      static_cast<char*>(p)[0] = 1;
      a.release(p, bytes);
    }
  };
  std::thread t1(work, 1), t2(work, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(a.stats().in_use, 0);
}

// ---- emulated devices: configure_device + Tensor::empty --------------------------------------

DeviceProps emulated(int64_t capacity, double slowdown = 1) {
  DeviceProps p;
  p.name = "cpu (emulated)";
  p.capacity = capacity;
  p.slowdown = slowdown;
  p.emulated = true;
  return p;
}

TEST(EmulatedDevice, CapacityIsEnforcedForTensors) {
  const Device dev = Device::cpu(5);
  configure_device(dev, emulated(1 * MiB));
  const DeviceProps props = device_props(dev);
  EXPECT_EQ(props.capacity, 1 * MiB);
  EXPECT_EQ(props.name, "cpu (emulated)");
  EXPECT_TRUE(props.emulated);
  EXPECT_EQ(allocator(dev).capacity(), 1 * MiB);

  // 1.2 MB does not fit in 1 MiB: OutOfMemory, exactly as on a GPU.
  try {
    Tensor::empty({300000}, DType::f32, dev);
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.device, dev);
    EXPECT_EQ(e.requested, 1200000);
    EXPECT_EQ(e.capacity, 1 * MiB);
    const std::string m = e.what();
    EXPECT_NE(m.find("cpu:5 (cpu (emulated))"), std::string::npos) << m;
  }
  {
    Tensor a = Tensor::empty({100000}, DType::f32, dev);  // 400 KB
    Tensor b = Tensor::zeros({100000}, DType::bf16, dev);  // 200 KB
    EXPECT_EQ(allocator(dev).stats().in_use,
              Allocator::block_size(400000) + Allocator::block_size(200000));
    EXPECT_THROW_WITH(Tensor::empty({200000}, DType::f32, dev), OutOfMemory, "cpu:5",
                      "requested 781.2 KiB");
    // The same bytes fit on the unconstrained host.
    Tensor host = Tensor::empty({200000}, DType::f32, Device::cpu());
    EXPECT_EQ(host.numel(), 200000);
    // A copy to the full device fails too.
    EXPECT_THROW(host.to(dev), OutOfMemory);
  }
  // Freed tensors make room again (their blocks are cached, then reused or released).
  Tensor c = Tensor::empty({200000}, DType::f32, dev);
  EXPECT_EQ(c.numel(), 200000);
}

TEST(EmulatedDevice, ConfigureValidates) {
  const Device dev = Device::cpu(6);
  configure_device(dev, emulated(1 * MiB));
  Tensor held = Tensor::empty({128 * 1024}, DType::f32, dev);  // 512 KiB
  EXPECT_THROW_WITH(configure_device(dev, emulated(256 * KiB)), Error, "cpu:6", "256.0 KiB",
                    "512.0 KiB");
  EXPECT_EQ(device_props(dev).capacity, 1 * MiB);  // unchanged after the failure
  EXPECT_THROW_WITH(configure_device(dev, emulated(0)), Error, "cpu:6", "capacity must be positive");
  EXPECT_THROW_WITH(configure_device(dev, emulated(1 * MiB, 0.5)), Error, "cpu:6",
                    "slowdown must be >= 1", "0.5");
  configure_device(dev, emulated(2 * MiB, 2.5));
  EXPECT_EQ(device_props(dev).capacity, 2 * MiB);
  EXPECT_EQ(device_props(dev).slowdown, 2.5);
}

TEST(EmulatedDevice, DefaultsOfARealCpu) {
  const DeviceProps p = device_props(Device::cpu(7));
  EXPECT_EQ(p.capacity, host_memory_bytes());
  EXPECT_GT(p.capacity, 0);
  EXPECT_EQ(p.slowdown, 1);
  EXPECT_FALSE(p.emulated);
  EXPECT_EQ(Device::cpu(7).str(), "cpu:7");
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  const std::vector<Device> devs = available_devices();
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(devs[0], Device::cpu());
}

}  // namespace
}  // namespace gpumix
