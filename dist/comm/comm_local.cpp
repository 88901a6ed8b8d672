// The local backend: N ranks as threads of one process sharing a LocalGroupState.
//
// Every collective is one or two rendezvous ("rounds") of all ranks under one mutex and
// condition variable with a generation counter. In a round each rank posts what it brings
// (the op's description and counts, its local error if any, its buffer pointers); the last
// rank to arrive checks that the posts agree and publishes an immutable snapshot of them;
// every rank then works on the snapshot outside the lock, reading the other ranks' buffers
// directly:
//
//   all_gather_v      round (check) → copy every rank's block into out → round (done)
//   reduce_scatter_v  round (check) → sum own block in rank order       → round (done)
//   all_reduce        round (check) → sum own chunk into scratch        → round → copy chunks
//   broadcast         round (check) → copy from the root                → round (done)
//   barrier, agree, scalars: one round (check; scalars summed from the snapshot)
//
// The "done" round keeps every rank's buffers valid until all have finished reading them.
// all_reduce's scratch lives in the shared state, so it needs no third round: a rank
// rewrites its scratch only after the next check round, when every rank has finished
// reading it.
//
// Device buffers (CUDA tensors; ranks on the same or on different GPUs): the rounds are the
// same, and each rank moves what it needs itself, asynchronously on its device's comm
// stream (core/stream.h) instead of with memcpy: the runtime's copies from the peers'
// buffers (core/runtime.h: peer access where available, else the driver stages), and
// reductions as fp32 ops::add on the comm stream, in rank order (the same bits as on the
// host). Events order it: every rank posts an event of its compute stream recorded when it
// issued the collective (its buffers are then written), which the others' comm streams wait
// for before reading them; the "done" round posts an event after each rank's copies, and
// the issuing thread makes its compute stream wait for every rank's (the readers of its
// buffers) before the collective returns or its request's wait() does. The host never waits
// for the device.
// All ranks of one collective pass host buffers, or all device buffers.
//
// Failure: fail() marks the group failed and wakes every waiter; waiting longer than
// timeout_s fails the group with the names of the ranks that have not arrived; a Comm
// destroyed while the others need it fails the group too. Asynchronous collectives run on
// a per-rank worker thread, in issue order with the synchronous ones (a synchronous call
// runs inline when nothing is queued, else it queues and waits).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <exception>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "dist/comm/comm.h"

namespace gpumix::dist {
namespace detail {

namespace {

// What one rank brings to a round.
struct Post {
  bool check = false;           // compare the posts of this round
  std::string what;             // "all_gather_v(f32) counts"
  std::vector<int64_t> values;  // counts, {numel}, {root, numel}, agree's values
  std::string local_error;
  const void* in = nullptr;
  void* out = nullptr;
  const float* scratch = nullptr;
  double scalar = 0;
  // Device collectives: where in/out live, the poster's compute stream when it issued the
  // collective (check rounds), and the end of its device work (later rounds).
  bool on_device = false;
  Device device;
  std::shared_ptr<Event> ready, done;
};

struct Round {
  std::vector<Post> posts;
  std::string error;  // agreement_error of the posts, for checked rounds
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += str(i ? ", " : "", ranks[i]);
  return s;
}

}  // namespace

struct LocalGroupState {
  LocalGroupState(int n_, LocalOptions options_)
      : n(n_), options(options_), here(n_, 0), left(n_, 0), taken(n_, 0), posts(n_),
        scratch(n_) {}

  const int n;
  const LocalOptions options;
  std::vector<std::string> node_names;  // set before the comms are made; empty: the default
  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;  // completed rounds
  int arrived = 0;
  std::vector<char> here;   // arrived in the current round
  std::vector<char> left;   // its Comm was destroyed
  std::vector<char> taken;  // comm(r) was called
  std::vector<Post> posts;
  std::shared_ptr<const Round> last_round;
  bool failed = false;
  int failed_rank = -1;
  std::string failure;                      // "rank 2 failed: <message>"
  std::vector<std::vector<float>> scratch;  // all_reduce: rank r's reduced chunk
  // Groups being split off (Comm::split): per (split number, color), the new group's state
  // and how many of its ranks have taken it (erased when all have).
  struct Split {
    std::shared_ptr<LocalGroupState> state;
    int taken = 0;
  };
  std::map<std::pair<uint64_t, int>, Split> splits;

