// The parts of dist/comm/comm.h that every backend shares: statistics, payload byte counts,
// argument checks, the agreement message, the rank-ordered sum, the uneven-algorithm cost
// model, and the factories of backends this build does not have.
#include "dist/comm/comm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include <unistd.h>

#include "core/error.h"

namespace gpumix::dist {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_gather_v: return "all_gather_v";
    case CommOp::reduce_scatter_v: return "reduce_scatter_v";
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::broadcast: return "broadcast";
    case CommOp::barrier: return "barrier";
    case CommOp::agree: return "agree";
  }
  return "?";
}

// Mark a local error as a user's mistake (local_error_of), found by a rank in its own part
// or by a check it made for all ranks: bytes no message holds.
constexpr char kUsersMistake = '\x02', kRunsMistake = '\x03';

namespace {
// One field summed over every op kind.
template <class T, size_t N>
T total(const std::array<CommOpStats, N>& ops, T CommOpStats::*field) {
  T s = 0;
  for (const CommOpStats& o : ops) s += o.*field;
  return s;
}
}  // namespace

int64_t CommStats::calls() const { return total(ops, &CommOpStats::calls); }
int64_t CommStats::bytes_sent() const { return total(ops, &CommOpStats::bytes_sent); }
int64_t CommStats::bytes_received() const { return total(ops, &CommOpStats::bytes_received); }
double CommStats::seconds() const { return total(ops, &CommOpStats::seconds); }

CommBytes comm_payload_bytes(CommOp op, const std::vector<int64_t>& counts, int rank,
                             size_t elem_size, int root) {
  const int64_t n = (int64_t)counts.size();
  const int64_t e = (int64_t)elem_size;
  CommBytes b;
  // Counts that do not name this rank move nothing; the collective itself reports them.
  if (n <= 1 || rank < 0 || rank >= n) return b;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  switch (op) {
    case CommOp::all_gather_v:
      b.sent = counts[rank] * e * (n - 1);
      b.received = (total - counts[rank]) * e;
      break;
    case CommOp::reduce_scatter_v:
      b.sent = (total - counts[rank]) * e;
      b.received = counts[rank] * e * (n - 1);
      break;
    case CommOp::all_reduce:
      // counts = {numel} repeated per rank: every rank holds the whole tensor.
      b.sent = counts[rank] * e * (n - 1);
      b.received = counts[rank] * e * (n - 1);
      break;
    case CommOp::broadcast:
      if (rank == root)
        b.sent = counts[rank] * e * (n - 1);
      else
        b.received = counts[rank] * e;
      break;
    case CommOp::barrier:
    case CommOp::agree:
      break;
  }
  return b;
}

// ---- Comm base --------------------------------------------------------------------------

namespace {

// A request that completed when it was made (the default asynchronous forms).
class DoneRequest : public CommRequest {
 public:
  void wait() override {}
  bool done() override { return true; }
};

}  // namespace

CommRequestPtr Comm::all_gather_v_async(const Tensor& in, Tensor& out,
                                        const std::vector<int64_t>& counts) {
  all_gather_v(in, out, counts);
  return std::make_unique<DoneRequest>();
}
CommRequestPtr Comm::reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                            const std::vector<int64_t>& counts) {
  reduce_scatter_v(in, out, counts);
  return std::make_unique<DoneRequest>();
}
CommRequestPtr Comm::all_reduce_sum_async(Tensor& t) {
  all_reduce_sum(t);
  return std::make_unique<DoneRequest>();
}
CommRequestPtr Comm::broadcast_async(Tensor& t, int root) {
  broadcast(t, root);
  return std::make_unique<DoneRequest>();
}

CommStats Comm::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Comm::reset_stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = CommStats{};
}

void Comm::record(CommOp op, const CommBytes& bytes, double seconds) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  CommOpStats& s = stats_[op];
  s.calls += 1;
  s.bytes_sent += bytes.sent;
  s.bytes_received += bytes.received;
  s.seconds += seconds;
}

std::vector<int> Comm::ranks_of_node(int n) const {
  std::vector<int> out;
  for (size_t r = 0; r < node_of_rank_.size(); ++r)
    if (node_of_rank_[r] == n) out.push_back((int)r);
  return out;
}

