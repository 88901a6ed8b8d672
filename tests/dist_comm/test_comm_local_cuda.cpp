// The local backend on device buffers (CUDA builds): thread ranks on logical cuda devices
// that share GPU 0 (and, where there are two GPUs, ranks split across GPUs 0 and 1), every
// collective against the same sequential references as the host tests, bitwise (the
// device path adds in rank order in fp32 too), in place and asynchronously; a collective
// mixing host and device buffers fails on every rank. Without a GPU every test skips,
// saying why.
#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "core/runtime.h"
#include "tests/dist_comm/comm_test_util.h"

namespace gpumix::dist {
namespace {

using namespace test;  // the shared references and inputs (comm_test_util.h)

class CommLocalCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpus_ = cuda_device_count(&why);
    if (gpus_ == 0) GTEST_SKIP() << "no CUDA device: " << why;
  }
  int gpus_ = 0;
};

// Rank r's logical device: cuda:r, on GPU 0, or on GPU r % 2 when `spread` (two GPUs).
Device rank_device(int r, bool spread) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const int ordinal = spread ? r % 2 : 0;
  const Device d = Device::cuda(r + (spread ? 8 : 0));  // a fresh logical device per layout
  DeviceProps p = gpu_props(ordinal);
  p.ordinal = ordinal;
  configure_device(d, p);
  return d;
}

Tensor on(Device d, const std::vector<float>& v) {
  return Tensor::from_vector(v, Shape{(int64_t)v.size()}).to(d);
}

void expect_every_collective(bool spread) {
  for (int n = 1; n <= 4; ++n) {
    for (const std::vector<int64_t>& counts : count_patterns(n)) {
      run_local(n, [&](Comm& comm) {
        const int r = comm.rank();
        const Device d = rank_device(r, spread);
        const std::string where = str("n ", n, " rank ", r, spread ? " (two GPUs)" : "");
        Tensor in = on(d, rank_input(r, counts[r]));
        Tensor out = Tensor::full(Shape{sum_of(counts)}, -7.0f, DType::f32, d);
        comm.all_gather_v(in, out, counts);
        EXPECT_TRUE(bitwise_equal("all_gather_v " + where, out.to_vector(), gather_reference(counts)));
        Tensor full = on(d, rank_input(r, sum_of(counts)));
        Tensor mine = Tensor::full(Shape{counts[r]}, -7.0f, DType::f32, d);
        comm.reduce_scatter_v(full, mine, counts);
        EXPECT_TRUE(bitwise_equal("reduce_scatter_v " + where, mine.to_vector(), scatter_reference(counts, r)));
        // In place, asynchronously: the prefetch of the sharded engine.
        const int64_t off = offsets_of(counts)[r];
        Tensor buf = Tensor::full(Shape{sum_of(counts)}, -7.0f, DType::f32, d);
        Tensor slice = buf.flat_slice(off, counts[r]);
        slice.copy_from(on(d, rank_input(r, counts[r])));
        comm.all_gather_v_async(slice, buf, counts)->wait();
        EXPECT_TRUE(bitwise_equal("async in-place all_gather_v " + where, buf.to_vector(), gather_reference(counts)));
        Tensor slot = full.flat_slice(off, counts[r]);
        comm.reduce_scatter_v(full, slot, counts);
        EXPECT_TRUE(bitwise_equal("in-place reduce_scatter_v " + where, slot.to_vector(), scatter_reference(counts, r)));
      });
    }
    run_local(n, [&](Comm& comm) {
      const Device d = rank_device(comm.rank(), spread);
      Tensor t = on(d, rank_input(comm.rank(), 3000, 3));
      comm.all_reduce_sum(t);
      std::vector<float> ref(3000, 0.0f);
      for (int q = 0; q < n; ++q) {
        const std::vector<float> v = rank_input(q, 3000, 3);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = q == 0 ? v[i] : ref[i] + v[i];
      }
      EXPECT_TRUE(bitwise_equal("all_reduce", t.to_vector(), ref));
      Tensor b = on(d, rank_input(comm.rank(), 37));
      comm.broadcast(b, n - 1);
      EXPECT_TRUE(bitwise_equal("broadcast", b.to_vector(), rank_input(n - 1, 37)));
    });
  }
}

TEST_F(CommLocalCuda, EveryCollectiveMatchesTheReferenceBitwiseOnOneGpu) { expect_every_collective(false); }

TEST_F(CommLocalCuda, EveryCollectiveMatchesTheReferenceBitwiseAcrossTwoGpus) {
  if (gpus_ < 2) GTEST_SKIP() << "one GPU: the ranks cannot span two";
  expect_every_collective(true);
}

TEST_F(CommLocalCuda, HostAndDeviceBuffersInOneCollectiveFailOnEveryRank) {
  std::vector<std::string> errors(2);
  try {
    run_local(2, [&](Comm& comm) {
      const int r = comm.rank();
      const Device d = r == 0 ? Device::cpu() : rank_device(r, false);
      Tensor in = Tensor::zeros({2}, DType::f32, d), out = Tensor::zeros({4}, DType::f32, d);
      try {
        comm.all_gather_v(in, out, {2, 2});
      } catch (const CollectiveError& e) {
        errors[r] = e.what();
        throw;
      }
    });
  } catch (const std::exception&) {
  }
  for (const std::string& e : errors) EXPECT_NE(e.find("host buffers or device buffers on every rank"), std::string::npos) << e;
}

}  // namespace
}  // namespace gpumix::dist
