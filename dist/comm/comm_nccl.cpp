// The NCCL backend: GPU memory, one GPU per process, bootstrapped through MPI.
//
// Bootstrap (TECH.md §2): the node-local rank (MPI_Comm_split_type SHARED) picks the GPU
// (cudaSetDevice before anything else), rank 0 calls ncclGetUniqueId, MPI_Bcast sends the
// id, every rank calls ncclCommInitRank. Host scalars, barrier and agree() go through an
// MPI communicator kept beside the NCCL one, which also checks before every collective
// that the ranks pass the same counts.
//
// NCCL has no variable-count collectives (docs/method.md §6). Uneven all-gather and
// reduce-scatter run, chosen per call by choose_uneven_algo (comm.h):
//   padded   every shard padded to the largest (M) in a staging buffer of N*M elements
//            ("slots"): copy-in, one in-place ncclAllGather / ncclReduceScatter, copy-out;
//            the padding lives only in the staging buffer (zeroed for the reduction), never
//            in the caller's logical buffers. Equal counts skip the staging entirely.
//   grouped  one ncclBroadcast (all-gather) / ncclReduce (reduce-scatter) per non-empty
//            root inside one ncclGroupStart/End: exact bytes, no staging.
// Callers that keep their shards in the slot layout themselves use the *_slots_device
// calls: in place, no copies.
//
// The device API enqueues on the caller's stream and returns, as NCCL does. The Tensor API
// takes CUDA tensors, enqueued on their device's comm stream after its compute stream's
// work (events; a request's wait() makes the compute stream wait, never the host), and
// host tensors, which go through the MPI communicator. This file is compiled in CI; it
// runs only on a machine with GPUs (one per rank: two ranks on one GPU are refused at
// bootstrap, naming them).
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/stream.h"
#include "dist/comm/comm.h"
#include "dist/comm/comm_mpi.h"

#define GPUMIX_CUDA_CHECK(expr)                                                          \
  do {                                                                                   \
    const cudaError_t gpumix_ce_ = (expr);                                               \
    if (gpumix_ce_ != cudaSuccess)                                                       \
      ::gpumix::detail::throw_error(__FILE__, __LINE__,                                  \
                                    ::gpumix::str("CUDA call '", #expr, "' failed: ",    \
                                                  cudaGetErrorName(gpumix_ce_), " (",    \
                                                  cudaGetErrorString(gpumix_ce_), ")")); \
  } while (0)

#define GPUMIX_NCCL_CHECK(comm, expr)                                                    \
  do {                                                                                   \
    const ncclResult_t gpumix_nr_ = (expr);                                              \
    if (gpumix_nr_ != ncclSuccess && gpumix_nr_ != ncclInProgress) {                     \
      const char* gpumix_last_ = ncclGetLastError(comm);                                 \
      ::gpumix::detail::throw_error(                                                     \
          __FILE__, __LINE__,                                                            \
          ::gpumix::str("NCCL call '", #expr, "' failed: ", ncclGetErrorString(gpumix_nr_), \
                        gpumix_last_ && *gpumix_last_ ? " (" : "",                      \
                        gpumix_last_ ? gpumix_last_ : "",                                \
                        gpumix_last_ && *gpumix_last_ ? ")" : ""));                      \
    }                                                                                    \
  } while (0)

namespace gpumix::dist {
namespace {

// core/dtype.h's table holds NCCL's enum values (core includes no NCCL header): checked here.
static_assert(dtype_info(DType::f32).nccl_type == ncclFloat32 && dtype_info(DType::bf16).nccl_type == ncclBfloat16 &&
                  dtype_info(DType::f16).nccl_type == ncclFloat16 && dtype_info(DType::i32).nccl_type == ncclInt32,
              "kDTypes' nccl_type values are NCCL's ncclDataType_t");
ncclDataType_t nccl_type(DType t) { return (ncclDataType_t)dtype_info(t).nccl_type; }

// Counts valid for this communicator: one per rank, none negative.
std::string check_counts(const std::vector<int64_t>& counts, int size) {
  if ((int)counts.size() != size)
    return str("counts has ", counts.size(), " entries ", detail::format_counts(counts),
               " but there are ", size, " ranks");
  for (size_t r = 0; r < counts.size(); ++r)
    if (counts[r] < 0) return str("counts[", r, "] = ", counts[r], " is negative");
  return "";
}

std::string check_cuda_tensor(const Tensor& t, const char* name) {
  if (!t.defined()) return str(name, " is an undefined tensor");
  if (!t.device().is_cuda())
    return str(name, " is on ", t.device().str(),
               ": the NCCL backend takes CUDA tensors (use the MPI backend for host memory)");
  return "";
}

class NcclComm;

// Tensor-API collective on CUDA tensors: an event on the device's comm stream after the
// enqueued work. wait() makes the device's compute stream wait for it (no host wait), after
// checking NCCL's asynchronous error, so that a failed peer is reported rather than waited
// for at the next host synchronisation.
class NcclRequest : public CommRequest {
 public:
  NcclRequest(NcclComm* comm, CommOp op, Device device, std::vector<Tensor> keep)
      : comm_(comm), op_(op), device_(device), keep_(std::move(keep)) {}
  ~NcclRequest() override {
    try {
      wait();
    } catch (...) {
      // An unwaited request's error is lost by contract (comm.h).
    }
  }
  void wait() override;
  bool done() override { return true; }  // wait() never blocks the host

