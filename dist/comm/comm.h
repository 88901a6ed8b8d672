// Communication between ranks: the collectives that uneven sharded data parallelism needs
// (docs/method.md §5-6), behind one interface with three backends.
//
//   local  ranks are threads of one process (tests, teaching, emulation on one machine):
//          LocalGroup / run_local. Host buffers, or device buffers on the same or different
//          GPUs (copies and adds on each rank's comm stream, comm_local.cpp). Reductions add
//          rank 0 + rank 1 + ... in fp32, so results are bitwise reproducible and equal on
//          every rank.
//   mpi    ranks are processes started by mpirun; host memory (Debian's Open MPI is not
//          CUDA-aware: tensors on a GPU are staged through host copies). MpiSession +
//          make_mpi_comm.
//   nccl   GPU memory, one GPU per process, bootstrapped through MPI: make_nccl_comm (host
//          tensors go through MPI). Its device-pointer API lives in DeviceComm below.
//
// Semantics, the same on every backend:
//   - Tensors are contiguous. Reductions are fp32 SUM (never AVG: the trainer divides by the
//     global token count once). all_gather_v and broadcast also move bf16 and i32.
//   - Every rank calls the same collectives in the same order with the same counts (and
//     root). The ranks check this: a mismatch, or a bad size on one rank, throws on EVERY
//     rank a CollectiveError that names the ranks and their counts; it never hangs.
//   - Tensors on a GPU (local, nccl): a collective starts after the work its rank's compute
//     stream had when it was called, and returning (or wait()) means its results are
//     ordered before that stream's later work, not that the device has finished: the host
//     reads them through a synchronising copy (Tensor::to). The host never waits for the
//     device inside a collective.
//   - A Comm is used by one thread at a time. Asynchronous forms return a CommRequest; the
//     buffers must stay untouched until wait() returns. Synchronous and asynchronous calls
//     are matched across ranks in the order they are issued.
//   - Failures: in the local backend a rank that fails (an exception out of run_local's
//     function, abort(), or its Comm destroyed while others wait for it) makes every other
//     rank's pending and later collectives throw "rank R failed: <message>" at once, and a
//     collective that waits longer than LocalOptions::timeout_s throws, naming the op and
//     the ranks that have not arrived. Under MPI a rank that dies or calls abort() makes
//     mpirun tear the whole job down (every process exits non-zero).
//
// Byte counters (stats()) count the payload of each collective as if every rank sent its
// data straight to the ranks that need it, whatever algorithm the library picks, so that
// tests can count communication exactly (E: element size, N ranks, c_r = counts[r],
// T = sum of counts, n = elements of the tensor):
//   all_gather_v      sent c_rank*E*(N-1)            received (T - c_rank)*E
//   reduce_scatter_v  sent (T - c_rank)*E            received c_rank*E*(N-1)
//   all_reduce        sent n*E*(N-1)                 received n*E*(N-1)   (scalars: n = 1, E = 8)
//   broadcast         root: sent n*E*(N-1)           others: received n*E
//   barrier, agree    calls and time only (agreement checks are not counted anywhere)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace gpumix::dist {

// What every rank throws together when the ranks disagree or one of them reported a local
// error to agree(): a caller that catches it knows that no rank is left inside a
// collective (the C API's MPI form returns it as every rank's error).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// The text a rank passes to agree() as its local error for the exception it caught. A
// user's mistake (an InputError, or a std exception about a flag, a file, a folder: not a
// gpumix::Error nor bad_alloc) is marked so, and the ranks'
// message then states it once, as it is, naming no rank, when it is the run's rather than
// a rank's: every rank found the same, or the one rank that found it checked for all
// (`for_all`: rank 0 checks the run folder, the data). Otherwise (some ranks found it in
// their own part: a device too small; the ranks disagree; a rank's memory, a bug) the
// message names the ranks and what each found.
std::string local_error_of(const std::exception& e, bool for_all = false);

enum class CommOp : uint8_t { all_gather_v, reduce_scatter_v, all_reduce, broadcast, barrier, agree };
constexpr int kCommOpCount = 6;
const char* comm_op_name(CommOp op);  // "all_gather_v", ...

