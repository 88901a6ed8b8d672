// The MPI backend: ranks are processes started by mpirun; host memory (tensors on a GPU are
// staged through host copies).
//
//   all_gather_v      MPI_Allgatherv   (MPI_Iallgatherv)     in place: MPI_IN_PLACE
//   reduce_scatter_v  MPI_Reduce_scatter (MPI_Ireduce_scatter) in place: through a copy
//   all_reduce        MPI_Allreduce    (MPI_Iallreduce)
//   broadcast         MPI_Bcast        (MPI_Ibcast)
//   scalars           MPI_Allgather of the doubles, then summed in rank order on every rank
//                     (the same bits everywhere, and the same as the local backend)
//
// MPI counts are int: a collective whose counts or offsets exceed MpiOptions::max_count
// (INT_MAX) runs as one MPI_Bcast / MPI_Reduce per root and per chunk of max_count
// elements instead. The reduction order of MPI_Reduce_scatter and MPI_Allreduce is Open
// MPI's own (it depends on the algorithm its tuning picks for the size), so results match
// a sequential sum within fp32 rounding, not bitwise.
//
// Before each collective the ranks agree on its description and counts with one small
// MPI_Allreduce (MAX of a hash, its complement and an error flag); when they differ, the
// descriptions are all-gathered and every rank throws the same message. A rank that dies
// makes mpirun kill the job; abort() calls MPI_Abort. The communicator is a duplicate of
// MPI_COMM_WORLD (or of the caller's, comm_mpi.h) with MPI_ERRORS_RETURN, and MPI errors
// become Errors with MPI's text.
//
// Tests only: GPUMIX_TEST_CROSS_NODE_DELAY_MS=D makes every collective of a communicator
// whose ranks span nodes wait D ms before it starts (each rank, once per collective, also
// the asynchronous ones): a link's latency, which the emulated cluster's network namespaces
// cannot add (no netem). tools/cluster/local_sync_runs.sh sets it; a collective of n ranks
// spanning nodes is then priced with D per ring step (docs/cluster.md).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "dist/comm/comm.h"
#include "dist/comm/comm_mpi.h"