  Event event_;

 private:
  NcclComm* comm_;
  CommOp op_;
  Device device_;
  std::vector<Tensor> keep_;
  bool waited_ = false;
};

class NcclComm : public DeviceComm {
 public:
  // Over the ranks of `base` (MPI_COMM_WORLD, or a split of it); collective over base.
  NcclComm(MPI_Comm base, const NcclOptions& options) : opt_(options) {
    MpiOptions mo;
    mo.validate = true;
    host_ = make_mpi_comm(base, mo);
    if (MPI_Comm_dup(base, &mpi_) != MPI_SUCCESS) throw Error("MPI_Comm_dup failed for the NCCL communicator");
    rank_ = host_->rank();
    size_ = host_->size();
    set_topology(host_->node_of_rank(), host_->node_names());  // NCCL's ranks are MPI's
    if (const char* env = std::getenv("GPUMIX_NCCL_UNEVEN")) {
      const std::string v = env;
      if (v == "padded")
        opt_.uneven = UnevenAlgo::padded;
      else if (v == "grouped")
        opt_.uneven = UnevenAlgo::grouped;
      else if (v == "auto" || v == "automatic")
        opt_.uneven = UnevenAlgo::automatic;
      else
        GPUMIX_CHECK_INPUT(false, "GPUMIX_NCCL_UNEVEN=", v, " is not one of padded, grouped, auto");
    }

    // The GPU: the node-local rank modulo the visible devices. Errors are agreed, so that
    // every rank throws instead of waiting for the one that failed.
    std::string local;
    MPI_Comm node = MPI_COMM_NULL;
    int local_rank = 0;
    if (MPI_Comm_split_type(mpi_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
      node = MPI_COMM_NULL;
    if (node != MPI_COMM_NULL) MPI_Comm_rank(node, &local_rank);
    int ndev = 0;
    const cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
      local = str("no CUDA device is visible (", ce != cudaSuccess ? cudaGetErrorName(ce) : "0 devices",
                  "): the NCCL backend needs one GPU per rank");
    } else {
      device_ = opt_.device >= 0 ? opt_.device : local_rank % ndev;
      if (device_ >= ndev)
        local = str("device ", device_, " requested but only ", ndev, " are visible");
      else if (cudaSetDevice(device_) != cudaSuccess)
        local = str("cudaSetDevice(", device_, ") failed: ", cudaGetErrorString(cudaGetLastError()));
    }
    if (node != MPI_COMM_NULL) {
      const std::string shared = check_one_rank_per_gpu(node);  // every rank of the node calls it
      if (local.empty()) local = shared;
      MPI_Comm_free(&node);
    }
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (local.empty() && rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) local = str("ncclGetUniqueId failed: ", ncclGetErrorString(r));
    }
    host_->agree("nccl bootstrap", {}, local);
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mpi_) != MPI_SUCCESS)
      host_->abort("MPI_Bcast of the NCCL unique id failed");
    GPUMIX_NCCL_CHECK(nullptr, ncclCommInitRank(&nccl_, size_, id, rank_));
    GPUMIX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GPUMIX_CUDA_CHECK(cudaEventCreateWithFlags(&staging_event_, cudaEventDisableTiming));
  }

