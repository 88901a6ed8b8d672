// The emulated NCCL (kernels/cuda_emulator/nccl.cpp) on emulated device buffers.
//
// Under mpirun -np 2 (meson test cuda_emulator_nccl_2ranks): each collective against MPI's
// own on host copies of the same data (bf16 sums against round(a + b) per element), in
// place and not, grouped calls, and stream order (a collective behind slow stream work has
// not run when the call returns). Started alone (cuda_emulator_nccl): a one-rank
// communicator without MPI and the refusals (death tests). Its own main: MPI at
// MPI_THREAD_MULTIPLE, rank 0 prints, every rank exits with the worst status.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda_emulator/emulator.h"

namespace {

int g_rank = 0, g_size = 1;

#define CU(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define NC(expr) ASSERT_EQ((expr), ncclSuccess) << #expr

template <class T>
T* dev_copy(const std::vector<T>& h) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // pageable uploads land on the legacy stream
  return p;
}

template <class T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

std::vector<float> randoms(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

struct World {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  World() {
    EXPECT_EQ(cudaSetDevice(g_rank % 2), cudaSuccess);
    ncclUniqueId id;
    if (g_rank == 0) EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    if (g_size > 1) MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    EXPECT_EQ(ncclCommInitRank(&comm, g_size, id, g_rank), ncclSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~World() {
    cudaStreamSynchronize(stream);
    ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }
};

// ---- two ranks ---------------------------------------------------------------------------

TEST(Nccl2, AllGatherMatchesMpi) {
  World w;
  const size_t n = 1000;
  const std::vector<float> mine = randoms(n, 10 + g_rank);
  std::vector<float> want(n * g_size);
  MPI_Allgather(mine.data(), n, MPI_FLOAT, want.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
  // Out of place.
  float* send = dev_copy(mine);
  float* recv = nullptr;
  CU(cudaMalloc(&recv, n * g_size * 4));
  NC(ncclAllGather(send, recv, n, ncclFloat32, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(recv, n * g_size), want);
  // In place: sendbuff = recvbuff + rank * n.
  CU(cudaMemset(recv, 0xff, n * g_size * 4));
  CU(cudaMemcpy(recv + g_rank * n, mine.data(), n * 4, cudaMemcpyHostToDevice));
  CU(cudaDeviceSynchronize());
  NC(ncclAllGather(recv + g_rank * n, recv, n, ncclFloat32, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(recv, n * g_size), want);
  cudaFree(send);
  cudaFree(recv);
}

TEST(Nccl2, ReduceScatterAndAllReduceMatchMpi) {
  World w;
  const size_t n = 513;
  const std::vector<float> mine = randoms(n * g_size, 20 + g_rank);
  std::vector<float> want_rs(n), want_ar(n * g_size);
  MPI_Reduce_scatter_block(mine.data(), want_rs.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(mine.data(), want_ar.data(), n * g_size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  float* send = dev_copy(mine);
  float* recv = nullptr;
  CU(cudaMalloc(&recv, n * g_size * 4));
  NC(ncclReduceScatter(send, recv, n, ncclFloat32, ncclSum, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(recv, n), want_rs);  // two ranks: a + b, the same bits in any order
  NC(ncclAllReduce(send, send, n * g_size, ncclFloat32, ncclSum, w.comm, w.stream));  // in place
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(send, n * g_size), want_ar);
  cudaFree(send);
  cudaFree(recv);
}

TEST(Nccl2, Bf16AndInt32Reductions) {
  World w;
  const size_t n = 300;
  const std::vector<float> f = randoms(n * g_size, 30 + g_rank);
  std::vector<uint16_t> mine(f.size());
  for (size_t i = 0; i < f.size(); ++i) mine[i] = gpumix::f32_to_bf16_bits(f[i]);
  std::vector<uint16_t> all(mine.size() * g_size);
  MPI_Allgather(mine.data(), mine.size(), MPI_UINT16_T, all.data(), mine.size(), MPI_UINT16_T, MPI_COMM_WORLD);
  uint16_t* send = dev_copy(mine);
  uint16_t* recv = nullptr;
  CU(cudaMalloc(&recv, n * 2));
  // In place, as comm_nccl's padded path: recvbuff = sendbuff + rank * n.
  NC(ncclReduceScatter(send, send + g_rank * n, n, ncclBfloat16, ncclSum, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  const std::vector<uint16_t> got = host_copy(send + g_rank * n, n);
  for (size_t i = 0; i < n; ++i) {
    float s = gpumix::bf16_bits_to_f32(all[g_rank * n + i]);
    for (int r = 1; r < g_size; ++r)
      s = gpumix::bf16_bits_to_f32(gpumix::f32_to_bf16_bits(s + gpumix::bf16_bits_to_f32(all[r * mine.size() + g_rank * n + i])));
    ASSERT_EQ(got[i], gpumix::f32_to_bf16_bits(s)) << i;
  }
  std::vector<int32_t> ints(n);
  for (size_t i = 0; i < n; ++i) ints[i] = (int32_t)(i * 7 + g_rank * 1000);
  std::vector<int32_t> want(n);
  MPI_Allreduce(ints.data(), want.data(), n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  int32_t* di = dev_copy(ints);
  NC(ncclAllReduce(di, di, n, ncclInt32, ncclSum, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(di, n), want);
  cudaFree(send);
  cudaFree(recv);
  cudaFree(di);
}

TEST(Nccl2, BroadcastReduceAndGroups) {
  World w;
  const size_t n = 64;
  const std::vector<float> mine = randoms(n, 40 + g_rank);
  std::vector<float> from1 = mine;
  MPI_Bcast(from1.data(), n, MPI_FLOAT, 1, MPI_COMM_WORLD);
  std::vector<float> sum0(n);
  MPI_Reduce(mine.data(), sum0.data(), n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  float* d = dev_copy(mine);
  float* out = nullptr;
  CU(cudaMalloc(&out, n * 4));
  NC(ncclBroadcast(d, out, n, ncclFloat32, 1, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(out, n), from1);
  NC(ncclReduce(d, g_rank == 0 ? out : nullptr, n, ncclFloat32, ncclSum, 0, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  if (g_rank == 0) EXPECT_EQ(host_copy(out, n), sum0);

  // A group as comm_nccl's grouped all-gather: one broadcast per root into its slice.
  std::vector<float> want(n * g_size);
  MPI_Allgather(mine.data(), n, MPI_FLOAT, want.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
  float* all = nullptr;
  CU(cudaMalloc(&all, n * g_size * 4));
  NC(ncclGroupStart());
  for (int r = 0; r < g_size; ++r)
    NC(ncclBroadcast(r == g_rank ? d : all + r * n, all + r * n, n, ncclFloat32, r, w.comm, w.stream));
  NC(ncclGroupEnd());
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(all, n * g_size), want);
  cudaFree(d);
  cudaFree(out);
  cudaFree(all);
}

TEST(Nccl2, CollectivesAreStreamWork) {
  World w;
  const size_t n = 256;
  float* d = dev_copy(std::vector<float>(n, 1.0f));
  float* out = nullptr;
  CU(cudaMalloc(&out, n * 4));
  float* pinned = nullptr;
  CU(cudaMallocHost(&pinned, n * 4));
  // The stream held until the host has read (a sleep there was outlasted by a host thread
  // descheduled on a loaded machine); a failed assertion's return drops the promise, which
  // releases it too.
  std::promise<void> open;
  const std::shared_future<void> opened = open.get_future().share();
  cuda_emulator::enqueue(w.stream, "gate", [opened] { opened.wait(); });
  NC(ncclAllReduce(d, out, n, ncclFloat32, ncclSum, w.comm, w.stream));
  CU(cudaMemcpyAsync(pinned, out, n * 4, cudaMemcpyDeviceToHost, w.stream));
  const std::vector<float> early(pinned, pinned + n);  // before any sync: still poison
  open.set_value();
  CU(cudaStreamSynchronize(w.stream));
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isnan(early[i])) << i;
    ASSERT_EQ(pinned[i], (float)g_size) << i;
  }
  cudaFree(d);
  cudaFree(out);
  cudaFreeHost(pinned);
}

// ---- one rank, no MPI ---------------------------------------------------------------------

TEST(Nccl1, OneRankCopies) {
  World w;
  float* d = dev_copy(randoms(32, 1));
  float* out = nullptr;
  CU(cudaMalloc(&out, 32 * 4));
  NC(ncclAllGather(d, out, 32, ncclFloat32, w.comm, w.stream));
  CU(cudaStreamSynchronize(w.stream));
  EXPECT_EQ(host_copy(out, 32), host_copy(d, 32));
  ncclResult_t async = ncclInternalError;
  NC(ncclCommGetAsyncError(w.comm, &async));
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)");
  cudaFree(d);
  cudaFree(out);
}

TEST(Nccl1DeathTest, HostBuffersAndUnmodelledOpsAreRefused) {
  World w;
  std::vector<float> host(32);
  float* d = dev_copy(host);
  EXPECT_DEATH(ncclAllReduce(host.data(), d, 32, ncclFloat32, ncclSum, w.comm, w.stream),
               "ncclAllReduce sendbuff: .* must lie in one live device allocation, but it is not device memory");
  EXPECT_DEATH(ncclAllReduce(d, d, 33, ncclFloat32, ncclSum, w.comm, w.stream), "ends 4 bytes past it");
  EXPECT_DEATH(ncclAllReduce(d, d, 32, ncclFloat32, ncclMax, w.comm, w.stream), "only ncclSum is emulated");
  EXPECT_DEATH(ncclAllReduce(d, d, 16, ncclFloat64, ncclSum, w.comm, w.stream),
               "reductions of ncclFloat64 are not emulated");
  cudaFree(d);
}

}  // namespace

int main(int argc, char** argv) {
  setenv("GPUMIX_EMULATED_GPU_COUNT", "2", 1);  // rank r on emulated GPU r % 2
  const bool under_mpi = getenv("OMPI_COMM_WORLD_SIZE") != nullptr || getenv("PMI_SIZE") != nullptr;
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  if (!under_mpi) {
    ::testing::GTEST_FLAG(filter) = "Nccl1*";
    return RUN_ALL_TESTS();
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    fprintf(stderr, "MPI provides thread level %d, MPI_THREAD_MULTIPLE needed\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  ::testing::GTEST_FLAG(filter) = "Nccl2*";
  if (g_rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