void Comm::set_topology(const std::vector<int>& node_of_rank, std::vector<std::string> names) {
  GPUMIX_CHECK((int)node_of_rank.size() == size(), "the topology names the node of ",
               node_of_rank.size(), " ranks but the communicator has ", size());
  std::vector<int> label_order;  // labels in order of first appearance
  node_of_rank_.assign(node_of_rank.size(), 0);
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    const auto it = std::find(label_order.begin(), label_order.end(), node_of_rank[r]);
    node_of_rank_[r] = (int)(it - label_order.begin());
    if (it == label_order.end()) label_order.push_back(node_of_rank[r]);
  }
  if (names.empty())
    for (size_t n = 0; n < label_order.size(); ++n) names.push_back(str("node", n));
  GPUMIX_CHECK(names.size() == label_order.size(), "the topology has ", label_order.size(),
               " nodes but ", names.size(), " node names");
  node_names_ = std::move(names);
}

void Comm::record_seconds(CommOp op, double seconds) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_[op].seconds += seconds;
}

// ---- the uneven-collective cost model (NCCL) ---------------------------------------------

const char* uneven_algo_name(UnevenAlgo a) {
  switch (a) {
    case UnevenAlgo::automatic: return "automatic";
    case UnevenAlgo::padded: return "padded";
    case UnevenAlgo::grouped: return "grouped";
  }
  return "?";
}

UnevenChoice choose_uneven_algo(const std::vector<int64_t>& counts, size_t elem_size,
                                const UnevenCostParams& p) {
  UnevenChoice c;
  const double n = (double)counts.size();
  int64_t max_count = 0, total = 0, nonzero = 0;
  bool even = true;
  for (int64_t x : counts) {
    max_count = std::max(max_count, x);
    total += x;
    nonzero += x > 0;
    even = even && x == counts[0];
  }
  if (total == 0) return c;  // nothing to move: no call at all
  const double e = (double)elem_size;
  const double padded_wire = (n - 1) * (double)max_count * e / p.bandwidth_Bps;
  const double staging = even ? 0 : 2.0 * (double)total * e / p.copy_Bps;
  c.padded_s = p.latency_s + padded_wire + staging;
  c.grouped_s = p.latency_s + (double)nonzero * p.root_latency_s +
                (double)total * e * p.grouped_factor / p.bandwidth_Bps;
  c.algo = (even || c.padded_s <= c.grouped_s) ? UnevenAlgo::padded : UnevenAlgo::grouped;
  return c;
}

// ---- shared helpers ---------------------------------------------------------------------

std::string local_error_of(const std::exception& e, bool for_all) {
  const std::string what = e.what();
  // A user's mistake: an InputError, or what the layers without gpumix::Error throw about a
  // file or a flag (std::runtime_error, std::invalid_argument, filesystem and JSON errors).
  // A rank's own: any other gpumix::Error (a bug, its memory, its device) or bad_alloc.
  const bool mistake = dynamic_cast<const InputError*>(&e) ||
                       (!dynamic_cast<const Error*>(&e) && !dynamic_cast<const std::bad_alloc*>(&e));
  if (mistake) return std::string(1, for_all ? kRunsMistake : kUsersMistake) + what;
  return what;
}

namespace detail {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double seconds_since(double start) { return now_seconds() - start; }

std::string format_counts(const std::vector<int64_t>& counts) {
  std::string s = "[";
  const size_t n = counts.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 12 && i == 6) {
      s += str("... (", n - 10, " more) ..., ");
      i = n - 4;
    }
    s += std::to_string(counts[i]);
    if (i + 1 < n) s += ", ";
  }
  return s + "]";
}

int64_t block_offsets(const std::vector<int64_t>& counts, std::vector<int64_t>* offsets) {
  int64_t total = 0;
  if (offsets) offsets->resize(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    if (offsets) (*offsets)[r] = total;
    total += counts[r];
  }
  return total;
}

namespace {

// Shared part of the all-gather / reduce-scatter checks: counts has one entry per rank,
// none negative; returns the sum in *total.
std::string check_counts(const std::vector<int64_t>& counts, int size, int64_t* total) {
  if ((int)counts.size() != size)
    return str("counts has ", counts.size(), " entries ", format_counts(counts), " but there are ",
               size, " ranks");
  *total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) return str("counts[", r, "] = ", counts[r], " is negative");
    *total += counts[r];
  }
  return "";
}