  // NCCL runs one rank per GPU (two on one GPU fail inside ncclCommInitRank, or hang): the
  // ranks of this node compare their GPUs first. Collective over `node`.
  std::string check_one_rank_per_gpu(MPI_Comm node) const {
    int n = 1;
    MPI_Comm_size(node, &n);
    const int mine[2] = {rank_, device_};
    std::vector<int> all(2 * (size_t)n);
    if (MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, node) != MPI_SUCCESS) return "";
    for (int q = 0; q < n; ++q)
      if (all[2 * q] != rank_ && all[2 * q + 1] == device_ && device_ >= 0)
        return str("ranks ", std::min(rank_, all[2 * q]), " and ", std::max(rank_, all[2 * q]), " both use GPU ",
                   device_, " of this node, but NCCL runs one rank per GPU; give each process its own GPU "
                   "(--devices cuda:0,cuda:1,...), or run the ranks as threads of one process to share a GPU "
                   "(gpumix train --ranks N --devices cuda:0,cuda:0,...: the local backend)");
    return "";
  }

  ~NcclComm() override {
    if (staging_) {
      cudaDeviceSynchronize();  // as staging(): no cudaFree while an NCCL kernel may run
      cudaFree(staging_);
    }
    if (staging_event_) cudaEventDestroy(staging_event_);
    if (nccl_) ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  }

  // A new NCCL communicator over the ranks of one color, on this rank's GPU, bootstrapped
  // through a split of this one's MPI communicator.
  std::unique_ptr<Comm> split(int color) override {
    GPUMIX_CHECK(color >= 0, "Comm::split: the color must be >= 0, got ", color, " on rank ", rank_);
    MPI_Comm sub = MPI_COMM_NULL;
    if (MPI_Comm_split(mpi_, color, rank_, &sub) != MPI_SUCCESS) host_->abort("MPI_Comm_split for an NCCL split failed");
    NcclOptions o = opt_;
    o.device = device_;
    auto made = std::make_unique<NcclComm>(sub, o);
    MPI_Comm_free(&sub);
    return made;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int device_index() const override { return device_; }
  void* stream() const override { return stream_; }
  UnevenChoice last_uneven_choice() const override { return last_; }
  int64_t staging_allocations() const override { return staging_allocations_; }

  // ---- device API ------------------------------------------------------------------------

  void all_gather_v_device(const void* in, void* out, const std::vector<int64_t>& counts,
                           DType dtype, void* stream) override {
    gather(in, out, counts, dtype, static_cast<cudaStream_t>(stream), check_counts(counts, size_));
  }

  void reduce_scatter_v_device(const void* in, void* out, const std::vector<int64_t>& counts,
                               DType dtype, void* stream) override {
    scatter(in, out, counts, dtype, static_cast<cudaStream_t>(stream), check_counts(counts, size_));
  }

  void all_reduce_sum_device(void* data, int64_t count, DType dtype, void* stream) override {
    all_reduce_impl(data, count, dtype, static_cast<cudaStream_t>(stream), "");
  }

  void broadcast_device(void* data, int64_t count, DType dtype, int root, void* stream) override {
    broadcast_impl(data, count, dtype, root, static_cast<cudaStream_t>(stream), "");
  }

  void all_reduce_impl(void* data, int64_t count, DType dtype, cudaStream_t stream,
                       std::string local) {
    if (local.empty() && count < 0) local = str("count ", count, " is negative");
    if (local.empty() && dtype == DType::i32) local = "reductions take f32 or bf16";
    agree_if(str("nccl all_reduce(", dtype_name(dtype), ") count"), {count}, local);
    if (count > 0)
      GPUMIX_NCCL_CHECK(nccl_, ncclAllReduce(data, data, (size_t)count, nccl_type(dtype), ncclSum,
                                             nccl_, stream));
    record(CommOp::all_reduce,
           comm_payload_bytes(CommOp::all_reduce, std::vector<int64_t>(size_, count), rank_,
                              dtype_size(dtype)),
           0);
  }

  void broadcast_impl(void* data, int64_t count, DType dtype, int root, cudaStream_t stream,
                      std::string local) {
    if (local.empty()) local = detail::check_root(root, size_);
    if (local.empty() && count < 0) local = str("count ", count, " is negative");
    agree_if(str("nccl broadcast(", dtype_name(dtype), ") root, count"), {root, count}, local);
    if (count > 0)
      GPUMIX_NCCL_CHECK(nccl_, ncclBroadcast(data, data, (size_t)count, nccl_type(dtype), root,
                                             nccl_, stream));
    record(CommOp::broadcast,
           comm_payload_bytes(CommOp::broadcast, std::vector<int64_t>(size_, count), rank_,
                              dtype_size(dtype), root),
           0);
  }

  void all_gather_slots_device(void* slots, int64_t slot_count, DType dtype, void* stream) override {
    agree_if(str("nccl all_gather_slots(", dtype_name(dtype), ") slot_count"), {slot_count},
             slot_count < 0 ? "negative slot count" : "");
    if (slot_count == 0) return;
    const size_t esz = dtype_size(dtype);
    char* base = static_cast<char*>(slots);
    GPUMIX_NCCL_CHECK(nccl_, ncclAllGather(base + (size_t)rank_ * slot_count * esz, base,
                                           (size_t)slot_count, nccl_type(dtype), nccl_,
                                           static_cast<cudaStream_t>(stream)));
    record(CommOp::all_gather_v,
           comm_payload_bytes(CommOp::all_gather_v, std::vector<int64_t>(size_, slot_count),
                              rank_, esz),
           0);
  }

  void reduce_scatter_slots_device(void* slots, int64_t slot_count, DType dtype,
                                   void* stream) override {
    agree_if(str("nccl reduce_scatter_slots(", dtype_name(dtype), ") slot_count"), {slot_count},
             slot_count < 0 ? "negative slot count" : "");
    if (slot_count == 0) return;
    const size_t esz = dtype_size(dtype);
    char* base = static_cast<char*>(slots);
    GPUMIX_NCCL_CHECK(nccl_, ncclReduceScatter(base, base + (size_t)rank_ * slot_count * esz,
                                               (size_t)slot_count, nccl_type(dtype), ncclSum,
                                               nccl_, static_cast<cudaStream_t>(stream)));
    record(CommOp::reduce_scatter_v,
           comm_payload_bytes(CommOp::reduce_scatter_v, std::vector<int64_t>(size_, slot_count),
                              rank_, esz),
           0);
  }

  // ---- Tensor API -------------------------------------------------------------------------
  // Host tensors (the trainer's small exchanges, a re-shard's staging) go through the MPI
  // communicator; CUDA tensors through NCCL on their device's comm stream (core/stream.h),
  // after the compute stream's work so far (an event). The request's wait() makes the
  // compute stream wait for the collective: results are ordered before the device's later
  // compute work, and the host reads them through a synchronising copy. A synchronous call
  // is its asynchronous form, waited for.

  void all_gather_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    all_gather_v_async(in, out, counts)->wait();
  }
  CommRequestPtr all_gather_v_async(const Tensor& in, Tensor& out,
                                    const std::vector<int64_t>& counts) override {
    if (on_host(in) && on_host(out)) return host_->all_gather_v_async(in, out, counts);
    std::string local = check_counts(counts, size_);
    if (local.empty()) local = check_cuda_tensor(in, "in");
    if (local.empty()) local = check_cuda_tensor(out, "out");
    if (local.empty()) {
      int64_t total = detail::block_offsets(counts, nullptr);
      if (in.dtype() != out.dtype())
        local = str("in is ", dtype_name(in.dtype()), " but out is ", dtype_name(out.dtype()));
      else if (in.numel() != counts[rank_])
        local = str("in has ", in.numel(), " elements but counts[", rank_, "] = ", counts[rank_]);
      else if (out.numel() != total)
        local = str("out has ", out.numel(), " elements but the counts sum to ", total);
    }
    const DType dt = in.defined() ? in.dtype() : DType::f32;
    gather(local.empty() ? in.raw_data() : nullptr, local.empty() ? out.raw_data() : nullptr,
           counts, dt, local.empty() ? after_compute(out.device()) : nullptr, local);
    return finish_async(CommOp::all_gather_v, out.device(), {in, out});
  }

  void reduce_scatter_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    reduce_scatter_v_async(in, out, counts)->wait();
  }
  CommRequestPtr reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                        const std::vector<int64_t>& counts) override {
    if (on_host(in) && on_host(out)) return host_->reduce_scatter_v_async(in, out, counts);
    std::string local = check_counts(counts, size_);
    if (local.empty()) local = check_cuda_tensor(in, "in");
    if (local.empty()) local = check_cuda_tensor(out, "out");
    if (local.empty()) {
      int64_t total = detail::block_offsets(counts, nullptr);
      if (in.dtype() != out.dtype() || in.dtype() == DType::i32)
        local = str("reductions take f32 or bf16 of one dtype, got in ", dtype_name(in.dtype()),
                    " and out ", dtype_name(out.dtype()));
      else if (in.numel() != total)
        local = str("in has ", in.numel(), " elements but the counts sum to ", total);
      else if (out.numel() != counts[rank_])
        local = str("out has ", out.numel(), " elements but counts[", rank_, "] = ", counts[rank_]);
    }
    const DType dt = in.defined() ? in.dtype() : DType::f32;
    scatter(local.empty() ? in.raw_data() : nullptr, local.empty() ? out.raw_data() : nullptr,
            counts, dt, local.empty() ? after_compute(out.device()) : nullptr, local);
    return finish_async(CommOp::reduce_scatter_v, out.device(), {in, out});
  }

  void all_reduce_sum(Tensor& t) override { all_reduce_sum_async(t)->wait(); }
  CommRequestPtr all_reduce_sum_async(Tensor& t) override {
    if (on_host(t)) return host_->all_reduce_sum_async(t);
    const std::string local = check_cuda_tensor(t, "the tensor");
    all_reduce_impl(local.empty() ? t.raw_data() : nullptr, t.defined() ? t.numel() : 0,
                    t.defined() ? t.dtype() : DType::f32, local.empty() ? after_compute(t.device()) : nullptr,
                    local);
    return finish_async(CommOp::all_reduce, t.device(), {t});
  }

  void broadcast(Tensor& t, int root) override { broadcast_async(t, root)->wait(); }
  CommRequestPtr broadcast_async(Tensor& t, int root) override {
    if (on_host(t)) return host_->broadcast_async(t, root);
    const std::string local = check_cuda_tensor(t, "the tensor");
    broadcast_impl(local.empty() ? t.raw_data() : nullptr, t.defined() ? t.numel() : 0,
                   t.defined() ? t.dtype() : DType::f32, root,
                   local.empty() ? after_compute(t.device()) : nullptr, local);
    return finish_async(CommOp::broadcast, t.device(), {t});
  }

  // ---- host side: through MPI -------------------------------------------------------------

  double all_reduce_sum(double x) override { return host_->all_reduce_sum(x); }
  double all_reduce_max(double x) override { return host_->all_reduce_max(x); }
  void barrier() override {
    // Device work queued on this GPU's streams first (ours and the Tensor API's), so that
    // the barrier orders it too.
    GPUMIX_CUDA_CHECK(cudaDeviceSynchronize());
    host_->barrier();
  }
  void agree(const std::string& what, const std::vector<int64_t>& values,
             const std::string& local_error) override {
    host_->agree(what, values, local_error);
  }
  void abort(const std::string& reason) override {
    if (nccl_) ncclCommAbort(nccl_);
    nccl_ = nullptr;
    host_->abort(reason);
  }

  // The Tensor API's requests: calls and bytes were recorded when enqueued.
  void finish_request(CommOp op, double seconds) { record_seconds(op, seconds); }
  ncclComm_t nccl() const { return nccl_; }

 private:
  NcclOptions opt_;
  std::unique_ptr<Comm> host_;
  MPI_Comm mpi_ = MPI_COMM_NULL;  // this communicator's ranks: the NCCL bootstrap, split()
  int rank_ = 0;
  int size_ = 1;
  int device_ = -1;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  // Staging buffer of the padded algorithm, shared by all calls: an event orders its reuse
  // across streams.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  int64_t staging_allocations_ = 0;
  cudaEvent_t staging_event_ = nullptr;
  UnevenChoice last_;

  // Every rank throws when the ranks disagree or one found a local error. With validation
  // off a local error aborts the job: the other ranks could not be told.
  void agree_if(const std::string& what, const std::vector<int64_t>& values,
                const std::string& local) {
    if (opt_.validate)
      host_->agree(what, values, local);
    else if (!local.empty())
      abort(str(what, ": ", local));
  }

  UnevenChoice choose(const std::vector<int64_t>& counts, size_t esz) {
    UnevenChoice c = choose_uneven_algo(counts, esz, opt_.cost);
    if (opt_.uneven != UnevenAlgo::automatic) c.algo = opt_.uneven;
    bool even = true;
    for (int64_t x : counts) even = even && x == counts[0];
    if (even) c.algo = UnevenAlgo::padded;  // the plain collective, no padding at all
    last_ = c;
    return c;
  }

  // The staging buffer of the padded uneven collectives. It grows only here, before the
  // collective that needs it enqueues anything, and only once the whole device is idle:
  // cudaMalloc / cudaFree while NCCL kernels run can deadlock (cudaFree synchronises the
  // device, and an NCCL kernel in flight waits for peers that may be waiting on this rank;
  // NCCL's "Using multiple NCCL communicators concurrently", NVIDIA/nccl#194), and earlier
  // collectives of this or another communicator may still run on the device, enqueued and
  // not waited for. The size rounds up to a power of two (1 MiB at least), so that it grows a
  // few times in a run, not once per new size.
  static constexpr size_t kStagingMinBytes = (size_t)1 << 20;
  char* staging(size_t bytes, cudaStream_t stream) {
    if (bytes > staging_bytes_) {
      size_t grown = kStagingMinBytes;
      while (grown < bytes) grown *= 2;
      GPUMIX_CUDA_CHECK(cudaDeviceSynchronize());  // no NCCL kernel in flight from here on
      if (staging_) GPUMIX_CUDA_CHECK(cudaFree(staging_));
      staging_ = nullptr;
      staging_bytes_ = 0;
      GPUMIX_CUDA_CHECK(cudaMalloc(&staging_, grown));
      staging_bytes_ = grown;
      ++staging_allocations_;
    }
    GPUMIX_CUDA_CHECK(cudaStreamWaitEvent(stream, staging_event_, 0));
    return static_cast<char*>(staging_);
  }
  void staging_done(cudaStream_t stream) {
    GPUMIX_CUDA_CHECK(cudaEventRecord(staging_event_, stream));
  }

  void gather(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
              cudaStream_t stream, const std::string& local) {
    agree_if(str("nccl all_gather_v(", dtype_name(dtype), ") counts"), counts, local);
    std::vector<int64_t> off;
    const int64_t total = detail::block_offsets(counts, &off);
    if (total == 0) return;
    const size_t esz = dtype_size(dtype);
    const ncclDataType_t type = nccl_type(dtype);
    char* o = static_cast<char*>(out);
    const UnevenChoice c = choose(counts, esz);
    if (c.algo == UnevenAlgo::grouped) {
      GPUMIX_NCCL_CHECK(nccl_, ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        if (counts[r] == 0) continue;
        char* dst = o + off[r] * (int64_t)esz;
        GPUMIX_NCCL_CHECK(nccl_, ncclBroadcast(r == rank_ ? in : dst, dst, (size_t)counts[r], type,
                                               r, nccl_, stream));
      }
      GPUMIX_NCCL_CHECK(nccl_, ncclGroupEnd());
    } else {
      const int64_t m = *std::max_element(counts.begin(), counts.end());
      if (m * size_ == total) {  // even: straight into out (in place when in is out's block)
        GPUMIX_NCCL_CHECK(nccl_, ncclAllGather(in, o, (size_t)m, type, nccl_, stream));
      } else {
        char* slots = staging((size_t)(m * size_) * esz, stream);
        if (counts[rank_] > 0)
          GPUMIX_CUDA_CHECK(cudaMemcpyAsync(slots + (size_t)(rank_ * m) * esz, in,
                                            (size_t)counts[rank_] * esz, cudaMemcpyDeviceToDevice,
                                            stream));
        GPUMIX_NCCL_CHECK(nccl_, ncclAllGather(slots + (size_t)(rank_ * m) * esz, slots,
                                               (size_t)m, type, nccl_, stream));
        for (int r = 0; r < size_; ++r)
          if (counts[r] > 0 && !(r == rank_ && in == o + off[r] * (int64_t)esz))
            GPUMIX_CUDA_CHECK(cudaMemcpyAsync(o + off[r] * (int64_t)esz,
                                              slots + (size_t)(r * m) * esz,
                                              (size_t)counts[r] * esz, cudaMemcpyDeviceToDevice,
                                              stream));
        staging_done(stream);
      }
    }
    record(CommOp::all_gather_v, comm_payload_bytes(CommOp::all_gather_v, counts, rank_, esz), 0);
  }

  void scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
               cudaStream_t stream, const std::string& local_in) {
    std::string local = local_in;
    if (local.empty() && dtype == DType::i32) local = "reductions take f32 or bf16";
    agree_if(str("nccl reduce_scatter_v(", dtype_name(dtype), ") counts"), counts, local);
    std::vector<int64_t> off;
    const int64_t total = detail::block_offsets(counts, &off);
    if (total == 0) return;
    const size_t esz = dtype_size(dtype);
    const ncclDataType_t type = nccl_type(dtype);
    const char* i = static_cast<const char*>(in);
    const UnevenChoice c = choose(counts, esz);
    if (c.algo == UnevenAlgo::grouped) {
      GPUMIX_NCCL_CHECK(nccl_, ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        if (counts[r] == 0) continue;
        GPUMIX_NCCL_CHECK(nccl_, ncclReduce(i + off[r] * (int64_t)esz, r == rank_ ? out : nullptr,
                                            (size_t)counts[r], type, ncclSum, r, nccl_, stream));
      }
      GPUMIX_NCCL_CHECK(nccl_, ncclGroupEnd());
    } else {
      const int64_t m = *std::max_element(counts.begin(), counts.end());
      if (m * size_ == total) {  // even
        GPUMIX_NCCL_CHECK(nccl_, ncclReduceScatter(i, out, (size_t)m, type, ncclSum, nccl_, stream));
      } else {
        // Slots of m elements; the padding tails are zero so that they add nothing.
        char* slots = staging((size_t)(m * size_) * esz, stream);
        for (int r = 0; r < size_; ++r) {
          char* slot = slots + (size_t)(r * m) * esz;
          if (counts[r] > 0)
            GPUMIX_CUDA_CHECK(cudaMemcpyAsync(slot, i + off[r] * (int64_t)esz, (size_t)counts[r] * esz,
                                              cudaMemcpyDeviceToDevice, stream));
          if (counts[r] < m)
            GPUMIX_CUDA_CHECK(cudaMemsetAsync(slot + (size_t)counts[r] * esz, 0,
                                              (size_t)(m - counts[r]) * esz, stream));
        }
        char* mine = slots + (size_t)(rank_ * m) * esz;
        GPUMIX_NCCL_CHECK(nccl_, ncclReduceScatter(slots, mine, (size_t)m, type, ncclSum, nccl_, stream));
        if (counts[rank_] > 0)
          GPUMIX_CUDA_CHECK(cudaMemcpyAsync(out, mine, (size_t)counts[rank_] * esz,
                                            cudaMemcpyDeviceToDevice, stream));
        staging_done(stream);
      }
    }
    record(CommOp::reduce_scatter_v,
           comm_payload_bytes(CommOp::reduce_scatter_v, counts, rank_, esz), 0);
  }

  static bool on_host(const Tensor& t) { return t.defined() && t.device().is_cpu(); }

  // The device's comm stream, made to wait for its compute stream's work so far (the
  // producers of the buffers).
  static cudaStream_t after_compute(Device device) {
    Event ready;
    ready.record(device, Stream::compute);
    ready.wait(device, Stream::comm);
    return static_cast<cudaStream_t>(stream_handle(device, Stream::comm));
  }

  // Tensor API: the bytes were recorded when enqueued; the request holds an event after
  // the enqueued work (a local error has thrown before this on every rank).
  CommRequestPtr finish_async(CommOp op, Device device, std::vector<Tensor> keep) {
    auto req = std::make_unique<NcclRequest>(this, op, device, std::move(keep));
    req->event_.record(device, Stream::comm);
    return req;
  }
};

void NcclRequest::wait() {
  if (waited_) return;
  waited_ = true;
  const double start = detail::now_seconds();
  ncclResult_t async_error = ncclSuccess;
  GPUMIX_NCCL_CHECK(comm_->nccl(), ncclCommGetAsyncError(comm_->nccl(), &async_error));
  if (async_error != ncclSuccess && async_error != ncclInProgress)
    comm_->abort(str(comm_op_name(op_), ": NCCL reported an asynchronous error: ", ncclGetErrorString(async_error)));
  // The compute stream waits for the collective; the buffers it used may be released
  // after this (the allocator reuses blocks on the compute stream only).
  event_.wait(device_, Stream::compute);
  keep_.clear();
  comm_->finish_request(op_, detail::seconds_since(start));
}

}  // namespace

std::unique_ptr<DeviceComm> make_nccl_comm(const NcclOptions& options) {
  return std::make_unique<NcclComm>(MPI_COMM_WORLD, options);
}

}  // namespace gpumix::dist
