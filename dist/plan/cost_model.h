// The step-time model of docs/method.md §2 as the engine runs a step (dist/engine/sharded_engine.h),
// in one place: the planner optimises it, the baselines and the simulator report it.
//
// Per block, rank i (batch b in n = ceil(b/m) micro-batches, the last one smaller):
//   F_i = Σ_k fwd(m_k)                          forward of all micro-batches
//   G_i = Σ_k bwd(m_k) + (n − 1) · o_i          recompute + backward (+ per-micro-batch overhead)
//   X_i = b · T · C · dtype / host_bandwidth    offload copy of the block inputs (0 if not)
// (bwd is measured with the recompute, so G_i is §2's n·(f + g)). The engine gathers each
// block before it computes, prefetching the next block's gather while the current one
// computes, and reduce-scatters a block's gradient once its backward is done, waiting for
// it (the next block's compute starts after it). A prefetched gather hides behind the
// compute it was issued before only as far as the collective moves on its own: the
// profile's comm.overlap φ (1 on a GPU's comm stream; an MPI library without a progress
// thread moves a large message mostly inside the wait), so of AG, AG − φ·min(AG, x) is
// exposed behind compute x. Per block:
//   fwd_i = F'_i + exposed(AG, F'_i)                     F'_i = max(F_i, X_i)
//   bwd_i = G'_i + exposed(AG, G'_i) + RS + exposed_AR(G'_i)   G'_i = max(G_i, X_i)
//   t_i   = fwd_i + bwd_i
// The ranks synchronise at every block's collectives, at the embedding / head and at the
// optimizer, so
//   T_step = L · max_i t_i + max_i (H_i + C_head) + max_i r_i · P · opt_i
// with H_i the embedding + head + loss compute of the rank's micro-batches and C_head the
// collectives outside the blocks, none of them overlapped: the embedding unit's gather at
// the start of the step (it stays gathered until the end of the backward: the LM head is
// tied to it), the first block's gather (issued when the embedding's gather returns, it has
// only the embedding's lookup to hide behind: charged whole), the embedding's
// reduce-scatter at the end, and the head unit's reduce-scatter (its final norm, and an
// untied head's matrix). The head unit's gather is issued before the last block's forward
// and hides behind it: where the head unit is smaller than a block (a tied head), the last
// block's exposed(AG, F'_i) already charges at least as much, so C_head leaves it out; an
// untied head's larger gather adds its excess over a block's gather, whole (an upper
// bound of what the last block's forward leaves exposed).
// Which units are tied, and their sizes, are the model family's (nn/model_family.h). (Each block's forward
// and backward wait for their own slowest rank; L · max_i t_i charges the slowest rank's
// sum, the same where one rank is the slowest in both.)
//
// The collectives: AG moves a block's parameters in the compute dtype, RS its fp32
// gradients, over the ranks that take part (b > 0 or r > 0), in the form the engine runs
// them: flat, or, across nodes each on consecutive ranks, hierarchical where that is
// cheaper (TopologyComm's choice; both priced by dist/comm/collective_cost.h from the
// profile's intra-node, inter-node and between-leaders links). The hierarchical form's
// middle stage is bound by how the state is split between the nodes (each rank's bytes are
// its share of the unit): the planner weighs that against the optimizer and memory.
//
// Hybrid sharding (Sharding, dist/plan/work.h): AG and RS run within a group (its ranks that take part,
// on the nodes the group spans), and the gradient slices are then all-reduced across the
// groups, AR, after the group's reduce-scatter. The engine leaves that all-reduce in
// flight behind the next unit's backward (waiting for it at the next unit's reduce): on a
// GPU it moves on the comm stream, after the gather issued behind the same compute, so
// exposed_AR(x) = AR − ψ·min(AR, x − φ·min(AG, x)) with ψ = 1 where every rank is a GPU;
// elsewhere ψ = 0 (MPI's nonblocking all-reduce moves mostly inside the wait, and no
// figure says how far: not credited). The last block's all-reduce, followed only by the
// embedding's backward, is charged whole in C_head. AR is a ring all-reduce (a reduce-scatter
// and an all-gather) over the G groups: 2(G−1) latencies, and through each node's link
// 2(G−1)/G × (the sum of the shares of that node's ranks) × the fp32 gradient, since the
// rings of all positions on a node share its link (a node-wide NIC, as the emulated nodes
// and most clusters' inter-node fabric per node are modelled here), on the between-leaders
// link when the rings leave a node.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/collective_cost.h"
#include "dist/plan/memory_model.h"
#include "dist/plan/profile.h"
#include "dist/plan/work.h"