  // Callers hold mu.
  void fail_locked(int rank, const std::string& message) {
    if (failed) return;
    failed = true;
    failed_rank = rank;
    failure = message;
    cv.notify_all();
  }

  [[noreturn]] void throw_failure_locked(int rank, const char* op) {
    throw Error(str("local comm, rank ", rank, ": ", op, " aborted because ", failure));
  }

  void fail(int rank, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    fail_locked(rank, str("rank ", rank, " failed: ", reason));
  }

  void leave(int rank, bool unwinding) {
    std::lock_guard<std::mutex> lock(mu);
    left[rank] = 1;
    if (unwinding) {
      fail_locked(rank, str("rank ", rank,
                            " failed: its Comm was destroyed while an exception was in flight"));
    } else if (arrived > 0 && !here[rank]) {
      std::vector<int> waiting;
      for (int q = 0; q < n; ++q)
        if (here[q]) waiting.push_back(q);
      fail_locked(rank, str("rank ", rank, " failed: it left the group (its Comm was destroyed) "
                            "while rank(s) ", rank_list(waiting), " wait for it in ",
                            posts[waiting[0]].what));
    }
  }

  // One round: posts `post` for `rank` and returns the round's snapshot when all n ranks
  // have arrived. Throws when the group has failed or fails meanwhile, and on timeout.
  std::shared_ptr<const Round> rendezvous(int rank, Post post, const char* op) {
    std::unique_lock<std::mutex> lock(mu);
    if (failed) throw_failure_locked(rank, op);
    for (int q = 0; q < n; ++q) {
      if (left[q]) {
        fail_locked(q, str("rank ", q, " failed: it left the group (its Comm was destroyed) "
                           "but rank ", rank, " called ", op));
        throw_failure_locked(rank, op);
      }
    }
    posts[rank] = std::move(post);
    here[rank] = 1;
    ++arrived;
    const uint64_t gen = generation;
    if (arrived == n) {
      auto round = std::make_shared<Round>();
      round->posts = posts;
      if (round->posts[0].check) {
        std::vector<std::string> whats(n), errors(n);
        std::vector<std::vector<int64_t>> values(n);
        for (int q = 0; q < n; ++q) {
          whats[q] = round->posts[q].what;
          values[q] = round->posts[q].values;
          errors[q] = round->posts[q].local_error;
        }
        round->error = agreement_error(whats, values, errors);
      }
      last_round = std::move(round);
      arrived = 0;
      std::fill(here.begin(), here.end(), 0);
      ++generation;
      cv.notify_all();
      return last_round;
    }
    const auto timeout = std::chrono::duration<double>(options.timeout_s);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
    while (generation == gen) {
      if (failed) throw_failure_locked(rank, op);
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && generation == gen &&
          !failed) {
        std::vector<int> missing;
        for (int q = 0; q < n; ++q)
          if (!here[q]) missing.push_back(q);
        fail_locked(rank, str(op, " timed out on rank ", rank, " after ", options.timeout_s,
                              " s: rank(s) ", rank_list(missing),
                              " did not arrive (stuck, or calling a different collective)"));
        throw Error(str("local comm, rank ", rank, ": ", failure));
      }
    }
    // The generation moved on exactly once: every rank, this one included, had to arrive
    // for it to move again.
    return last_round;
  }
};

}  // namespace detail

