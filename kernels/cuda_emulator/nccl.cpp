// The emulated NCCL: each collective checks its buffers (device memory of the
// communicator's device, cuda_emulator::require_device), then runs as work on its stream:
// MPI moves the bytes and the reduction is done here, in rank order, so that results are
// deterministic (bf16 sums round to bf16 after each addition, as a ring's steps do).
//
// MPI from stream workers: GPUMix initialises MPI at MPI_THREAD_FUNNELED on a GPU build,
// but here the stream's worker thread calls MPI while the host thread makes its own MPI
// calls, so MPI_THREAD_MULTIPLE is required (dist::MpiSession asks for it in the emulated
// build; ncclCommInitRank refuses otherwise, naming the fix). Each communicator has its
// own MPI communicator (MPI_Comm_split of MPI_COMM_WORLD, ordered by the NCCL rank), so its
// messages never meet the host's, and a mutex, so that its collectives run one at a time
// in the order their streams reach them (NCCL requires every rank to issue them in the
// same order, so do we).
//
// Group calls: between ncclGroupStart and ncclGroupEnd, collectives are collected and
// issued at ncclGroupEnd, in order, as one piece of work per (communicator, stream).
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "emulator.h"
#include "kernels/half_types.h"
#include "nccl.h"

#if defined(GPUMIX_HAVE_MPI)
#include <mpi.h>
#endif

using cuda_emulator::refuse;

extern "C" cudaError_t cudaGetDevice(int* device);

struct ncclComm {
  int rank = 0, nranks = 1, device = 0;
#if defined(GPUMIX_HAVE_MPI)
  MPI_Comm mpi = MPI_COMM_NULL;
#endif
  std::mutex mu;  // one collective at a time on this communicator
  std::mutex state_mu;
  std::condition_variable idle;
  int pending = 0;  // collectives enqueued, not yet run
  std::atomic<int> async_error{ncclSuccess};
  std::string last_error;
  bool aborted = false;
};

namespace {

constexpr char kIdMagic[8] = {'G', 'P', 'U', 'M', 'X', 'E', 'M', 'U'};

thread_local std::string t_last_error;  // ncclGetLastError(nullptr)

size_t type_size(ncclDataType_t t, const char* call) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
  }
  refuse(std::string(call) + ": datatype " + std::to_string((int)t) + " is not an ncclDataType_t");
}

const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
  }
  return "an unknown ncclDataType_t";
}

void check_reduction(ncclDataType_t t, ncclRedOp_t op, const char* call) {
  if (op != ncclSum)
    refuse(std::string(call) + ": ncclRedOp_t " + std::to_string((int)op) +
           " (only ncclSum is emulated)");
  if (t != ncclFloat32 && t != ncclBfloat16 && t != ncclInt32)
    refuse(std::string(call) + ": reductions of " + type_name(t) +
           " are not emulated (ncclFloat32, ncclBfloat16, ncclInt32)");
}

// acc (n) += x (n) in type t.
void add_into(void* acc, const void* x, size_t n, ncclDataType_t t) {
  if (t == ncclFloat32) {
    float* a = (float*)acc;
    const float* b = (const float*)x;
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
  } else if (t == ncclInt32) {
    uint32_t* a = (uint32_t*)acc;  // wraps as the GPU's integer add
    const uint32_t* b = (const uint32_t*)x;
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
  } else {
    uint16_t* a = (uint16_t*)acc;
    const uint16_t* b = (const uint16_t*)x;
    for (size_t i = 0; i < n; ++i)
      a[i] = gpumix::f32_to_bf16_bits(gpumix::bf16_bits_to_f32(a[i]) + gpumix::bf16_bits_to_f32(b[i]));
  }
}

// One collective, as it runs on the worker.
struct Op {
  enum Kind { all_gather, reduce_scatter, all_reduce, broadcast, reduce } kind;
  const char* name;
  const void* send;
  void* recv;
  size_t count;  // elements: per rank for all_gather / reduce_scatter
  ncclDataType_t type;
  int root;
};