struct CommOpStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  double seconds = 0;  // time the caller was blocked: inside a call, or in wait()
};

struct CommStats {
  std::array<CommOpStats, kCommOpCount> ops{};
  const CommOpStats& operator[](CommOp op) const { return ops[(int)op]; }
  CommOpStats& operator[](CommOp op) { return ops[(int)op]; }
  int64_t calls() const;
  int64_t bytes_sent() const;
  int64_t bytes_received() const;
  double seconds() const;
};

// The payload bytes of one collective on one rank (the table above).
struct CommBytes {
  int64_t sent = 0;
  int64_t received = 0;
};
CommBytes comm_payload_bytes(CommOp op, const std::vector<int64_t>& counts, int rank,
                             size_t elem_size, int root = 0);

// A collective in flight. wait() blocks until it has completed and rethrows its error
// (errors found when the collective is issued, such as disagreeing counts under MPI, may be
// thrown by the *_async call itself, on every rank alike); calling it again does nothing.
// The results are guaranteed only after wait(). done() tells without blocking whether
// wait() would return at once (and lets MPI progress). Destroying a request that was not
// waited for waits for it (errors are then lost). Requests must not outlive their Comm.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool done() = 0;
};
using CommRequestPtr = std::unique_ptr<CommRequest>;

class Comm {
 public:
  Comm() = default;
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"

  // out (sum of counts elements) = the concatenation over ranks r of rank r's `in`
  // (counts[r] elements; zeros allowed). f32, bf16 or i32; in and out of one dtype. `in` may
  // be the view of `out` at this rank's offset (in place).
  virtual void all_gather_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) = 0;
  // out (counts[rank] elements) = this rank's slice of the elementwise SUM over ranks of
  // `in` (sum of counts elements, f32). `out` may be the view of `in` at this rank's offset.
  virtual void reduce_scatter_v(const Tensor& in, Tensor& out,
                                const std::vector<int64_t>& counts) = 0;
  // In place, SUM over ranks (f32). Every rank ends with the same bits (local, MPI scalars).
  virtual void all_reduce_sum(Tensor& t) = 0;
  // Scalars (loss sums, squared norms): summed in rank order 0 + 1 + ... in double on every
  // backend, so every rank and every backend gets the same bits.
  virtual double all_reduce_sum(double x) = 0;
  virtual double all_reduce_max(double x) = 0;  // step-time maxima
  // `t` of the root is copied to every rank's `t` (same numel and dtype everywhere).
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // Collective check that every rank passes the same `values` (counts, a shard layout, a
  // plan's numbers). If they differ, or if any rank passes a non-empty `local_error` (a
  // problem it found on its own), every rank throws a CollectiveError that starts with
  // `what` and names the ranks, their values and the local errors. Under MPI (where every
  // collective starts with such a check) a rank's agree() with a local error also meets
  // the check of whatever collective its peers call next, and they all throw. A single rank
  // has nobody to agree with: it throws its local error as it is (a CollectiveError).
  virtual void agree(const std::string& what, const std::vector<int64_t>& values,
                     const std::string& local_error = "") = 0;

  // Asynchronous forms (for overlapping communication with compute). The defaults run the
  // collective at once and return a completed request; the local and MPI backends override
  // them with real asynchronous ones.
  virtual CommRequestPtr all_gather_v_async(const Tensor& in, Tensor& out,
                                            const std::vector<int64_t>& counts);
  virtual CommRequestPtr reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                                const std::vector<int64_t>& counts);
  virtual CommRequestPtr all_reduce_sum_async(Tensor& t);
  virtual CommRequestPtr broadcast_async(Tensor& t, int root);

  // Gives up: the other ranks get an error that carries `reason` (local), or the whole job
  // is torn down (MPI_Abort: mpi, nccl). Does not return for mpi and nccl.
  virtual void abort(const std::string& reason) = 0;

  // A communicator of the same backend over the ranks that pass the same `color` (>= 0),
  // ranked in this communicator's rank order, with their nodes (node_of_rank) and, for
  // nccl, the same GPU. Collective: every rank calls it at the same point. Hybrid sharding
  // splits the ranks into groups and into the replicas of each position; topology-aware
  // collectives into nodes and node leaders.
  virtual std::unique_ptr<Comm> split(int color) = 0;

  // Whether a second thread of this rank may run collectives on communicators split from
  // this one while the first runs others (MPI: the library was initialised with
  // MPI_THREAD_MULTIPLE). TopologyComm then moves its asynchronous gathers on a thread of
  // their own, so that they progress while the rank computes.
  virtual bool concurrent_threads() const { return false; }

  CommStats stats() const;
  void reset_stats();

  // ---- topology: which node (machine) each rank runs on ----
  // node_of_rank()[r] is rank r's node, 0..nodes()-1, nodes numbered in the order of their
  // lowest rank (rank 0 is on node 0); node_names()[n] names node n (its host name under
  // MPI and NCCL). Every rank holds the same vectors. MPI learns them from the library
  // (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) says who shares memory, MPI_Get_processor_name
  // names the node), NCCL from its MPI bootstrap, the local backend from
  // LocalOptions::node_of_rank (default: one node).
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }
  const std::vector<std::string>& node_names() const { return node_names_; }
  int nodes() const { return (int)node_names_.size(); }
  int node() const { return node_of_rank_.at((size_t)rank()); }  // this rank's node
  // The ranks on node n, in rank order.
  std::vector<int> ranks_of_node(int n) const;

 protected:
  void record(CommOp op, const CommBytes& bytes, double seconds);
  void record_seconds(CommOp op, double seconds);
  // Called once by each backend's constructor. `node_of_rank` holds any labels (one per
  // rank); they are renumbered in order of first appearance. `names` gives each label's
  // name in that new order (empty: "node0", "node1", ...).
  void set_topology(const std::vector<int>& node_of_rank, std::vector<std::string> names = {});

 private:
  mutable std::mutex stats_mu_;
  CommStats stats_;
  std::vector<int> node_of_rank_;
  std::vector<std::string> node_names_;
};