namespace {

using detail::LocalGroupState;
using detail::Post;
using detail::Round;

// ---- device buffers ---------------------------------------------------------------------

// What a device collective leaves for the issuing thread: the events its compute stream
// must wait for (every reader of this rank's buffers) and the scratch tensors the comm
// stream used, released after that wait (the allocator reuses blocks on the compute stream
// only).
struct DeviceSide {
  explicit DeviceSide(Device d) : device(d), ready(std::make_shared<Event>()) {
    ready->record(device, Stream::compute);
  }
  void join() {
    for (const std::shared_ptr<Event>& e : joins) e->wait(device, Stream::compute);
    joins.clear();
    scratch.clear();
  }
  Device device;
  std::shared_ptr<Event> ready;  // this rank's compute stream when it issued the collective
  std::vector<std::shared_ptr<Event>> joins;
  std::vector<Tensor> scratch;
};
using DeviceSidePtr = std::shared_ptr<DeviceSide>;

// A device side when the collective's tensors are on a GPU; null for host buffers.
DeviceSidePtr device_side(const Tensor& a, const Tensor& b = Tensor()) {
  for (const Tensor* t : {&a, &b})
    if (t->defined() && t->device().is_cuda()) return std::make_shared<DeviceSide>(t->device());
  return nullptr;
}

void post_device(Post& p, const DeviceSidePtr& side) {
  if (!side) return;
  p.on_device = true;
  p.device = side->device;
  p.ready = side->ready;
}

// "" when the round's ranks all pass host or all device buffers; else what they pass.
std::string check_one_kind(const Round& r) {
  bool any = false, all = true;
  for (const Post& p : r.posts) {
    any = any || p.on_device;
    all = all && p.on_device;
  }
  if (any == all) return "";
  std::string kinds;
  for (size_t q = 0; q < r.posts.size(); ++q)
    kinds += str(q ? ", " : "", "rank ", q, ": ", r.posts[q].on_device ? r.posts[q].device.str() : "host");
  return str("local comm: a collective moves host buffers or device buffers on every rank, not both (", kinds,
             "); put every rank's tensors on its device");
}

// The device work of one rank in a device collective, on its comm stream.
class DeviceWork {
 public:
  explicit DeviceWork(const DeviceSidePtr& side)
      : side_(*side), runtime_(device_runtime(side_.device)) {}
  // The comm stream waits for the given ranks' compute streams at their issue.
  void after_ready(const Round& r) {
    for (const Post& p : r.posts) p.ready->wait(side_.device, Stream::comm);
  }
  // The comm stream waits for the end of other ranks' device work (their reads of ours).
  void after_done(const Round& r) {
    for (const Post& p : r.posts)
      if (p.done) p.done->wait(side_.device, Stream::comm);
  }
  void copy(void* dst, const void* src, int64_t bytes) {
    runtime_.copy_async(side_.device, Stream::comm, dst, src, bytes);
  }
  // ins[0] + ins[1] + ... (n each) in rank order, fp32, as detail::sum_in_rank_order, into
  // scratch on this rank's device (returned; it lives until the join). `devices[q]` holds
  // ins[q]: on another GPU it is staged here first.
  const float* sum_in_rank_order(const std::vector<const float*>& ins, const std::vector<Device>& devices,
                                 int64_t n) {
    std::vector<Tensor> here(ins.size());
    for (size_t q = 0; q < ins.size(); ++q) {
      if (device_props(devices[q]).ordinal == device_props(side_.device).ordinal) {
        // A buffer on this GPU (this rank's or a peer's), read in place: viewed as this
        // device's, which the add runs on (never written, never freed through the view).
        here[q] = Tensor::borrow(const_cast<float*>(ins[q]), {n}, DType::f32, side_.device);
        continue;
      }
      runtime_.enable_peer_access(side_.device, devices[q]);
      here[q] = scratch({n});
      copy(here[q].raw_data(), ins[q], n * (int64_t)sizeof(float));
    }
    Tensor acc = scratch({n});
    if (here.size() == 1)
      copy(acc.raw_data(), here[0].raw_data(), n * (int64_t)sizeof(float));
    else
      ops::add(acc, here[0], here[1], Stream::comm);
    for (size_t q = 2; q < here.size(); ++q) ops::add(acc, acc, here[q], Stream::comm);
    return acc.data<float>();
  }
  // An event after this rank's device work so far, for the next round's post.
  std::shared_ptr<Event> done() {
    auto e = std::make_shared<Event>();
    e->record(side_.device, Stream::comm);
    return e;
  }
  // The issuing thread's compute stream waits for these ranks' device work.
  void join_all(const Round& r) {
    for (const Post& p : r.posts)
      if (p.done) side_.joins.push_back(p.done);
  }