std::string check_tensor(const Tensor& t, const char* name, bool device_ok) {
  if (!t.defined()) return str(name, " is an undefined tensor");
  if (!t.device().is_cpu() && !device_ok)
    return str(name, " is on ", t.device().str(),
               ": this backend moves host memory (the NCCL backend takes device memory)");
  return "";
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

const void* element_ptr(const Tensor& t, int64_t index) {
  return static_cast<const char*>(t.raw_data()) + index * (int64_t)dtype_size(t.dtype());
}

}  // namespace

// Device buffers: in and out on one device.
static std::string check_same_device(const Tensor& in, const Tensor& out) {
  if (in.device() == out.device()) return "";
  return str("in is on ", in.device().str(), " but out on ", out.device().str(),
             ": a collective's buffers are on the rank's device");
}

std::string check_gather_args(const Tensor& in, const Tensor& out,
                              const std::vector<int64_t>& counts, int rank, int size, bool device) {
  int64_t total = 0;
  std::string e = check_counts(counts, size, &total);
  if (e.empty()) e = check_tensor(in, "in", device);
  if (e.empty()) e = check_tensor(out, "out", device);
  if (e.empty() && device) e = check_same_device(in, out);
  if (!e.empty()) return e;
  if (in.dtype() != out.dtype())
    return str("in is ", dtype_name(in.dtype()), " but out is ", dtype_name(out.dtype()));
  if (in.numel() != counts[rank])
    return str("in has ", in.numel(), " elements but counts[", rank, "] = ", counts[rank],
               " (counts ", format_counts(counts), ")");
  if (out.numel() != total)
    return str("out has ", out.numel(), " elements but the counts ", format_counts(counts),
               " sum to ", total);
  // In place is `in` = the view of `out` at this rank's offset; any other overlap is a bug.
  std::vector<int64_t> offsets;
  block_offsets(counts, &offsets);
  if (overlaps(in, out) && in.raw_data() != element_ptr(out, offsets[rank]))
    return "in overlaps out but is not out's block of this rank (the in-place form)";
  return "";
}

std::string check_scatter_args(const Tensor& in, const Tensor& out,
                               const std::vector<int64_t>& counts, int rank, int size, bool device) {
  int64_t total = 0;
  std::string e = check_counts(counts, size, &total);
  if (e.empty()) e = check_tensor(in, "in", device);
  if (e.empty()) e = check_tensor(out, "out", device);
  if (e.empty() && device) e = check_same_device(in, out);
  if (!e.empty()) return e;
  if (in.dtype() != DType::f32 || out.dtype() != DType::f32)
    return str("reductions take f32 tensors, got in ", dtype_name(in.dtype()), " and out ",
               dtype_name(out.dtype()));
  if (in.numel() != total)
    return str("in has ", in.numel(), " elements but the counts ", format_counts(counts),
               " sum to ", total);
  if (out.numel() != counts[rank])
    return str("out has ", out.numel(), " elements but counts[", rank, "] = ", counts[rank],
               " (counts ", format_counts(counts), ")");
  std::vector<int64_t> offsets;
  block_offsets(counts, &offsets);
  if (overlaps(in, out) && out.raw_data() != element_ptr(in, offsets[rank]))
    return "out overlaps in but is not in's block of this rank (the in-place form)";
  return "";
}

std::string check_root(int root, int size) {
  if (root < 0 || root >= size) return str("root ", root, " is not a rank (0..", size - 1, ")");
  return "";
}

namespace {

bool is_users_mistake(const std::string& e) { return !e.empty() && (e[0] == kUsersMistake || e[0] == kRunsMistake); }
std::string unmarked(const std::string& e) { return is_users_mistake(e) ? e.substr(1) : e; }

}  // namespace

