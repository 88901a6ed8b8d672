// Collectives that know the topology: the uneven all-gather and reduce-scatter in three
// stages, within each node, across the nodes (one leader per node), within each node again,
// where the cost model says that pays (when the link between nodes is the bottleneck: many
// ranks per node and a latency-bound or oversubscribed inter-node link).
//
//   all_gather_v      1. node all-gather of the node's blocks (intra)
//                     2. the node leaders all-gather the node ranges (inter, one rank per node)
//                     3. each leader broadcasts the whole result to its node (intra)
//                     Copies only: bitwise equal to the flat all-gather.
//   reduce_scatter_v  1. node reduce of the whole input onto the leader (intra; a
//                        reduce-scatter whose counts give the leader everything)
//                     2. the leaders reduce-scatter the node sums by node range (inter)
//                     3. each leader broadcasts its node's range, every rank keeps its slice
//                     The sum is associated per node first (Σ over nodes of Σ within the node,
//                     each in rank order), so it equals the flat rank-order sum within fp32
//                     reassociation: |error| <= (N - 1) · FLT_EPSILON · Σ_r |x_r| per element.
//
// Where each stage runs over the inter-node link once per node instead of once per rank, the
// bytes and latencies crossing it drop by the ranks per node. The stages need each node's
// ranks to be consecutive in rank order (mpirun's default placement, cluster files'); other
// placements run flat.
//
// One place decides: choose_topology_algo, from the links' latency and bandwidth (the
// profile's intra-node, inter-node and between-leaders figures) through the formulas of
// dist/comm/collective_cost.h, which the cost model prices the run's collectives with too.
// TopologyComm applies it per call to any Comm.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/comm/collective_cost.h"
#include "dist/comm/comm.h"

namespace gpumix::dist {

enum class TopologyAlgo : uint8_t { flat, hierarchical };
const char* topology_algo_name(TopologyAlgo a);  // "flat", "hierarchical"

struct TopologyChoice {
  TopologyAlgo algo = TopologyAlgo::flat;
  double flat_s = 0;
  double hierarchical_s = 0;  // infinity where the placement does not allow it
};

// The time of both forms of one all_gather_v or reduce_scatter_v (`op`) with these counts
// on these nodes (Comm::node_of_rank), and the cheaper one (flat on a tie): collective_times
// of dist/comm/collective_cost.h with each rank's bytes (reduce-scatter: the fp32 reduction's).
TopologyChoice choose_topology_algo(CommOp op, const std::vector<int64_t>& counts,
                                    const std::vector<int>& node_of_rank, size_t elem_size,
                                    const TopologyLinks& links);

// True when every node's ranks are consecutive in rank order (the stages need it).
bool nodes_contiguous(const std::vector<int>& node_of_rank);

// A Comm that runs all_gather_v and reduce_scatter_v on `base` flat or hierarchically, as
// choose_topology_algo says per call (or always as `force` says, for tests and benchmarks),
// and everything else on `base` as it is. Collective to make (it splits base into nodes and
// leaders). Its asynchronous all-gather, where the base allows a second thread
// (Comm::concurrent_threads: MPI initialised with MPI_THREAD_MULTIPLE), runs flat or
// hierarchically on a thread of its own over communicators of its own (split off at
// construction, so that the rank's other collectives never meet them), one gather after
// the other in the order they were issued (the same on every rank): it progresses while the
// rank computes, which an MPI library without a progress thread does not do for its own
// nonblocking collectives (they move mostly inside the wait). Elsewhere a hierarchical
// asynchronous call completes before it returns. The reduce-scatter's asynchronous form
// always does. GPUMIX_BACKGROUND_GATHERS=0 in the environment keeps the gathers on the
// calling thread (to compare).
// Its byte counters (stats()) count its all-gathers and reduce-scatters (the payload as
// comm.h defines it, whatever the form); the other collectives count in base's.
// GPUMIX_COLLECTIVES=flat|hierarchical|auto in the environment overrides `mode`.
class TopologyComm : public Comm {
 public:
  enum class Mode : uint8_t { automatic, flat, hierarchical };
  // `links` price both collectives; `gather` and `scatter` each its own (the profile
  // measures them apart).
  TopologyComm(std::unique_ptr<Comm> base, TopologyLinks links, Mode mode = Mode::automatic);
  // Over a Comm the caller keeps alive.
  TopologyComm(Comm& base, TopologyLinks links, Mode mode = Mode::automatic);
  TopologyComm(Comm& base, TopologyLinks gather, TopologyLinks scatter, Mode mode = Mode::automatic);

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  std::string backend() const override { return base_->backend(); }

  void all_gather_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override;
  void reduce_scatter_v(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override;
  CommRequestPtr all_gather_v_async(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override;
  CommRequestPtr reduce_scatter_v_async(const Tensor& in, Tensor& out,
                                        const std::vector<int64_t>& counts) override;
  void all_reduce_sum(Tensor& t) override { base_->all_reduce_sum(t); }
  double all_reduce_sum(double x) override { return base_->all_reduce_sum(x); }
  double all_reduce_max(double x) override { return base_->all_reduce_max(x); }
  CommRequestPtr all_reduce_sum_async(Tensor& t) override { return base_->all_reduce_sum_async(t); }
  void broadcast(Tensor& t, int root) override { base_->broadcast(t, root); }
  CommRequestPtr broadcast_async(Tensor& t, int root) override { return base_->broadcast_async(t, root); }
  void barrier() override { base_->barrier(); }
  void agree(const std::string& what, const std::vector<int64_t>& values,
             const std::string& local_error = "") override {
    base_->agree(what, values, local_error);
  }
  void abort(const std::string& reason) override { base_->abort(reason); }
  std::unique_ptr<Comm> split(int color) override;

  // What the last all_gather_v / reduce_scatter_v ran, and how many of each so far.
  TopologyChoice last_choice() const { return last_; }
  int64_t hierarchical_calls() const { return hierarchical_calls_; }
  const TopologyLinks& links() const { return links_; }  // the all-gather's
  const TopologyLinks& scatter_links() const { return scatter_links_; }
  Comm& base() { return *base_; }
  // Whether asynchronous gathers run on the thread of their own (see above).
  bool gathers_in_background() const { return background_ != nullptr; }
  ~TopologyComm() override;

 private:
  class Background;
  void init();
  bool use_hierarchy(CommOp op, const std::vector<int64_t>& counts, size_t elem);
  // The three stages over `in_node` and (on a node's first rank) `leaders`.
  void gather_hier(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, Comm& in_node, Comm* leaders);
  void scatter_hier(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts);

  std::unique_ptr<Comm> owned_;
  Comm* base_;
  TopologyLinks links_, scatter_links_;
  Mode mode_;
  std::unique_ptr<Comm> node_, leaders_;  // this rank's node; the leaders (local rank 0) of every node
  std::vector<int> first_rank_of_node_;  // and N at the end
  bool staged_ = false;                  // several nodes, each on consecutive ranks: the stages can run
  TopologyChoice last_;
  int64_t hierarchical_calls_ = 0;
  std::unique_ptr<Background> background_;  // null: asynchronous gathers as described above
};

}  // namespace gpumix::dist
