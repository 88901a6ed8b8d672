#include "dist/comm/hierarchical.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <limits>
#include <set>

#include "core/error.h"

namespace gpumix::dist {

const char* topology_algo_name(TopologyAlgo a) { return a == TopologyAlgo::flat ? "flat" : "hierarchical"; }

bool nodes_contiguous(const std::vector<int>& node_of_rank) {
  std::set<int> done;
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    if (r > 0 && node_of_rank[r] == node_of_rank[r - 1]) continue;
    if (!done.insert(node_of_rank[r]).second) return false;  // a node seen before comes back
  }
  return true;
}

TopologyChoice choose_topology_algo(CommOp op, const std::vector<int64_t>& counts,
                                    const std::vector<int>& node_of_rank, size_t elem_size,
                                    const TopologyLinks& links) {
  GPUMIX_CHECK(op == CommOp::all_gather_v || op == CommOp::reduce_scatter_v,
               "choose_topology_algo: only all_gather_v and reduce_scatter_v have a hierarchical form, not ",
               comm_op_name(op));
  GPUMIX_CHECK(counts.size() == node_of_rank.size(), "choose_topology_algo: ", counts.size(), " counts for ",
               node_of_rank.size(), " ranks");
  std::vector<double> bytes;
  for (int64_t c : counts) bytes.push_back((double)c * (double)elem_size);
  const CollectiveKind kind = op == CommOp::all_gather_v ? CollectiveKind::all_gather : CollectiveKind::reduce_scatter;
  const CollectiveTimes t = collective_times(kind, bytes, node_of_rank, links, nodes_contiguous(node_of_rank));
  TopologyChoice c;
  c.flat_s = t.flat;
  c.hierarchical_s = t.hierarchical;
  if (t.staged()) c.algo = TopologyAlgo::hierarchical;
  return c;
}

// ---- TopologyComm -----------------------------------------------------------------------------

// The thread that runs a TopologyComm's asynchronous gathers, one after the other, over
// communicators of its own: a copy of the base, and of the node and leader communicators.
// Its sub-collectives are issued asynchronously and waited for (MPI's wait polls and
// sleeps), so that the thread mostly sleeps while the bytes move.
class TopologyComm::Background {
 public:
  explicit Background(TopologyComm& owner) : owner_(owner) {
    base_ = owner.base_->split(0);
    if (owner.staged_) {
      node_ = owner.base_->split(owner.node());
      leaders_ = owner.base_->split(owner.node_->rank() == 0 ? 0 : 1);
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Background() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // A request for a gather run on the thread: `hierarchical` as chosen on the caller's
  // thread (where it is counted).
  CommRequestPtr gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, bool hierarchical) {
    auto job = std::make_shared<Job>();
    job->in = in;
    job->out = out;
    job->counts = counts;
    job->hierarchical = hierarchical;
    std::future<void> done = job->done.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(job);
    }
    cv_.notify_all();
    return std::make_unique<Request>(std::move(done));
  }

 private:
  struct Job {
    Tensor in, out;
    std::vector<int64_t> counts;
    bool hierarchical = false;
    std::promise<void> done;
  };
  class Request : public CommRequest {
   public:
    explicit Request(std::future<void> f) : f_(std::move(f)) {}
    ~Request() override {
      try {
        wait();
      } catch (...) {
        // An unwaited request's error is lost by contract (comm.h).
      }
    }
    void wait() override {
      if (!f_.valid()) return;
      std::future<void> f = std::move(f_);
      f.get();
    }
    bool done() override { return !f_.valid() || f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

   private:
    std::future<void> f_;
  };

  void run() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, nothing left
        job = jobs_.front();
        jobs_.pop_front();
      }
      try {
        if (job->hierarchical)
          owner_.gather_hier(job->in, job->out, job->counts, *node_, node_->rank() == 0 ? leaders_.get() : nullptr);
        else
          base_->all_gather_v_async(job->in, job->out, job->counts)->wait();
        job->done.set_value();
      } catch (...) {
        job->done.set_exception(std::current_exception());
      }
    }
  }

  TopologyComm& owner_;
  std::unique_ptr<Comm> base_, node_, leaders_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stop_ = false;
};

TopologyComm::~TopologyComm() = default;