// ---- local backend: N ranks as threads of one process --------------------------------------

struct LocalOptions {
  double timeout_s = 300;  // a collective that waits longer for the other ranks throws
  // The node of each rank, to simulate several machines in one process (tests, the
  // planner's node boundary): any labels, one per rank, e.g. {0, 0, 1, 1, 1}; renumbered in
  // order of first appearance and named "node0", "node1", .... Empty: every rank on one
  // node, named after this host.
  std::vector<int> node_of_rank;
  // Comm::concurrent_threads() of these ranks' communicators: each communicator of the
  // backend is a rendezvous of its own, so a second thread of a rank may use another one
  // (host tensors; off by default, for the tests of what runs on a second thread).
  bool concurrent_threads = false;
};

namespace detail {
struct LocalGroupState;
}

// The shared state of N thread ranks. comm(r) is called once per rank, usually on that
// rank's thread; the group outlives nothing: comms keep the state alive.
class LocalGroup {
 public:
  explicit LocalGroup(int n, LocalOptions options = {});
  ~LocalGroup();
  int size() const;
  std::unique_ptr<Comm> comm(int rank);
  // Marks the group failed: every rank in or entering a collective throws
  // "rank <rank> failed: <reason>".
  void fail(int rank, const std::string& reason);
  // The rank whose failure (or timeout) failed the group; -1 while it has not failed.
  int failed_rank() const;

 private:
  std::shared_ptr<detail::LocalGroupState> state_;
};

// Runs fn(comm) on n threads, one per rank, and returns when all have finished. If a rank
// throws, the group is failed at once (the others' collectives throw "... rank R failed:
// <message>") and, after every thread has ended, the exception of the rank that failed
// first (the cause, not its echoes on the other ranks) is rethrown, with its own type.
void run_local(int n, const std::function<void(Comm&)>& fn, LocalOptions options = {});

// ---- MPI backend ------------------------------------------------------------------------