namespace gpumix::dist {
namespace {

[[noreturn]] void throw_mpi_error(int code, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  text[len] = '\0';
  ::gpumix::detail::throw_error(file, line,
                                str("MPI call '", expr, "' failed: ", len ? text : "unknown error",
                                    " (error code ", code, ")"));
}

#define GPUMIX_MPI_CHECK(expr)                                             \
  do {                                                                     \
    const int gpumix_mpi_rc_ = (expr);                                     \
    if (gpumix_mpi_rc_ != MPI_SUCCESS)                                     \
      throw_mpi_error(gpumix_mpi_rc_, #expr, __FILE__, __LINE__);          \
  } while (0)

// From core/dtype.h's table: MPI reduces fp32 only (MPI_FLOAT); every other dtype is moved
// as opaque words of its size (16-bit floats as MPI_UINT16_T, i32 as MPI_INT32_T).
MPI_Datatype mpi_type(DType t) {
  const DTypeInfo& d = dtype_info(t);
  if (d.is_float && d.size == 4) return MPI_FLOAT;
  return d.size == 2 ? MPI_UINT16_T : MPI_INT32_T;
}

// A valid address for zero-element buffers (a tensor of 0 elements may have none).
float g_dummy[1];
void* buf(const Tensor& t) { return t.numel() > 0 ? t.raw_data() : g_dummy; }

// GPUMIX_TEST_CROSS_NODE_DELAY_MS (above): the delay in seconds, 0 when unset.
double cross_node_delay_s() {
  static const double delay = [] {
    const char* env = std::getenv("GPUMIX_TEST_CROSS_NODE_DELAY_MS");
    if (!env || !*env) return 0.0;
    char* end = nullptr;
    const double ms = std::strtod(env, &end);
    GPUMIX_CHECK_INPUT(end && *end == '\0' && std::isfinite(ms) && ms >= 0 && ms <= 60000,
                       "GPUMIX_TEST_CROSS_NODE_DELAY_MS=", env, ": give the delay of each cross-node collective in "
                       "milliseconds, 0 to 60000 (e.g. 25 for a 50 ms round trip), or unset it");
    return ms / 1e3;
  }();
  return delay;
}

[[noreturn]] void abort_job(MPI_Comm comm, int rank, const std::string& reason) {
  log_error("[gpumix] rank ", rank, " aborts the MPI job: ", reason);
  MPI_Abort(comm, 1);
  std::abort();
}

// Tensors on a GPU: Debian's Open MPI is not CUDA-aware, so their collectives are staged
// through host copies (synchronously; the asynchronous forms complete before they return).
bool on_device(const Tensor& t) { return t.defined() && !t.device().is_cpu(); }
Tensor host_copy(const Tensor& t) { return on_device(t) ? t.to(Device::cpu()) : t; }
// Runs collective(host_in, host_out) on host copies and copies the result back to the
// device; in place (all-reduce, broadcast) when `in` is `out`.
template <class F>
void through_host(const Tensor& in, Tensor& out, F&& collective) {
  Tensor host_out = host_copy(out);
  collective(&in == &out ? host_out : host_copy(in), host_out);
  if (on_device(out)) out.copy_from(host_out);
}

class MpiComm;

// One or more nonblocking MPI operations and what they need kept alive until completion.
class MpiRequest : public CommRequest {
 public:
  MpiRequest(MpiComm* comm, CommOp op, CommBytes bytes, double timeout_s)
      : comm_(comm), op_(op), bytes_(bytes), timeout_s_(timeout_s) {}
  ~MpiRequest() override {
    try {
      wait();
    } catch (...) {
      // An unwaited request's error is lost by contract (comm.h).
    }
  }
  void wait() override;
  bool done() override {
    if (waited_ || reqs_.empty()) return true;
    int flag = 0;
    GPUMIX_MPI_CHECK(MPI_Testall((int)reqs_.size(), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    return flag != 0;
  }

  std::vector<MPI_Request> reqs_;
  std::vector<int> icounts_, idispls_;  // must outlive the v-collectives
  std::vector<float> temp_;             // in-place reduce-scatter
  std::vector<Tensor> keep_;            // the tensors, alive until completion
  std::function<void()> on_complete_;
  void set_bytes(const CommBytes& bytes) { bytes_ = bytes; }

 private:
  MpiComm* comm_;
  CommOp op_;
  CommBytes bytes_;
  double timeout_s_;
  bool waited_ = false;
};

class MpiComm : public Comm {
 public:
  MpiComm(MPI_Comm base, const MpiOptions& options) : opt_(options) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    GPUMIX_CHECK(initialized && !finalized,
                 "the MPI backend needs MPI initialised: create an MpiSession first "
                 "(and run under mpirun)");
    GPUMIX_CHECK(opt_.max_count >= 1 && opt_.max_count <= INT_MAX,
                 "MpiOptions::max_count must be in 1..", INT_MAX, ", got ", opt_.max_count);
    GPUMIX_MPI_CHECK(MPI_Comm_dup(base, &comm_));
    GPUMIX_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    GPUMIX_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    GPUMIX_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    learn_topology();
  }

  // Which ranks share a node: MPI_COMM_TYPE_SHARED groups the ranks that share memory
  // (the library's own notion of a node); each node is labelled by its lowest rank, and
  // named by that rank's MPI_Get_processor_name. Collective over comm_.
  void learn_topology() {
    MPI_Comm shared = MPI_COMM_NULL;
    GPUMIX_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared));
    int leader = rank_;
    const int rc = MPI_Allreduce(&rank_, &leader, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);
    GPUMIX_MPI_CHECK(rc);
    std::vector<int> leaders((size_t)size_);
    GPUMIX_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm_));
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int len = 0;
    GPUMIX_MPI_CHECK(MPI_Get_processor_name(name, &len));
    std::vector<char> all_names((size_t)size_ * (MPI_MAX_PROCESSOR_NAME + 1));
    GPUMIX_MPI_CHECK(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, all_names.data(),
                                   MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, comm_));
    std::vector<std::string> names;  // in order of first appearance, as set_topology numbers them
    for (int r = 0; r < size_; ++r)
      if (leaders[(size_t)r] == r) names.emplace_back(&all_names[(size_t)r * (MPI_MAX_PROCESSOR_NAME + 1)]);
    set_topology(leaders, names);
  }

  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  bool concurrent_threads() const override {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level == MPI_THREAD_MULTIPLE;
  }

  std::unique_ptr<Comm> split(int color) override {
    GPUMIX_CHECK(color >= 0, "Comm::split: the color must be >= 0, got ", color, " on rank ", rank_);
    MPI_Comm sub = MPI_COMM_NULL;
    GPUMIX_MPI_CHECK(MPI_Comm_split(comm_, color, rank_, &sub));
    auto made = std::make_unique<MpiComm>(sub, opt_);  // its own duplicate, topology from the library
    MPI_Comm_free(&sub);
    return made;
  }

  void all_gather_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    if (on_device(in) || on_device(out))
      return through_host(in, out, [&](const Tensor& i, Tensor& o) { all_gather_v(i, o, counts); });
    const double start = detail::now_seconds();
    delay_if_cross_node();
    const CommBytes bytes = start_gather(in, out, counts, nullptr);
    record(CommOp::all_gather_v, bytes, detail::seconds_since(start));
  }
  CommRequestPtr all_gather_v_async(const Tensor& in, Tensor& out,
                                    const std::vector<int64_t>& counts) override {
    if (on_device(in) || on_device(out)) return Comm::all_gather_v_async(in, out, counts);
    auto req = std::make_unique<MpiRequest>(this, CommOp::all_gather_v,
                                            gather_bytes(in, counts), opt_.timeout_s);
    delay_if_cross_node();
    start_gather(in, out, counts, req.get());
    return req;
  }

  void reduce_scatter_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    if (on_device(in) || on_device(out))
      return through_host(in, out, [&](const Tensor& i, Tensor& o) { reduce_scatter_v(i, o, counts); });
    const double start = detail::now_seconds();
    delay_if_cross_node();
    const CommBytes bytes = start_scatter(in, out, counts, nullptr);
    record(CommOp::reduce_scatter_v, bytes, detail::seconds_since(start));
  }
  CommRequestPtr reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                        const std::vector<int64_t>& counts) override {
    if (on_device(in) || on_device(out)) return Comm::reduce_scatter_v_async(in, out, counts);
    auto req = std::make_unique<MpiRequest>(
        this, CommOp::reduce_scatter_v,
        (int)counts.size() == size_
            ? comm_payload_bytes(CommOp::reduce_scatter_v, counts, rank_, sizeof(float))
            : CommBytes{},
        opt_.timeout_s);
    delay_if_cross_node();
    start_scatter(in, out, counts, req.get());
    return req;
  }

  void all_reduce_sum(Tensor& t) override {
    if (on_device(t)) return through_host(t, t, [&](const Tensor&, Tensor& host) { all_reduce_sum(host); });
    const double start = detail::now_seconds();
    delay_if_cross_node();
    const CommBytes bytes = start_all_reduce(t, nullptr);
    record(CommOp::all_reduce, bytes, detail::seconds_since(start));
  }
  CommRequestPtr all_reduce_sum_async(Tensor& t) override {
    if (on_device(t)) return Comm::all_reduce_sum_async(t);
    auto req = std::make_unique<MpiRequest>(this, CommOp::all_reduce, CommBytes{}, opt_.timeout_s);
    delay_if_cross_node();
    start_all_reduce(t, req.get());
    return req;
  }

  void broadcast(Tensor& t, int root) override {
    if (on_device(t)) return through_host(t, t, [&](const Tensor&, Tensor& host) { broadcast(host, root); });
    const double start = detail::now_seconds();
    delay_if_cross_node();
    const CommBytes bytes = start_broadcast(t, root, nullptr);
    record(CommOp::broadcast, bytes, detail::seconds_since(start));
  }
  CommRequestPtr broadcast_async(Tensor& t, int root) override {
    if (on_device(t)) return Comm::broadcast_async(t, root);
    auto req = std::make_unique<MpiRequest>(this, CommOp::broadcast, CommBytes{}, opt_.timeout_s);
    delay_if_cross_node();
    start_broadcast(t, root, req.get());
    return req;
  }

  double all_reduce_sum(double x) override { return scalar(x, false); }
  double all_reduce_max(double x) override { return scalar(x, true); }

  void barrier() override {
    const double start = detail::now_seconds();
    delay_if_cross_node();
    check_agreement("barrier", {}, "", opt_.validate);
    GPUMIX_MPI_CHECK(MPI_Barrier(comm_));
    record(CommOp::barrier, {}, detail::seconds_since(start));
  }

  void agree(const std::string& what, const std::vector<int64_t>& values,
             const std::string& local_error) override {
    const double start = detail::now_seconds();
    delay_if_cross_node();
    if (size_ == 1) detail::agree_alone(local_error);
    else check_agreement(what, values, local_error, true);
    record(CommOp::agree, {}, detail::seconds_since(start));
  }

  void abort(const std::string& reason) override { abort_job(comm_, rank_, reason); }

  void finish_request(CommOp op, const CommBytes& bytes, double seconds, bool ok) {
    if (ok)
      record(op, bytes, seconds);
    else
      record_seconds(op, seconds);
  }

 private:
  MpiOptions opt_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;

  void delay_if_cross_node() const {
    if (cross_node_delay_s() > 0 && nodes() > 1)  // parsed at the first collective: a bad value fails at once
      std::this_thread::sleep_for(std::chrono::duration<double>(cross_node_delay_s()));
  }

  // Every rank throws the same Error when the ranks' (what, values) differ or some rank has
  // a local error. `enabled` false: only a local error matters, and it aborts the job
  // (the other ranks would wait for this one forever).
  void check_agreement(const std::string& what, const std::vector<int64_t>& values,
                       const std::string& local_error, bool enabled) {
    if (!enabled) {
      if (!local_error.empty())
        abort_job(comm_, rank_, str(what, ": ", local_error, " (MpiOptions::validate is off, so "
                                    "the other ranks cannot be told)"));
      return;
    }
    const uint64_t h = detail::agreement_hash(what, values, !local_error.empty());
    int64_t v[3] = {(int64_t)h, (int64_t)~h, local_error.empty() ? 0 : 1};
    GPUMIX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_MAX, comm_));
    // max(h) == h and max(~h) == ~h  <=>  min(h) == max(h) == h on every rank.
    if (v[0] == (int64_t)h && v[1] == (int64_t)~h && v[2] == 0) return;

    // They differ: gather every rank's description, values and error; throw the same text.
    const std::string blob = what + '\x1f' + local_error;
    std::vector<std::string> blobs = all_gather_strings(blob);
    std::vector<std::vector<int64_t>> all_values = all_gather_values(values);
    std::vector<std::string> whats(size_), errors(size_);
    for (int r = 0; r < size_; ++r) {
      const size_t sep = blobs[r].find('\x1f');
      whats[r] = blobs[r].substr(0, sep);
      errors[r] = sep == std::string::npos ? "" : blobs[r].substr(sep + 1);
    }
    std::string message = detail::agreement_error(whats, all_values, errors);
    if (message.empty()) message = str(what, ": the ranks' agreement hashes differ");
    throw CollectiveError(detail::collective_message("mpi", message));
  }

  std::vector<std::string> all_gather_strings(const std::string& s) {
    int len = (int)s.size();
    std::vector<int> lens(size_), displs(size_);
    GPUMIX_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_));
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    std::vector<char> all((size_t)std::max(total, 1));
    GPUMIX_MPI_CHECK(MPI_Allgatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(),
                                    displs.data(), MPI_CHAR, comm_));
    std::vector<std::string> out(size_);
    for (int r = 0; r < size_; ++r) out[r].assign(all.data() + displs[r], (size_t)lens[r]);
    return out;
  }

  std::vector<std::vector<int64_t>> all_gather_values(const std::vector<int64_t>& values) {
    // Only for error messages: at most 64 values per rank are compared in the text.
    const int len = (int)std::min<size_t>(values.size(), 64);
    std::vector<int> lens(size_), displs(size_);
    GPUMIX_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_));
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    std::vector<int64_t> all((size_t)std::max(total, 1));
    GPUMIX_MPI_CHECK(MPI_Allgatherv(values.data(), len, MPI_INT64_T, all.data(), lens.data(),
                                    displs.data(), MPI_INT64_T, comm_));
    std::vector<std::vector<int64_t>> out(size_);
    for (int r = 0; r < size_; ++r)
      out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + lens[r]);
    return out;
  }

  CommBytes gather_bytes(const Tensor& in, const std::vector<int64_t>& counts) const {
    if ((int)counts.size() != size_ || !in.defined()) return {};
    return comm_payload_bytes(CommOp::all_gather_v, counts, rank_, dtype_size(in.dtype()));
  }

  bool fits_int(const std::vector<int64_t>& counts, int64_t total) const {
    if (total > opt_.max_count) return false;
    for (int64_t c : counts)
      if (c > opt_.max_count) return false;
    return true;
  }

  // Issues the all-gather: blocking when req is null, else nonblocking into req.
  CommBytes start_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                         MpiRequest* req) {
    const std::string local = detail::check_gather_args(in, out, counts, rank_, size_);
    const char* dt = in.defined() ? dtype_name(in.dtype()) : "?";
    check_agreement(str("all_gather_v(", dt, ") counts"), counts, local, opt_.validate);
    std::vector<int64_t> offsets;
    const int64_t total = detail::block_offsets(counts, &offsets);
    if (total == 0) return {};
    const MPI_Datatype type = mpi_type(in.dtype());
    const size_t esz = dtype_size(in.dtype());
    char* obase = static_cast<char*>(out.raw_data());
    const bool in_place = counts[rank_] > 0 && in.raw_data() == obase + offsets[rank_] * (int64_t)esz;
    if (req) req->keep_ = {in, out};
    if (fits_int(counts, total)) {
      std::vector<int> icounts(size_), idispls(size_);
      for (int r = 0; r < size_; ++r) {
        icounts[r] = (int)counts[r];
        idispls[r] = (int)offsets[r];
      }
      const void* send = in_place ? MPI_IN_PLACE : buf(in);
      if (!req) {
        GPUMIX_MPI_CHECK(MPI_Allgatherv(send, (int)counts[rank_], type, obase, icounts.data(),
                                        idispls.data(), type, comm_));
      } else {
        req->icounts_ = std::move(icounts);
        req->idispls_ = std::move(idispls);
        req->reqs_.emplace_back();
        GPUMIX_MPI_CHECK(MPI_Iallgatherv(send, (int)counts[rank_], type, obase,
                                         req->icounts_.data(), req->idispls_.data(), type, comm_,
                                         &req->reqs_.back()));
      }
    } else {
      // Too big for int counts: one broadcast per root and per chunk.
      if (!in_place && counts[rank_] > 0)
        std::memcpy(obase + offsets[rank_] * (int64_t)esz, in.raw_data(), (size_t)counts[rank_] * esz);
      for (int q = 0; q < size_; ++q) {
        for (int64_t s = 0; s < counts[q]; s += opt_.max_count) {
          const int len = (int)std::min(opt_.max_count, counts[q] - s);
          char* p = obase + (offsets[q] + s) * (int64_t)esz;
          if (!req) {
            GPUMIX_MPI_CHECK(MPI_Bcast(p, len, type, q, comm_));
          } else {
            req->reqs_.emplace_back();
            GPUMIX_MPI_CHECK(MPI_Ibcast(p, len, type, q, comm_, &req->reqs_.back()));
          }
        }
      }
    }
    return comm_payload_bytes(CommOp::all_gather_v, counts, rank_, esz);
  }

  CommBytes start_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                          MpiRequest* req) {
    const std::string local = detail::check_scatter_args(in, out, counts, rank_, size_);
    check_agreement("reduce_scatter_v(f32) counts", counts, local, opt_.validate);
    std::vector<int64_t> offsets;
    const int64_t total = detail::block_offsets(counts, &offsets);
    if (total == 0) return {};
    const float* ibase = static_cast<const float*>(buf(in));
    const int64_t mine = counts[rank_];
    // MPI forbids aliased buffers: the in-place form receives into a copy first.
    const bool in_place = mine > 0 && out.raw_data() == ibase + offsets[rank_];
    std::vector<float> temp_storage;
    std::vector<float>& temp = req ? req->temp_ : temp_storage;
    if (in_place) temp.resize((size_t)mine);
    float* obase = in_place ? temp.data() : static_cast<float*>(buf(out));
    if (req) {
      req->keep_ = {in, out};
      if (in_place) {
        float* dst = out.data<float>();
        float* src = temp.data();
        req->on_complete_ = [dst, src, mine] { std::memcpy(dst, src, (size_t)mine * sizeof(float)); };
      }
    }
    if (fits_int(counts, total)) {
      std::vector<int> icounts(size_);
      for (int r = 0; r < size_; ++r) icounts[r] = (int)counts[r];
      if (!req) {
        GPUMIX_MPI_CHECK(MPI_Reduce_scatter(ibase, obase, icounts.data(), MPI_FLOAT, MPI_SUM, comm_));
      } else {
        req->icounts_ = std::move(icounts);
        req->reqs_.emplace_back();
        GPUMIX_MPI_CHECK(MPI_Ireduce_scatter(ibase, obase, req->icounts_.data(), MPI_FLOAT,
                                             MPI_SUM, comm_, &req->reqs_.back()));
      }
    } else {
      // Too big for int counts: one reduce per root and per chunk.
      for (int q = 0; q < size_; ++q) {
        for (int64_t s = 0; s < counts[q]; s += opt_.max_count) {
          const int len = (int)std::min(opt_.max_count, counts[q] - s);
          const float* send = ibase + offsets[q] + s;
          float* recv = q == rank_ ? obase + s : nullptr;
          if (!req) {
            GPUMIX_MPI_CHECK(MPI_Reduce(send, recv, len, MPI_FLOAT, MPI_SUM, q, comm_));
          } else {
            req->reqs_.emplace_back();
            GPUMIX_MPI_CHECK(MPI_Ireduce(send, recv, len, MPI_FLOAT, MPI_SUM, q, comm_,
                                         &req->reqs_.back()));
          }
        }
      }
    }
    if (!req && in_place) std::memcpy(out.raw_data(), temp.data(), (size_t)mine * sizeof(float));
    return comm_payload_bytes(CommOp::reduce_scatter_v, counts, rank_, sizeof(float));
  }

  static std::string check_host_tensor(const Tensor& t) {
    if (!t.defined()) return "the tensor is undefined";
    if (!t.device().is_cpu())
      return str("the tensor is on ", t.device().str(),
                 ": the MPI backend moves host memory (Debian's Open MPI is not CUDA-aware)");
    return "";
  }

  CommBytes start_all_reduce(Tensor& t, MpiRequest* req) {
    std::string local = check_host_tensor(t);
    if (local.empty() && t.dtype() != DType::f32)
      local = str("reductions take f32 tensors, got ", dtype_name(t.dtype()));
    check_agreement("all_reduce(f32) numel", {t.defined() ? t.numel() : -1}, local, opt_.validate);
    const int64_t numel = t.numel();
    float* p = static_cast<float*>(buf(t));
    if (req) req->keep_ = {t};
    for (int64_t s = 0; s < numel; s += opt_.max_count) {
      const int len = (int)std::min(opt_.max_count, numel - s);
      if (!req) {
        GPUMIX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + s, len, MPI_FLOAT, MPI_SUM, comm_));
      } else {
        req->reqs_.emplace_back();
        GPUMIX_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + s, len, MPI_FLOAT, MPI_SUM, comm_,
                                        &req->reqs_.back()));
      }
    }
    const CommBytes bytes = comm_payload_bytes(
        CommOp::all_reduce, std::vector<int64_t>(size_, numel), rank_, sizeof(float));
    if (req) req->set_bytes(bytes);
    return bytes;
  }

  CommBytes start_broadcast(Tensor& t, int root, MpiRequest* req) {
    std::string local = check_host_tensor(t);
    if (local.empty()) local = detail::check_root(root, size_);
    const char* dt = t.defined() ? dtype_name(t.dtype()) : "?";
    check_agreement(str("broadcast(", dt, ") root, numel"), {root, t.defined() ? t.numel() : -1},
                    local, opt_.validate);
    const int64_t numel = t.numel();
    const size_t esz = dtype_size(t.dtype());
    char* p = static_cast<char*>(buf(t));
    if (req) req->keep_ = {t};
    for (int64_t s = 0; s < numel; s += opt_.max_count) {
      const int len = (int)std::min(opt_.max_count, numel - s);
      if (!req) {
        GPUMIX_MPI_CHECK(MPI_Bcast(p + s * (int64_t)esz, len, mpi_type(t.dtype()), root, comm_));
      } else {
        req->reqs_.emplace_back();
        GPUMIX_MPI_CHECK(MPI_Ibcast(p + s * (int64_t)esz, len, mpi_type(t.dtype()), root, comm_,
                                    &req->reqs_.back()));
      }
    }
    const CommBytes bytes = comm_payload_bytes(
        CommOp::broadcast, std::vector<int64_t>(size_, numel), rank_, esz, root);
    if (req) req->set_bytes(bytes);
    return bytes;
  }

  double scalar(double x, bool max) {
    const double start = detail::now_seconds();
    delay_if_cross_node();
    check_agreement(max ? "all_reduce_max(double)" : "all_reduce_sum(double)", {}, "",
                    opt_.validate);
    std::vector<double> all(size_);
    GPUMIX_MPI_CHECK(MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm_));
    double result = all[0];
    for (int r = 1; r < size_; ++r) result = max ? std::max(result, all[r]) : result + all[r];
    record(CommOp::all_reduce,
           comm_payload_bytes(CommOp::all_reduce, std::vector<int64_t>(size_, 1), rank_, 8),
           detail::seconds_since(start));
    return result;
  }

  friend class MpiRequest;
};