#if defined(GPUMIX_HAVE_MPI)
[[noreturn]] void mpi_failed(ncclComm* c, const char* what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  c->async_error = ncclSystemError;
  throw cuda_emulator::WorkError(999 /* cudaErrorUnknown */,
                                 std::string(what) + " failed: " + std::string(msg, (size_t)len));
}
#define EMU_MPI(c, expr)                        \
  do {                                          \
    const int rc_ = (expr);                     \
    if (rc_ != MPI_SUCCESS) mpi_failed(c, #expr, rc_); \
  } while (0)
#endif

int as_int(size_t bytes, const Op& op) {
  if (bytes > (size_t)INT32_MAX)
    throw cuda_emulator::WorkError(1, std::string(op.name) + ": " + std::to_string(bytes) +
                                          " bytes in one message; over 2^31 - 1 is not emulated");
  return (int)bytes;
}

void run_op(ncclComm* c, const Op& op) {
  const size_t es = type_size(op.type, op.name);
  const size_t bytes = op.count * es;
  const int n = c->nranks;
  if (n == 1) {  // one rank: copies
    if (op.recv && op.send && op.recv != op.send) memmove(op.recv, op.send, bytes);
    return;
  }
#if defined(GPUMIX_HAVE_MPI)
  switch (op.kind) {
    case Op::all_gather: {
      char* recv = (char*)op.recv;
      const void* send = op.send == recv + (size_t)c->rank * bytes ? MPI_IN_PLACE : op.send;
      EMU_MPI(c, MPI_Allgather(send, as_int(bytes, op), MPI_BYTE, recv, as_int(bytes, op), MPI_BYTE, c->mpi));
      return;
    }
    case Op::reduce_scatter: {
      // Every rank's chunk r goes to rank r; rank r sums the n chunks it got in rank order.
      std::vector<char> got((size_t)n * bytes);
      EMU_MPI(c, MPI_Alltoall(op.send, as_int(bytes, op), MPI_BYTE, got.data(), as_int(bytes, op),
                              MPI_BYTE, c->mpi));
      for (int r = 1; r < n; ++r) add_into(got.data(), got.data() + (size_t)r * bytes, op.count, op.type);
      memcpy(op.recv, got.data(), bytes);
      return;
    }
    case Op::all_reduce: {
      std::vector<char> got((size_t)n * bytes);
      EMU_MPI(c, MPI_Allgather(op.send, as_int(bytes, op), MPI_BYTE, got.data(), as_int(bytes, op),
                               MPI_BYTE, c->mpi));
      for (int r = 1; r < n; ++r) add_into(got.data(), got.data() + (size_t)r * bytes, op.count, op.type);
      memcpy(op.recv, got.data(), bytes);
      return;
    }
    case Op::broadcast: {
      if (c->rank == op.root && op.send != op.recv) memmove(op.recv, op.send, bytes);
      EMU_MPI(c, MPI_Bcast(op.recv, as_int(bytes, op), MPI_BYTE, op.root, c->mpi));
      return;
    }
    case Op::reduce: {
      std::vector<char> got(c->rank == op.root ? (size_t)n * bytes : 0);
      EMU_MPI(c, MPI_Gather(op.send, as_int(bytes, op), MPI_BYTE, got.data(), as_int(bytes, op), MPI_BYTE,
                            op.root, c->mpi));
      if (c->rank == op.root) {
        for (int r = 1; r < n; ++r) add_into(got.data(), got.data() + (size_t)r * bytes, op.count, op.type);
        memcpy(op.recv, got.data(), bytes);
      }
      return;
    }
  }
#else
  refuse(std::string(op.name) + ": a communicator of several ranks needs MPI (built without it)");
#endif
}

// The pending group of this host thread.
struct Pending {
  ncclComm* comm;
  cudaStream_t stream;
  Op op;
};
thread_local int t_group_depth = 0;
thread_local std::vector<Pending> t_group;

void issue(ncclComm* c, cudaStream_t stream, std::vector<Op> ops) {
  {
    std::lock_guard<std::mutex> lock(c->state_mu);
    ++c->pending;
  }
  const char* what = ops.size() == 1 ? ops[0].name : "NCCL group";
  cuda_emulator::enqueue(stream, what, [c, ops] {
    struct Done {
      ncclComm* c;
      ~Done() {
        std::lock_guard<std::mutex> lock(c->state_mu);
        --c->pending;
        c->idle.notify_all();
      }
    } done{c};
    std::lock_guard<std::mutex> lock(c->mu);
    for (const Op& op : ops) run_op(c, op);
  });
}

ncclResult_t submit(ncclComm* c, cudaStream_t stream, const Op& op) {
  if (!c) refuse(std::string(op.name) + ": comm is null");
  if (c->aborted) refuse(std::string(op.name) + ": the communicator was aborted");
  const int sd = cuda_emulator::stream_device(stream);
  if (sd != c->device)
    refuse(std::string(op.name) + ": the stream belongs to device " + std::to_string(sd) +
           " but the communicator to device " + std::to_string(c->device));
  if (t_group_depth > 0) {
    t_group.push_back(Pending{c, stream, op});
    return ncclSuccess;
  }
  issue(c, stream, {op});
  return ncclSuccess;
}

void need_device(const void* p, size_t bytes, ncclComm* c, const char* what) {
  cuda_emulator::require_device(p, bytes, what);
  int dev = -1;
  cuda_emulator::classify(p, &dev);
  if (bytes > 0 && dev != c->device)
    refuse(std::string(what) + ": the buffer lies on device " + std::to_string(dev) +
           " but the communicator uses device " + std::to_string(c->device));
}

void check_root(int root, ncclComm* c, const char* call) {
  if (root < 0 || root >= c->nranks)
    refuse(std::string(call) + ": root " + std::to_string(root) + " is not a rank of the " +
           std::to_string(c->nranks) + "-rank communicator");
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm ? comm->last_error.c_str() : t_last_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof *id);
  memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  std::random_device rd;
  const uint64_t nonce = ((uint64_t)rd() << 32) ^ rd() ^ ((uint64_t)getpid() << 16);
  memcpy(id->internal + 8, &nonce, sizeof nonce);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0) {
    t_last_error = "ncclCommInitRank: the unique id was not made by ncclGetUniqueId (or was not "
                   "broadcast to this rank)";
    return ncclInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    t_last_error = "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks);
    return ncclInvalidArgument;
  }
  auto c = std::make_unique<ncclComm>();
  c->rank = rank;
  c->nranks = nranks;
  if (cudaGetDevice(&c->device) != 0) refuse("ncclCommInitRank: no current emulated device");
  if (nranks > 1) {
#if defined(GPUMIX_HAVE_MPI)
    int initialized = 0, level = 0, world = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      refuse("ncclCommInitRank: " + std::to_string(nranks) + " ranks need MPI, which is not "
             "initialised (the emulated NCCL runs over MPI: start the ranks with mpirun)");
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
      refuse("ncclCommInitRank: MPI runs at thread level " + std::to_string(level) +
             ", but the emulated NCCL calls MPI from stream worker threads and needs "
             "MPI_THREAD_MULTIPLE; initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) "
             "(dist::MpiSession asks for it in the emulated build)");
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world != nranks)
      refuse("ncclCommInitRank: nranks " + std::to_string(nranks) + " but MPI_COMM_WORLD has " +
             std::to_string(world) + " ranks; a communicator over a subset of the MPI ranks is not emulated");
    if (MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c->mpi) != MPI_SUCCESS)
      refuse("ncclCommInitRank: MPI_Comm_split failed");
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    // Every rank passed the same id and a distinct rank.
    std::vector<char> ids((size_t)nranks * sizeof id);
    MPI_Allgather(&id, (int)sizeof id, MPI_BYTE, ids.data(), (int)sizeof id, MPI_BYTE, c->mpi);
    for (int r = 0; r < nranks; ++r)
      if (memcmp(ids.data() + (size_t)r * sizeof id, &id, sizeof id) != 0)
        refuse("ncclCommInitRank: MPI rank " + std::to_string(r) +
               " passed a different unique id (broadcast rank 0's id to every rank)");
    int me = -1;
    MPI_Comm_rank(c->mpi, &me);
    if (me != rank)
      refuse("ncclCommInitRank: rank " + std::to_string(rank) + " was given twice, or not in 0.." +
             std::to_string(nranks - 1));