 private:
  // Scratch memory from the rank's allocator, which hands out blocks whose last use is on
  // the compute stream, possibly after the collective was issued: the comm stream waits
  // for the compute stream as it is now before it writes them.
  Tensor scratch(const Shape& shape) {
    side_.scratch.push_back(Tensor::empty(shape, DType::f32, side_.device));
    Event now;
    now.record(side_.device, Stream::compute);
    now.wait(side_.device, Stream::comm);
    return side_.scratch.back();
  }
  DeviceSide& side_;
  const DeviceRuntime& runtime_;
};

// A collective queued on a rank's worker thread.
struct Task {
  CommOp op = CommOp::barrier;
  CommBytes bytes;
  std::function<void()> fn;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  DeviceSidePtr side;  // device buffers: joined to the compute stream by wait()
};

class LocalComm;

class LocalRequest : public CommRequest {
 public:
  LocalRequest(std::shared_ptr<Task> task, LocalComm* comm) : task_(std::move(task)), comm_(comm) {}
  ~LocalRequest() override {
    try {
      wait();
    } catch (...) {
      // An unwaited request's error is lost by contract (comm.h).
    }
  }
  void wait() override;
  bool done() override {
    std::lock_guard<std::mutex> lock(task_->mu);
    return task_->done;
  }

 private:
  std::shared_ptr<Task> task_;
  LocalComm* comm_;
  bool waited_ = false;
};

class LocalComm : public Comm {
 public:
  LocalComm(std::shared_ptr<LocalGroupState> group, int rank)
      : g_(std::move(group)), rank_(rank) {
    const std::vector<int>& nodes = g_->options.node_of_rank;
    if (nodes.empty())
      set_topology(std::vector<int>((size_t)g_->n, 0), {detail::host_name()});
    else
      set_topology(nodes, g_->node_names);
  }

  bool concurrent_threads() const override { return g_->options.concurrent_threads; }

  std::unique_ptr<Comm> split(int color) override {
    GPUMIX_CHECK(color >= 0, "Comm::split: the color must be >= 0, got ", color, " on rank ", rank_);
    // Every rank's color, on every rank (this also checks that all of them split here).
    Tensor mine = Tensor::empty({1}, DType::i32, Device::cpu());
    mine.data<int32_t>()[0] = color;
    Tensor all = Tensor::empty({(int64_t)g_->n}, DType::i32, Device::cpu());
    all_gather_v(mine, all, std::vector<int64_t>((size_t)g_->n, 1));
    std::vector<int> members;
    for (int r = 0; r < g_->n; ++r)
      if (all.data<int32_t>()[r] == color) members.push_back(r);
    const int new_rank = (int)(std::find(members.begin(), members.end(), rank_) - members.begin());
    const uint64_t number = splits_made_++;  // the same on every rank: splits are collective
    std::shared_ptr<LocalGroupState> sub;
    {
      std::lock_guard<std::mutex> lock(g_->mu);
      const auto key = std::make_pair(number, color);
      LocalGroupState::Split& slot = g_->splits[key];
      if (!slot.state) {
        LocalOptions o = g_->options;
        o.node_of_rank.clear();
        std::vector<std::string> names;  // the parent's, in order of first appearance
        std::vector<int> seen;
        for (int r : members) {
          const int node = node_of_rank()[(size_t)r];
          o.node_of_rank.push_back(node);
          if (std::find(seen.begin(), seen.end(), node) == seen.end()) {
            seen.push_back(node);
            names.push_back(node_names()[(size_t)node]);
          }
        }
        slot.state = std::make_shared<LocalGroupState>((int)members.size(), o);
        slot.state->node_names = names;
      }
      sub = slot.state;
      if (++slot.taken == (int)members.size()) g_->splits.erase(key);
    }
    {
      std::lock_guard<std::mutex> lock(sub->mu);
      sub->taken[(size_t)new_rank] = 1;
    }
    return std::make_unique<LocalComm>(sub, new_rank);
  }

  ~LocalComm() override {
    const bool unwinding = std::uncaught_exceptions() > 0;
    // An exception in flight: fail the group first, so that queued collectives that wait
    // for the other ranks end at once.
    if (unwinding) g_->leave(rank_, true);
    {
      std::lock_guard<std::mutex> lock(qmu_);
      stop_ = true;
    }
    qcv_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (!unwinding) g_->leave(rank_, false);
  }

  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  std::string backend() const override { return "local"; }

  // ---- the collectives, as closures run inline or on the worker -------------------------