namespace gpumix::dist {

struct CommTimes {
  double ag = 0, rs = 0;              // one block
  double embed_ag = 0, embed_rs = 0;  // the embedding unit
  double head_rs = 0;                 // the head unit; its gather: see head()
  double head_ag_excess = 0;          // an untied head's gather beyond a block's (0 when smaller)
  double ar = 0, embed_ar = 0, head_ar = 0;  // hybrid: the all-reduce across groups (0 when full)
  bool ag_staged = false, rs_staged = false;  // a block's collectives run hierarchically
  double overlap = 1;                 // of a prefetched gather (the profile's comm.overlap)
  double ar_overlap = 0;              // ψ: of the all-reduce across groups left in flight (see above)
  // The part of a gather of time `ag` that compute of time x leaves exposed.
  double exposed(double x) const { return ag - overlap * std::min(ag, x); }
  // The part of the previous unit's all-reduce across groups that backward compute of time
  // x leaves exposed: it shares the link with the gather in flight behind the same
  // compute, so it hides only behind what the gather left.
  double exposed_ar(double x) const {
    return ar - ar_overlap * std::min(ar, std::max(0.0, x - overlap * std::min(ag, x)));
  }
  // C_head: the collectives outside the blocks, none overlapped: the embedding's, the first
  // block's gather (only the embedding's lookup before it), the head unit's reduce-scatter
  // (its gather hides behind the last block's forward, charged there as a block's).
  // Under hybrid sharding the all-reduces across groups: the embedding's (waited for at the
  // end), and with them in flight (ψ) the first block's, which only the embedding's
  // backward follows, in place of the head unit's, which hides behind the last block's
  // backward (charged there as a block's).
  double head() const {
    return embed_ag + ag + embed_rs + embed_ar + head_rs + head_ar + ar_overlap * (ar - head_ar) + head_ag_excess;
  }
};

struct RankTimes {
  double fwd = 0, bwd = 0, offload = 0;  // per block: F_i, G_i, X_i
  double block_fwd = 0, block_bwd = 0;   // per block with the collectives: fwd_i, bwd_i
  double block = 0;                      // t_i = fwd_i + bwd_i
  double head_compute = 0;               // H_i
  double head = 0;                       // H_i + C_head
  double optimizer = 0;                  // r · P · opt
};

// Values of one device type at micro-batch sizes 1..max_m, interpolated once.
struct DeviceTable {
  const DeviceProfile* device = nullptr;
  std::vector<MicroBatchSample> at;  // at[m], m = 1..max_m
  const MicroBatchSample& get(int64_t m) const { return at[m]; }
};

class CostModel {
 public:
  CostModel(const Profile& profile, MemoryParams memory = {}, int64_t max_m = 0, Sharding sharding = {});
  // This model under another sharding: the same profile, memory and tables (shared, not
  // rebuilt), for a planner that weighs several shardings of one plan.
  CostModel with_sharding(Sharding sharding) const;

  const Profile& profile() const { return profile_; }
  const MemoryModel& memory() const { return memory_; }
  const DeviceTable& table(int rank) const { return (*tables_)[table_of_rank_[rank]]; }
  int device_index(int rank) const { return table_of_rank_[rank]; }
  int num_device_types() const { return (int)tables_->size(); }
  int64_t max_m() const { return max_m_; }
  const Sharding& sharding() const { return sharding_; }

  // The collectives of this work (one per rank) under this model's sharding, in the forms
  // the engine runs them (each rank's bytes its share of the unit).
  CommTimes comm_for(const std::vector<RankWork>& work) const;
  // Full sharding over `members` (rank numbers, ascending): with even shares, or (even
  // false) the fastest uneven ones: the flat form with the uneven factor, the state split
  // evenly between the members' nodes (what the hierarchical form costs least with). A
  // lower bound of any uneven shares' collectives, for the planner's search.
  CommTimes comm_members(const std::vector<int>& members, bool even) const;
  // The links of one collective kind, as TopologyComm takes them.
  TopologyLinks links(bool gather) const;

  // Compute part of a rank's times (comm not yet applied): fwd, bwd, offload, head_compute.
  RankTimes compute_times(int rank, int64_t b, int64_t m, bool offload) const;
  // Applies the collectives: block and head as in the formula above.
  static void apply_comm(RankTimes& t, const CommTimes& c);
  double optimizer_time(int rank, double r) const;

  // Memory of rank `rank` taking part with (b, m, offload) and share r.
  MemoryTerms memory_terms(int rank, int64_t b, int64_t m, double r, bool offload) const;
  MemoryTerms memory_terms(int rank, const RankWork& w) const {
    return memory_terms(rank, w.batch, w.micro_batch, w.share, w.offload);
  }
  double capacity(int rank) const { return table(rank).device->memory_bytes; }

  struct Step {
    CommTimes comm;
    bool even = true;
    int participants = 0;
    std::vector<RankTimes> ranks;
    double block = 0, head = 0, optimizer = 0, step = 0;
  };
  Step evaluate(const std::vector<RankWork>& work) const;

  int64_t tokens_per_sample() const { return profile_.seq_len; }
  // Model FLOPs of one sample, forward + backward (3 × forward, no recompute): for MFU.
  double flops_per_sample() const;

 private:
  const Profile& profile_;
  MemoryModel memory_;
  int64_t max_m_;
  std::shared_ptr<const std::vector<DeviceTable>> tables_;  // per device type; shared by with_sharding
  std::vector<int> table_of_rank_;
  std::vector<int> node_of_rank_;
  Sharding sharding_;
  // Unit sizes in bytes: AG (compute dtype), RS (fp32 accumulated gradients).
  double block_ag_bytes_ = 0, block_rs_bytes_ = 0, embed_ag_bytes_ = 0, embed_rs_bytes_ = 0, head_rs_bytes_ = 0,
         head_ag_bytes_ = 0;
  // The collectives over `ranks` holding `shares` (of the unit), in the cheaper form;
  // even_shares as collective_times takes it.
  CommTimes unit_comm(const std::vector<int>& ranks, const std::vector<double>& shares, int even_shares = -1) const;
};

// One collective kind's links as TopologyComm takes them (inter: intra's when unset).
TopologyLinks topology_links(const CollectiveProfile& c);

// True when the participants' shares are equal (to 1e-9 relative).
bool shares_even(const std::vector<RankWork>& work);

}  // namespace gpumix::dist