std::string agreement_error(const std::vector<std::string>& whats,
                            const std::vector<std::vector<int64_t>>& values,
                            const std::vector<std::string>& local_errors) {
  const size_t n = whats.size();
  std::string errors, first;
  int n_errors = 0;
  bool one_mistake = true, for_all = true;  // every error found is the same user's mistake
  for (size_t r = 0; r < n; ++r) {
    const std::string& e = local_errors[r];
    if (e.empty()) continue;
    if (n_errors++ > 0) errors += "; ";
    errors += str("rank ", r, ": ", unmarked(e));
    if (first.empty()) first = e;
    one_mistake = one_mistake && is_users_mistake(e) && unmarked(e) == unmarked(first);
    for_all = for_all && e[0] == kRunsMistake;
  }
  // The run's mistake, said once (still marked, for collective_message).
  if (n_errors > 0 && one_mistake && (for_all || n_errors == (int)n)) return first;
  if (n_errors > 0) return str(whats[0], " failed on ", n_errors, " of ", n, " ranks: ", errors);

  bool same_what = true, same_values = true;
  for (size_t r = 1; r < n; ++r) {
    same_what = same_what && whats[r] == whats[0];
    same_values = same_values && values[r] == values[0];
  }
  if (same_what && same_values) return "";
  std::string m;
  if (same_what) {
    m = str(whats[0], ": the ranks disagree (every rank must pass the same values): ");
    for (size_t r = 0; r < n; ++r)
      m += str(r ? "; " : "", "rank ", r, " ", format_counts(values[r]));
  } else {
    m = "the ranks called different collectives, or disagree on them: ";
    for (size_t r = 0; r < n; ++r)
      m += str(r ? "; " : "", "rank ", r, " ", whats[r], " ", format_counts(values[r]));
  }
  return m;
}

std::string collective_message(const char* backend, const std::string& agreement) {
  if (is_users_mistake(agreement)) return unmarked(agreement);
  return str(backend, " comm: ", agreement);
}

void agree_alone(const std::string& local_error) {
  if (!local_error.empty()) throw CollectiveError(unmarked(local_error));
}

uint64_t agreement_hash(const std::string& what, const std::vector<int64_t>& values,
                        bool has_error) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t bytes) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < bytes; ++i) {
      h ^= c[i];
      h *= 1099511628211ull;
    }
  };
  mix(what.data(), what.size());
  const uint64_t n = values.size();
  mix(&n, sizeof n);
  if (!values.empty()) mix(values.data(), values.size() * sizeof(int64_t));
  const unsigned char e = has_error ? 1 : 0;
  mix(&e, 1);
  return h;
}

void sum_in_rank_order(const std::vector<const float*>& ranks, int64_t begin, int64_t end,
                       float* out) {
  // Blocked: the block is summed into a local buffer before it is written, so `out` may be
  // one of the inputs at the same positions (in place).
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  const size_t n = ranks.size();
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t len = std::min(kBlock, end - b);
    const float* p0 = ranks[0] + b;
    for (int64_t i = 0; i < len; ++i) acc[i] = p0[i];
    for (size_t r = 1; r < n; ++r) {
      const float* p = ranks[r] + b;
      for (int64_t i = 0; i < len; ++i) acc[i] += p[i];
    }
    std::memcpy(out + (b - begin), acc, (size_t)len * sizeof(float));
  }
}

}  // namespace detail

// ---- environment and the backends this build lacks ---------------------------------------

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

#ifdef GPUMIX_HAVE_MPI
bool mpi_built() { return true; }
#else
bool mpi_built() { return false; }

MpiSession::MpiSession(int*, char***, bool, bool) {}
MpiSession::~MpiSession() = default;

std::unique_ptr<Comm> make_mpi_comm(const MpiOptions&) {
  GPUMIX_CHECK_INPUT(false, "the MPI backend is not available: GPUMix was built without MPI "
                      "(install libopenmpi-dev and reconfigure with -Dmpi=enabled), or use "
                      "the local backend (--ranks N)");
  return nullptr;
}
#endif

#if defined(GPUMIX_HAVE_MPI) && defined(GPUMIX_HAVE_CUDA)
bool nccl_built() { return true; }
#else
bool nccl_built() { return false; }

std::unique_ptr<DeviceComm> make_nccl_comm(const NcclOptions&) {
  GPUMIX_CHECK_INPUT(false, "the NCCL backend is not available: GPUMix was built without ",
#ifdef GPUMIX_HAVE_CUDA
                     "MPI (needed to bootstrap NCCL)",
#else
                     "CUDA",
#endif
                     "; use the MPI backend for host memory");
  return nullptr;
}
#endif

}  // namespace gpumix::dist