// True when this build has MPI (GPUMIX_HAVE_MPI).
bool mpi_built();
// True when this process was started by mpirun / an MPI launcher (from its environment).
bool launched_by_mpi();

// Initialises MPI (MPI_Init_thread) for the lifetime of the object and finalises it after.
// `multiple`: ask for MPI_THREAD_MULTIPLE (several threads call MPI at once), else
// MPI_THREAD_FUNNELED (only the main thread calls MPI, as our backends do). Throws when the
// library provides less than needed, unless `require` is false: then it takes what the
// library gives (Comm::concurrent_threads says which). If MPI is already initialised, does
// nothing.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv, bool multiple = false, bool require = true);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  bool owns_ = false;
  int rank_ = 0;
  int size_ = 1;
};

struct MpiOptions {
  // Check before every collective that all ranks pass the same counts (one small
  // MPI_Allreduce). Off only for measurements.
  bool validate = true;
  // Largest count given to one MPI call (MPI counts are int). Bigger collectives are split;
  // tests lower it to exercise the split path.
  int64_t max_count = 2147483647;
  // A wait() on an asynchronous collective that takes longer aborts the job with a message.
  double timeout_s = 300;
};

// A communicator over all MPI ranks (a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN;
// MPI errors become Errors with MPI's own text). MPI must be initialised (MpiSession).
// Throws when built without MPI. dist/comm/comm_mpi.h makes one over any communicator.
std::unique_ptr<Comm> make_mpi_comm(const MpiOptions& options = {});

// ---- NCCL backend -----------------------------------------------------------------------

// How an uneven all-gather / reduce-scatter runs on NCCL, which has no variable-count
// collectives (docs/method.md §6): `padded` pads every shard to the largest (M) and runs one
// ncclAllGather / ncclReduceScatter in place on slots of M elements (wire bytes ~ N*M);
// `grouped` runs one ncclBroadcast / ncclReduce per non-empty root inside one
// ncclGroupStart/End (wire bytes ~ T, more launches).
enum class UnevenAlgo : uint8_t { automatic, padded, grouped };
const char* uneven_algo_name(UnevenAlgo a);

// The cost model that picks the algorithm per call (seconds; a ring model):
//   padded  = latency_s + (N-1)*M*E / bandwidth_Bps + 2*T*E / copy_Bps (staging copies)
//   grouped = latency_s + k*root_latency_s + T*E*grouped_factor / bandwidth_Bps
// with k the number of non-empty shards. Defaults from TECH.md §1.3 (UCC measurements).
struct UnevenCostParams {
  double latency_s = 20e-6;
  double root_latency_s = 6e-6;
  double bandwidth_Bps = 100e9;
  double copy_Bps = 1000e9;
  double grouped_factor = 1.2;
};
struct UnevenChoice {
  UnevenAlgo algo = UnevenAlgo::padded;
  double padded_s = 0;
  double grouped_s = 0;
};
// Chooses for `counts` (what NcclComm does for UnevenAlgo::automatic). Equal counts always
// choose padded (no padding, one collective). An all-zero call costs nothing.
UnevenChoice choose_uneven_algo(const std::vector<int64_t>& counts, size_t elem_size,
                                const UnevenCostParams& params = {});