namespace {
TopologyComm::Mode mode_from_env(TopologyComm::Mode given) {
  const char* env = std::getenv("GPUMIX_COLLECTIVES");
  if (!env || !*env) return given;
  const std::string v = env;
  if (v == "flat") return TopologyComm::Mode::flat;
  if (v == "hierarchical") return TopologyComm::Mode::hierarchical;
  if (v == "auto" || v == "automatic") return TopologyComm::Mode::automatic;
  GPUMIX_CHECK_INPUT(false, "GPUMIX_COLLECTIVES=", v, " is not one of flat, hierarchical, auto");
  return given;
}
}  // namespace

TopologyComm::TopologyComm(std::unique_ptr<Comm> base, TopologyLinks links, Mode mode)
    : owned_(std::move(base)), base_(owned_.get()), links_(links), scatter_links_(links), mode_(mode) {
  init();
}

TopologyComm::TopologyComm(Comm& base, TopologyLinks links, Mode mode) : TopologyComm(base, links, links, mode) {}

TopologyComm::TopologyComm(Comm& base, TopologyLinks gather, TopologyLinks scatter, Mode mode)
    : base_(&base), links_(gather), scatter_links_(scatter), mode_(mode) {
  init();
}

void TopologyComm::init() {
  mode_ = mode_from_env(mode_);
  set_topology(base_->node_of_rank(), base_->node_names());
  const std::vector<int>& nodes = node_of_rank();
  staged_ = this->nodes() > 1 && nodes_contiguous(nodes) && mode_ != Mode::flat;
  if (staged_) {  // the same on every rank: node_of_rank is
    for (int r = 0; r < size(); ++r)
      if (r == 0 || nodes[r] != nodes[r - 1]) first_rank_of_node_.push_back(r);
    first_rank_of_node_.push_back(size());
    node_ = base_->split(node());
    leaders_ = base_->split(node_->rank() == 0 ? 0 : 1);  // color 1: the others' comm, unused
  }
  // Every rank decides alike: the base's thread level is the library's.
  // GPUMIX_BACKGROUND_GATHERS=0 keeps them on the calling thread (to compare).
  const char* env = std::getenv("GPUMIX_BACKGROUND_GATHERS");
  const bool wanted = !env || std::string(env) != "0";
  if (this->nodes() > 1 && base_->concurrent_threads() && wanted) background_ = std::make_unique<Background>(*this);
}

bool TopologyComm::use_hierarchy(CommOp op, const std::vector<int64_t>& counts, size_t elem) {
  if (!staged_ || (int)counts.size() != size()) {  // bad counts: the flat call reports them
    last_ = TopologyChoice{};
    return false;
  }
  last_ = choose_topology_algo(op, counts, node_of_rank(), elem, op == CommOp::all_gather_v ? links_ : scatter_links_);
  if (mode_ == Mode::hierarchical) last_.algo = TopologyAlgo::hierarchical;
  return last_.algo == TopologyAlgo::hierarchical;
}

void TopologyComm::all_gather_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) {
  const double start = detail::now_seconds();
  if (use_hierarchy(CommOp::all_gather_v, counts, dtype_size(in.dtype()))) {
    gather_hier(in, out, counts, *node_, node_->rank() == 0 ? leaders_.get() : nullptr);
    hierarchical_calls_++;
  } else
    base_->all_gather_v(in, out, counts);
  record(CommOp::all_gather_v, comm_payload_bytes(CommOp::all_gather_v, counts, rank(), dtype_size(in.dtype())),
         detail::seconds_since(start));
}

void TopologyComm::reduce_scatter_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) {
  const double start = detail::now_seconds();
  if (use_hierarchy(CommOp::reduce_scatter_v, counts, sizeof(float)))
    scatter_hier(in, out, counts);
  else
    base_->reduce_scatter_v(in, out, counts);
  record(CommOp::reduce_scatter_v, comm_payload_bytes(CommOp::reduce_scatter_v, counts, rank(), sizeof(float)),
         detail::seconds_since(start));
}