  void all_gather_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    const DeviceSidePtr side = device_side(in, out);
    run_sync(CommOp::all_gather_v, gather_bytes(in, counts), make_gather(in, out, counts, side), side);
  }
  CommRequestPtr all_gather_v_async(const Tensor& in, Tensor& out,
                                    const std::vector<int64_t>& counts) override {
    const DeviceSidePtr side = device_side(in, out);
    return run_async(CommOp::all_gather_v, gather_bytes(in, counts), make_gather(in, out, counts, side), side);
  }
  void reduce_scatter_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    const DeviceSidePtr side = device_side(in, out);
    run_sync(CommOp::reduce_scatter_v, scatter_bytes(counts), make_scatter(in, out, counts, side), side);
  }
  CommRequestPtr reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                        const std::vector<int64_t>& counts) override {
    const DeviceSidePtr side = device_side(in, out);
    return run_async(CommOp::reduce_scatter_v, scatter_bytes(counts), make_scatter(in, out, counts, side), side);
  }
  void all_reduce_sum(Tensor& t) override {
    const DeviceSidePtr side = device_side(t);
    run_sync(CommOp::all_reduce, all_reduce_bytes(t), make_all_reduce(t, side), side);
  }
  CommRequestPtr all_reduce_sum_async(Tensor& t) override {
    const DeviceSidePtr side = device_side(t);
    return run_async(CommOp::all_reduce, all_reduce_bytes(t), make_all_reduce(t, side), side);
  }
  void broadcast(Tensor& t, int root) override {
    const DeviceSidePtr side = device_side(t);
    run_sync(CommOp::broadcast, broadcast_bytes(t, root), make_broadcast(t, root, side), side);
  }
  CommRequestPtr broadcast_async(Tensor& t, int root) override {
    const DeviceSidePtr side = device_side(t);
    return run_async(CommOp::broadcast, broadcast_bytes(t, root), make_broadcast(t, root, side), side);
  }

  double all_reduce_sum(double x) override { return scalar(x, false); }
  double all_reduce_max(double x) override { return scalar(x, true); }

  void barrier() override {
    run_sync(CommOp::barrier, {}, [this] {
      Post p;
      p.check = true;
      p.what = "barrier";
      finish_check(g_->rendezvous(rank_, std::move(p), "barrier"));
    });
  }

  void agree(const std::string& what, const std::vector<int64_t>& values,
             const std::string& local_error) override {
    run_sync(CommOp::agree, {}, [&] {
      if (n() == 1) return detail::agree_alone(local_error);
      Post p;
      p.check = true;
      p.what = what;
      p.values = values;
      p.local_error = local_error;
      finish_check(g_->rendezvous(rank_, std::move(p), "agree"));
    });
  }

  void abort(const std::string& reason) override {
    g_->fail(rank_, reason);
    throw Error(str("local comm, rank ", rank_, " aborted: ", reason));
  }

  void finish_request(CommOp op, const CommBytes& bytes, double waited_s, bool ok) {
    if (ok)
      record(op, bytes, waited_s);
    else
      record_seconds(op, waited_s);
  }

 private:
  std::shared_ptr<LocalGroupState> g_;
  const int rank_;
  uint64_t splits_made_ = 0;

  // Worker: runs queued collectives in order.
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::shared_ptr<Task>> queue_;
  int pending_ = 0;  // queued or running on the worker
  bool stop_ = false;
  std::thread worker_;

  int n() const { return g_->n; }

  // Throws the round's agreement error (the same on every rank), or that its ranks mix
  // host and device buffers.
  static const Round& finish_check(const std::shared_ptr<const Round>& round) {
    if (!round->error.empty()) throw CollectiveError(detail::collective_message("local", round->error));
    const std::string kinds = check_one_kind(*round);
    if (!kinds.empty()) throw CollectiveError(kinds);
    return *round;
  }

  // `done`: the end of this rank's device work in the collective (device buffers).
  std::shared_ptr<const Round> done_round(const char* op, std::shared_ptr<Event> done = nullptr) {
    Post p;
    p.what = "done";
    p.done = std::move(done);
    return g_->rendezvous(rank_, std::move(p), op);
  }

  CommBytes gather_bytes(const Tensor& in, const std::vector<int64_t>& counts) const {
    if ((int)counts.size() != n() || !in.defined()) return {};
    return comm_payload_bytes(CommOp::all_gather_v, counts, rank_, dtype_size(in.dtype()));
  }
  CommBytes scatter_bytes(const std::vector<int64_t>& counts) const {
    if ((int)counts.size() != n()) return {};
    return comm_payload_bytes(CommOp::reduce_scatter_v, counts, rank_, sizeof(float));
  }
  CommBytes all_reduce_bytes(const Tensor& t) const {
    if (!t.defined()) return {};
    return comm_payload_bytes(CommOp::all_reduce, std::vector<int64_t>(n(), t.numel()), rank_,
                              dtype_size(t.dtype()));
  }
  CommBytes broadcast_bytes(const Tensor& t, int root) const {
    if (!t.defined()) return {};
    return comm_payload_bytes(CommOp::broadcast, std::vector<int64_t>(n(), t.numel()), rank_,
                              dtype_size(t.dtype()), root);
  }

  // The closures capture tensors by value (shared storage stays alive while queued).
  std::function<void()> make_gather(const Tensor& in, const Tensor& out,
                                    const std::vector<int64_t>& counts, const DeviceSidePtr& side) {
    return [this, in, out, counts, side] {
      Post p;
      p.check = true;
      p.what = str("all_gather_v(", in.defined() ? dtype_name(in.dtype()) : "?", ") counts");
      p.values = counts;
      p.local_error = detail::check_gather_args(in, out, counts, rank_, n(), side != nullptr);
      if (p.local_error.empty()) {
        p.in = in.raw_data();
        p.out = out.raw_data();
      }
      post_device(p, side);
      const Round& r = finish_check(g_->rendezvous(rank_, std::move(p), "all_gather_v"));
      const size_t esz = dtype_size(in.dtype());
      char* dst = static_cast<char*>(r.posts[rank_].out);
      std::optional<DeviceWork> dev;
      if (side) dev.emplace(side).after_ready(r);
      int64_t offset = 0;
      for (int q = 0; q < n(); ++q) {
        const int64_t c = counts[q];
        char* d = dst + offset * (int64_t)esz;
        if (c > 0 && d != r.posts[q].in) {
          if (dev)
            dev->copy(d, r.posts[q].in, c * (int64_t)esz);
          else
            std::memcpy(d, r.posts[q].in, (size_t)c * esz);
        }
        offset += c;
      }
      if (!dev) {
        done_round("all_gather_v");
        return;
      }
      dev->join_all(*done_round("all_gather_v", dev->done()));
    };
  }

  std::function<void()> make_scatter(const Tensor& in, const Tensor& out,
                                     const std::vector<int64_t>& counts, const DeviceSidePtr& side) {
    return [this, in, out, counts, side] {
      Post p;
      p.check = true;
      p.what = "reduce_scatter_v(f32) counts";
      p.values = counts;
      p.local_error = detail::check_scatter_args(in, out, counts, rank_, n(), side != nullptr);
      if (p.local_error.empty()) {
        p.in = in.raw_data();
        p.out = out.raw_data();
      }
      post_device(p, side);
      const Round& r = finish_check(g_->rendezvous(rank_, std::move(p), "reduce_scatter_v"));
      std::vector<int64_t> offsets;
      detail::block_offsets(counts, &offsets);
      if (side) {
        DeviceWork dev(side);
        dev.after_ready(r);
        if (counts[rank_] > 0) {
          std::vector<const float*> ins(n());
          std::vector<Device> devices(n());
          for (int q = 0; q < n(); ++q) {
            ins[q] = static_cast<const float*>(r.posts[q].in) + offsets[rank_];
            devices[q] = r.posts[q].device;
          }
          const float* sum = dev.sum_in_rank_order(ins, devices, counts[rank_]);
          dev.copy(r.posts[rank_].out, sum, counts[rank_] * (int64_t)sizeof(float));
        }
        dev.join_all(*done_round("reduce_scatter_v", dev.done()));
        return;
      }
      if (counts[rank_] > 0) {
        std::vector<const float*> ins(n());
        for (int q = 0; q < n(); ++q) ins[q] = static_cast<const float*>(r.posts[q].in);
        detail::sum_in_rank_order(ins, offsets[rank_], offsets[rank_] + counts[rank_],
                                  static_cast<float*>(r.posts[rank_].out));
      }
      done_round("reduce_scatter_v");
    };
  }

  std::function<void()> make_all_reduce(const Tensor& t, const DeviceSidePtr& side) {
    return [this, t, side] {
      Post p;
      p.check = true;
      p.what = "all_reduce(f32) numel";
      if (!t.defined()) {
        p.local_error = "the tensor is undefined";
      } else {
        p.values = {t.numel()};
        if (t.dtype() != DType::f32)
          p.local_error = str("reductions take f32 tensors, got ", dtype_name(t.dtype()));
        else
          p.in = t.raw_data();
      }
      post_device(p, side);
      const Round& r = finish_check(g_->rendezvous(rank_, std::move(p), "all_reduce"));
      const int64_t numel = t.numel();
      if (side) {  // every rank sums all of it, then (after the others' reads) overwrites its own
        DeviceWork dev(side);
        dev.after_ready(r);
        std::vector<const float*> ins(n());
        std::vector<Device> devices(n());
        for (int q = 0; q < n(); ++q) {
          ins[q] = static_cast<const float*>(r.posts[q].in);
          devices[q] = r.posts[q].device;
        }
        const float* sum = dev.sum_in_rank_order(ins, devices, numel);
        Post p2;
        p2.what = "reduced";
        p2.done = dev.done();
        dev.after_done(*g_->rendezvous(rank_, std::move(p2), "all_reduce"));
        dev.copy(t.raw_data(), sum, numel * (int64_t)sizeof(float));
        Round mine;
        mine.posts.resize(1);
        mine.posts[0].done = dev.done();
        dev.join_all(mine);
        return;
      }
      auto lo = [&](int q) { return numel * q / n(); };
      // Phase 1: this rank's chunk, summed in rank order, into its scratch.
      std::vector<float>& mine = g_->scratch[rank_];
      mine.resize((size_t)(lo(rank_ + 1) - lo(rank_)));
      std::vector<const float*> ins(n());
      for (int q = 0; q < n(); ++q) ins[q] = static_cast<const float*>(r.posts[q].in);
      detail::sum_in_rank_order(ins, lo(rank_), lo(rank_ + 1), mine.data());
      Post p2;
      p2.what = "reduced";
      p2.scratch = mine.data();
      const std::shared_ptr<const Round> r2 = g_->rendezvous(rank_, std::move(p2), "all_reduce");
      // Phase 2: every chunk into this rank's tensor.
      float* dst = t.data<float>();
      for (int q = 0; q < n(); ++q)
        if (lo(q + 1) > lo(q))
          std::memcpy(dst + lo(q), r2->posts[q].scratch, (size_t)(lo(q + 1) - lo(q)) * sizeof(float));
    };
  }

  std::function<void()> make_broadcast(const Tensor& t, int root, const DeviceSidePtr& side) {
    return [this, t, root, side] {
      Post p;
      p.check = true;
      p.what = str("broadcast(", t.defined() ? dtype_name(t.dtype()) : "?", ") root, numel");
      p.values = {root, t.defined() ? t.numel() : -1};
      p.local_error = detail::check_root(root, n());
      if (!t.defined())
        p.local_error = "the tensor is undefined";
      if (p.local_error.empty()) p.in = t.raw_data();
      post_device(p, side);
      const Round& r = finish_check(g_->rendezvous(rank_, std::move(p), "broadcast"));
      if (side) {
        DeviceWork dev(side);
        dev.after_ready(r);
        if (rank_ != root) dev.copy(t.raw_data(), r.posts[root].in, t.nbytes());
        dev.join_all(*done_round("broadcast", dev.done()));
        return;
      }
      if (rank_ != root && t.numel() > 0)
        std::memcpy(t.raw_data(), r.posts[root].in, (size_t)t.nbytes());
      done_round("broadcast");
    };
  }

  double scalar(double x, bool max) {
    double result = 0;
    run_sync(CommOp::all_reduce, comm_payload_bytes(CommOp::all_reduce,
                                                    std::vector<int64_t>(n(), 1), rank_, 8),
             [&] {
               Post p;
               p.check = true;
               p.what = max ? "all_reduce_max(double)" : "all_reduce_sum(double)";
               p.scalar = x;
               const char* op = max ? "all_reduce_max" : "all_reduce_sum";
               const Round& r = finish_check(g_->rendezvous(rank_, std::move(p), op));
               result = r.posts[0].scalar;
               for (int q = 1; q < n(); ++q)
                 result = max ? std::max(result, r.posts[q].scalar) : result + r.posts[q].scalar;
             });
    return result;
  }

  // ---- running: inline, queued, and the worker ------------------------------------------

  // `side`: the device side of a collective on device buffers (null: host buffers).
  void run_sync(CommOp op, const CommBytes& bytes, const std::function<void()>& fn,
                const DeviceSidePtr& side = nullptr) {
    bool inline_run;
    {
      std::lock_guard<std::mutex> lock(qmu_);
      inline_run = pending_ == 0;
    }
    if (!inline_run) {
      run_async(op, bytes, fn, side)->wait();
      return;
    }
    const double start = detail::now_seconds();
    try {
      fn();
      if (side) side->join();
    } catch (...) {
      record_seconds(op, detail::seconds_since(start));
      throw;
    }
    record(op, bytes, detail::seconds_since(start));
  }

  CommRequestPtr run_async(CommOp op, const CommBytes& bytes, std::function<void()> fn,
                           const DeviceSidePtr& side = nullptr) {
    auto task = std::make_shared<Task>();
    task->op = op;
    task->bytes = bytes;
    task->fn = std::move(fn);
    task->side = side;
    {
      std::lock_guard<std::mutex> lock(qmu_);
      queue_.push_back(task);
      ++pending_;
      if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
    }
    qcv_.notify_all();
    return std::make_unique<LocalRequest>(task, this);
  }

  void work() {
    for (;;) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock<std::mutex> lock(qmu_);
        qcv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
        task = queue_.front();
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        task->fn();
      } catch (...) {
        error = std::current_exception();
      }
      task->fn = nullptr;  // release the tensors
      {
        std::lock_guard<std::mutex> lock(qmu_);
        --pending_;
      }
      {
        std::lock_guard<std::mutex> lock(task->mu);
        task->done = true;
        task->error = error;
      }
      task->cv.notify_all();
    }
  }
};