// Collectives on device memory: pointers are CUDA device pointers, `stream` a cudaStream_t
// (void* here so that this header needs no CUDA). The calls are enqueued on `stream` and
// return at once, as NCCL's do; counts are agreed on the host first (MPI).
class DeviceComm : public Comm {
 public:
  virtual void all_gather_v_device(const void* in, void* out, const std::vector<int64_t>& counts,
                                   DType dtype, void* stream) = 0;
  virtual void reduce_scatter_v_device(const void* in, void* out,
                                       const std::vector<int64_t>& counts, DType dtype,
                                       void* stream) = 0;
  virtual void all_reduce_sum_device(void* data, int64_t count, DType dtype, void* stream) = 0;
  virtual void broadcast_device(void* data, int64_t count, DType dtype, int root,
                                void* stream) = 0;
  // The slot layout (shard r at slots + r*slot_count, padding kept apart from the logical
  // shard by the caller): in-place ncclAllGather / ncclReduceScatter, no staging copies.
  virtual void all_gather_slots_device(void* slots, int64_t slot_count, DType dtype,
                                       void* stream) = 0;
  virtual void reduce_scatter_slots_device(void* slots, int64_t slot_count, DType dtype,
                                           void* stream) = 0;
  virtual int device_index() const = 0;  // the CUDA device this rank uses
  // The communicator's own stream (the Tensor entry points use their device's comm stream,
  // core/stream.h).
  virtual void* stream() const = 0;
  // What the last uneven call ran (for tests and logs).
  virtual UnevenChoice last_uneven_choice() const = 0;
  // How many times the staging buffer of the padded uneven calls was allocated: it grows in
  // powers of two, only while the device is idle (comm_nccl.cpp says why; for tests and logs).
  virtual int64_t staging_allocations() const = 0;
};

struct NcclOptions {
  int device = -1;  // CUDA device; -1: the node-local rank modulo the visible devices
  UnevenAlgo uneven = UnevenAlgo::automatic;  // GPUMIX_NCCL_UNEVEN=padded|grouped overrides
  UnevenCostParams cost;
  bool validate = true;  // agree on counts through MPI before each collective
};

// True when this build has NCCL (CUDA and MPI).
bool nccl_built();

// Collective over MPI_COMM_WORLD (MPI must be initialised): picks the GPU, then rank 0
// calls ncclGetUniqueId, MPI_Bcast sends it, and every rank calls ncclCommInitRank. Host
// scalars, host tensors, barrier and agree() go through MPI. Two ranks on one GPU of a node
// throw on every rank, naming them (NCCL runs one rank per GPU). Throws when built without
// CUDA or MPI.
std::unique_ptr<DeviceComm> make_nccl_comm(const NcclOptions& options = {});

// ---- helpers shared by the backends (not an API) -------------------------------------------
namespace detail {

// "[1, 2, 5]", eliding the middle of long lists.
std::string format_counts(const std::vector<int64_t>& counts);
// Offsets of the blocks: offsets[r] = counts[0] + ... + counts[r-1]; returns the sum.
int64_t block_offsets(const std::vector<int64_t>& counts, std::vector<int64_t>* offsets);
// "" when this rank's arguments fit the counts, else what is wrong, with the numbers.
// `device`: the backend moves device buffers too (then in and out are on one device).
std::string check_gather_args(const Tensor& in, const Tensor& out,
                              const std::vector<int64_t>& counts, int rank, int size,
                              bool device = false);
std::string check_scatter_args(const Tensor& in, const Tensor& out,
                               const std::vector<int64_t>& counts, int rank, int size,
                               bool device = false);
std::string check_root(int root, int size);
// The message every rank throws when the ranks disagree (per-rank descriptions and values)
// or some rank found a local error; "" when they agree and nobody found an error.
std::string agreement_error(const std::vector<std::string>& whats,
                            const std::vector<std::vector<int64_t>>& values,
                            const std::vector<std::string>& local_errors);
// The CollectiveError text of a failed check: "<backend> comm: <agreement>", or the user's
// mistake alone (local_error_of) when that is all the ranks found.
std::string collective_message(const char* backend, const std::string& agreement);
// agree() on a single rank: throws `local_error` unwrapped when it is not empty.
void agree_alone(const std::string& local_error);
// FNV-1a over what + values: what the MPI backend compares across ranks.
uint64_t agreement_hash(const std::string& what, const std::vector<int64_t>& values,
                        bool has_error);
// Sum in rank order 0 + 1 + ... (fp32) of `ranks` arrays at [begin, end) into out.
void sum_in_rank_order(const std::vector<const float*>& ranks, int64_t begin, int64_t end,
                       float* out);
// This machine's host name (gethostname), "localhost" if it has none.
std::string host_name();
// The steady clock in seconds (also the trainer's and the profiler's).
double seconds_since(double start);
double now_seconds();

}  // namespace detail
}  // namespace gpumix::dist