CommRequestPtr TopologyComm::all_gather_v_async(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) {
  const bool hierarchical = use_hierarchy(CommOp::all_gather_v, counts, dtype_size(in.dtype()));
  if (background_ && (int)counts.size() == size()) {  // bad counts: the flat call below reports them
    record(CommOp::all_gather_v, comm_payload_bytes(CommOp::all_gather_v, counts, rank(), dtype_size(in.dtype())), 0);
    if (hierarchical) hierarchical_calls_++;
    return background_->gather(in, out, counts, hierarchical);
  }
  if (!hierarchical) {
    CommRequestPtr request = base_->all_gather_v_async(in, out, counts);  // reports bad counts first
    record(CommOp::all_gather_v, comm_payload_bytes(CommOp::all_gather_v, counts, rank(), dtype_size(in.dtype())), 0);
    return request;
  }
  return Comm::all_gather_v_async(in, out, counts);  // runs all_gather_v now
}

CommRequestPtr TopologyComm::reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                                    const std::vector<int64_t>& counts) {
  if (!use_hierarchy(CommOp::reduce_scatter_v, counts, sizeof(float))) {
    CommRequestPtr request = base_->reduce_scatter_v_async(in, out, counts);  // reports bad counts first
    record(CommOp::reduce_scatter_v, comm_payload_bytes(CommOp::reduce_scatter_v, counts, rank(), sizeof(float)), 0);
    return request;
  }
  return Comm::reduce_scatter_v_async(in, out, counts);
}

std::unique_ptr<Comm> TopologyComm::split(int color) {
  auto made = std::make_unique<TopologyComm>(base_->split(color), links_, mode_);
  made->scatter_links_ = scatter_links_;
  return made;
}

void TopologyComm::gather_hier(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, Comm& in_node,
                               Comm* leaders) {
  std::vector<int64_t> offsets;
  detail::block_offsets(counts, &offsets);
  const int me = node(), first = first_rank_of_node_[me], end = first_rank_of_node_[me + 1];
  const std::vector<int64_t> node_counts(counts.begin() + first, counts.begin() + end);
  int64_t node_total = 0;
  for (int64_t c : node_counts) node_total += c;
  // 1. The node's blocks, into their place in out (in may already be the view there).
  Tensor node_part = out.flat_slice(offsets[first], node_total);
  // Each stage issued asynchronously and waited for: MPI's wait polls and sleeps, where its
  // blocking call would spin on a core that the rank's compute may need.
  in_node.all_gather_v_async(in, node_part, node_counts)->wait();
  // 2. The leaders exchange the node ranges (in place: each leader's range is its slot).
  if (leaders) {
    std::vector<int64_t> node_totals;
    for (size_t k = 0; k + 1 < first_rank_of_node_.size(); ++k) {
      int64_t t = 0;
      for (int r = first_rank_of_node_[k]; r < first_rank_of_node_[k + 1]; ++r) t += counts[r];
      node_totals.push_back(t);
    }
    leaders->all_gather_v_async(node_part, out, node_totals)->wait();
  }
  // 3. The whole result to the node.
  in_node.broadcast_async(out, 0)->wait();
}

void TopologyComm::scatter_hier(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets;
  const int64_t total = detail::block_offsets(counts, &offsets);
  const int me = node(), first = first_rank_of_node_[me], end = first_rank_of_node_[me + 1];
  const int local = node_->rank(), local_n = node_->size();
  int64_t node_total = 0;
  for (int r = first; r < end; ++r) node_total += counts[r];
  // 1. The node's sum of the whole input, onto the leader (a reduce-scatter that gives it all).
  std::vector<int64_t> to_leader((size_t)local_n, 0);
  to_leader[0] = total;
  Tensor node_sum = Tensor::empty({local == 0 ? total : 0}, DType::f32, in.device());
  node_->reduce_scatter_v(in, node_sum, to_leader);
  // 2. The leaders reduce-scatter the node sums by node range.
  Tensor node_range = Tensor::empty({node_total}, DType::f32, in.device());
  if (local == 0) {
    std::vector<int64_t> node_totals;
    for (size_t k = 0; k + 1 < first_rank_of_node_.size(); ++k) {
      int64_t t = 0;
      for (int r = first_rank_of_node_[k]; r < first_rank_of_node_[k + 1]; ++r) t += counts[r];
      node_totals.push_back(t);
    }
    leaders_->reduce_scatter_v(node_sum, node_range, node_totals);
  }
  // 3. The node's range to every rank of the node; each keeps its slice.
  node_->broadcast(node_range, 0);
  if (counts[rank()] > 0) out.copy_from(node_range.flat_slice(offsets[rank()] - offsets[first], counts[rank()]));
  hierarchical_calls_++;
}

}  // namespace gpumix::dist