void MpiRequest::wait() {
  if (waited_) return;
  waited_ = true;
  const double start = detail::now_seconds();
  bool ok = false;
  try {
    if (!reqs_.empty()) {
      // Poll, so that a collective that never completes ends the job with a message
      // instead of hanging: spin briefly, then sleep between tests.
      int flag = 0;
      for (int spins = 0;; ++spins) {
        GPUMIX_MPI_CHECK(MPI_Testall((int)reqs_.size(), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
        if (flag) break;
        const double waited = detail::seconds_since(start);
        if (waited > timeout_s_)
          abort_job(comm_->comm_, comm_->rank_,
                    str(comm_op_name(op_), " did not complete within ", timeout_s_,
                        " s (MpiOptions::timeout_s): a rank is stuck or has died"));
        if (spins < 1000)
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(spins < 5000 ? 20 : 200));
      }
    }
    if (on_complete_) on_complete_();
    ok = true;
  } catch (...) {
    comm_->finish_request(op_, bytes_, detail::seconds_since(start), false);
    keep_.clear();
    throw;
  }
  comm_->finish_request(op_, bytes_, detail::seconds_since(start), ok);
  keep_.clear();
}

}  // namespace

// ---- session and factory ----------------------------------------------------------------

MpiSession::MpiSession(int* argc, char*** argv, bool multiple, bool require) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
#if defined(GPUMIX_CUDA_EMULATOR)
    // The emulated NCCL (kernels/cuda_emulator/nccl.cpp) calls MPI from stream worker
    // threads while the host thread makes its own MPI calls.
    multiple = true;
#endif
    const int required = multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    int provided = 0;
    GPUMIX_MPI_CHECK(MPI_Init_thread(argc, argv, required, &provided));
    owns_ = true;
    if (provided < required && require) {
      MPI_Finalize();
      owns_ = false;
      GPUMIX_CHECK(false, "MPI provides thread level ", provided, " but ", required, " (",
                   multiple ? "MPI_THREAD_MULTIPLE" : "MPI_THREAD_FUNNELED", ") is needed");
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<Comm> make_mpi_comm(const MpiOptions& options) {
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, options);
}

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm base, const MpiOptions& options) {
  return std::make_unique<MpiComm>(base, options);
}

}  // namespace gpumix::dist