void LocalRequest::wait() {
  if (waited_) return;
  waited_ = true;
  const double start = detail::now_seconds();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(task_->mu);
    task_->cv.wait(lock, [this] { return task_->done; });
    error = task_->error;
  }
  if (task_->side) task_->side->join();
  comm_->finish_request(task_->op, task_->bytes, detail::seconds_since(start), !error);
  if (error) std::rethrow_exception(error);
}

}  // namespace

// ---- LocalGroup and run_local --------------------------------------------------------------

LocalGroup::LocalGroup(int n, LocalOptions options) {
  GPUMIX_CHECK(n >= 1, "a local group needs at least 1 rank, got ", n);
  GPUMIX_CHECK(options.timeout_s > 0, "the local comm timeout must be positive, got ",
               options.timeout_s, " s");
  GPUMIX_CHECK(options.node_of_rank.empty() || (int)options.node_of_rank.size() == n,
               "LocalOptions::node_of_rank names the node of ", options.node_of_rank.size(),
               " ranks but the group has ", n, "; give one label per rank, or none for one node");
  state_ = std::make_shared<detail::LocalGroupState>(n, options);
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const { return state_->n; }

std::unique_ptr<Comm> LocalGroup::comm(int rank) {
  GPUMIX_CHECK(rank >= 0 && rank < state_->n, "rank ", rank, " is not in the local group of ",
               state_->n, " ranks");
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    GPUMIX_CHECK(!state_->taken[rank], "the Comm of local rank ", rank, " was already made");
    state_->taken[rank] = 1;
  }
  return std::make_unique<LocalComm>(state_, rank);
}

void LocalGroup::fail(int rank, const std::string& reason) { state_->fail(rank, reason); }

int LocalGroup::failed_rank() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->failed ? state_->failed_rank : -1;
}

void run_local(int n, const std::function<void(Comm&)>& fn, LocalOptions options) {
  LocalGroup group(n, options);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  // Each thread rank logs through its parent's logger, as rank r (core/log.h).
  const std::shared_ptr<Logger> logger = current_logger();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const LogScope log_scope(logger, r);
      try {
        std::unique_ptr<Comm> comm = group.comm(r);
        try {
          fn(*comm);
        } catch (const std::exception& e) {
          group.fail(r, e.what());
          throw;
        } catch (...) {
          group.fail(r, "an exception that is not a std::exception");
          throw;
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const int cause = group.failed_rank();
  if (cause >= 0 && errors[cause]) std::rethrow_exception(errors[cause]);
  for (int r = 0; r < n; ++r)
    if (errors[r]) std::rethrow_exception(errors[r]);
}

}  // namespace gpumix::dist