#else
    refuse("ncclCommInitRank: " + std::to_string(nranks) + " ranks need MPI; this build has none");
#endif
  }
  *comm = c.release();
  return ncclSuccess;
}

static void wait_idle(ncclComm* c) {
  std::unique_lock<std::mutex> lock(c->state_mu);
  c->idle.wait(lock, [&] { return c->pending == 0; });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  wait_idle(comm);  // "ncclCommDestroy ... waits for uncompleted operations"
#if defined(GPUMIX_HAVE_MPI)
  if (comm->mpi != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm->mpi);
  }
#endif
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  // Work in flight cannot be cancelled here (it may sit in an MPI call): the communicator
  // is marked dead and kept, so that such work never touches freed memory.
  comm->aborted = true;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm) return ncclInvalidArgument;
  *async_error = (ncclResult_t)comm->async_error.load();
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t es = type_size(t, "ncclAllGather");
  need_device(send, count * es, comm, "ncclAllGather sendbuff");
  need_device(recv, count * es * (size_t)comm->nranks, comm, "ncclAllGather recvbuff");
  return submit(comm, stream, Op{Op::all_gather, "ncclAllGather", send, recv, count, t, 0});
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  check_reduction(t, op, "ncclReduceScatter");
  const size_t es = type_size(t, "ncclReduceScatter");
  need_device(send, count * es * (size_t)comm->nranks, comm, "ncclReduceScatter sendbuff");
  need_device(recv, count * es, comm, "ncclReduceScatter recvbuff");
  return submit(comm, stream, Op{Op::reduce_scatter, "ncclReduceScatter", send, recv, count, t, 0});
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  check_reduction(t, op, "ncclAllReduce");
  const size_t es = type_size(t, "ncclAllReduce");
  need_device(send, count * es, comm, "ncclAllReduce sendbuff");
  need_device(recv, count * es, comm, "ncclAllReduce recvbuff");
  return submit(comm, stream, Op{Op::all_reduce, "ncclAllReduce", send, recv, count, t, 0});
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t es = type_size(t, "ncclBroadcast");
  check_root(root, comm, "ncclBroadcast");
  if (comm->rank == root) need_device(send, count * es, comm, "ncclBroadcast sendbuff (root)");
  need_device(recv, count * es, comm, "ncclBroadcast recvbuff");
  return submit(comm, stream, Op{Op::broadcast, "ncclBroadcast", send, recv, count, t, root});
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  check_reduction(t, op, "ncclReduce");
  const size_t es = type_size(t, "ncclReduce");
  check_root(root, comm, "ncclReduce");
  need_device(send, count * es, comm, "ncclReduce sendbuff");
  if (comm->rank == root) need_device(recv, count * es, comm, "ncclReduce recvbuff (root)");
  return submit(comm, stream, Op{Op::reduce, "ncclReduce", send, recv, count, t, root});
}

ncclResult_t ncclGroupStart(void) {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (t_group_depth == 0) {
    t_last_error = "ncclGroupEnd without ncclGroupStart";
    return ncclInvalidUsage;
  }
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Pending> group;
  group.swap(t_group);
  // One piece of work per (communicator, stream), each in call order.
  std::vector<bool> taken(group.size(), false);
  for (size_t i = 0; i < group.size(); ++i) {
    if (taken[i]) continue;
    std::vector<Op> ops;
    for (size_t j = i; j < group.size(); ++j)
      if (!taken[j] && group[j].comm == group[i].comm && group[j].stream == group[i].stream) {
        ops.push_back(group[j].op);
        taken[j] = true;
      }
    for (size_t j = i + 1; j < group.size(); ++j)
      if (!taken[j] && group[j].comm == group[i].comm)
        refuse("ncclGroupEnd: one communicator's calls in a group on two streams are not emulated");
    issue(group[i].comm, group[i].stream, std::move(ops));
  }
  return ncclSuccess;
}

}  // extern "C"
