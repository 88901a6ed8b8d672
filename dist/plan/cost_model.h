// The step-time model of METHOD.md §2, in one place: the planner optimises it, the
// baselines and the simulator report it.
//
// Per block, rank i (batch b in n = ceil(b/m) micro-batches, the last one smaller):
//   F_i = Σ_k fwd(m_k)                          forward of all micro-batches
//   G_i = Σ_k bwd(m_k) + (n − 1) · o_i          recompute + backward (+ per-micro-batch overhead)
//   X_i = b · T · C · dtype / host_bandwidth    offload copy of the block inputs (0 if not)
//   t_i = max(AG, F_i, X_i) + max(AG + RS, G_i, X_i)
// (bwd is measured with the recompute, so G_i is §2's n·(f + g)). Ranks synchronise at
// every block's collectives, and at the embedding / head and the optimizer, so
//   T_step = L · max_i t_i + max_i max(AG_e + RS_e, H_i) + max_i r_i · P · opt_i
// with H_i the embedding + head + loss time of the rank's micro-batches and AG_e / RS_e the
// collectives of the embedding unit. AG moves a block's parameters in the compute dtype,
// RS its fp32 gradients, over the ranks that take part (b > 0 or r > 0), priced by the
// profile's ring model, with the uneven factor unless all their shares are equal.
//
// Hybrid sharding (Sharding below): AG and RS run within a group (its ranks that take part,
// on the nodes the group spans), and the gradient slices are then all-reduced across the
// groups, AR, in the backward term: max(AG + RS + AR, G_i). AR is a ring all-reduce (a
// reduce-scatter and an all-gather) over the G groups: 2(G−1) latencies, and through each
// node's link 2(G−1)/G × (the sum of the shares of that node's ranks) × the fp32 gradient,
// since the rings of all positions on a node share its link (a node-wide NIC, as the
// emulated nodes and most clusters' inter-node fabric per node are modelled here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/plan/memory_model.h"
#include "dist/plan/profile.h"

namespace gpumix::dist {

struct RankChoice {
  int64_t b = 0;       // samples
  int m = 0;           // micro-batch size (0 when b = 0)
  double r = 0;        // state share
  bool offload = false;
  bool takes_part() const { return b > 0 || r > 0; }
};

// How the training state is sharded (METHOD.md §5; FSDP2's HSDP, ZeRO++'s hpZ).
//   full    group_size 0: every unit is sharded over all the ranks that take part.
//   hybrid  group_size g (1 <= g < N, g divides N): ranks in rank order form N/g groups of
//           g; each group holds the whole state, sharded within the group by position
//           shares that are the same in every group (rank i's share r_i is position
//           i mod g's, and the shares of a group sum to 1), the groups are replicas:
//           gradients are reduce-scattered within the group, then all-reduced across the
//           groups among the ranks of one position.
struct Sharding {
  int group_size = 0;
  bool hybrid() const { return group_size > 0; }
  std::string describe() const;  // "full" or "hybrid, groups of 8"
};
// "" when `s` can shard `ranks` ranks with these shares (per rank, in rank order; empty:
// not checked), else what is wrong, with the numbers. Groups need not align with nodes.
std::string check_sharding(const Sharding& s, int ranks, const std::vector<double>& shares = {});

struct CommTimes {
  double ag = 0, rs = 0;              // one block
  double embed_ag = 0, embed_rs = 0;  // the embedding (+ head) unit
  double ar = 0, embed_ar = 0;        // hybrid: the all-reduce across groups (0 when full)
};

struct RankTimes {
  double fwd = 0, bwd = 0, offload = 0;  // per block: F_i, G_i, X_i
  double block = 0;                      // t_i
  double head_compute = 0;               // H_i
  double head = 0;                       // max(AG_e + RS_e, H_i)
  double optimizer = 0;                  // r · P · opt
};

// Values of one device type at micro-batch sizes 1..max_m, interpolated once.
struct DeviceTable {
  const DeviceProfile* device = nullptr;
  std::vector<MicroBatchSample> at;  // at[m], m = 1..max_m
  const MicroBatchSample& get(int m) const { return at[m]; }
};

class CostModel {
 public:
  CostModel(const Profile& profile, MemoryParams memory = {}, int max_m = 0, Sharding sharding = {});

  const Profile& profile() const { return profile_; }
  const MemoryModel& memory() const { return memory_; }
  const DeviceTable& table(int rank) const { return tables_[table_of_rank_[rank]]; }
  int device_index(int rank) const { return table_of_rank_[rank]; }
  int num_device_types() const { return (int)tables_.size(); }
  int max_m() const { return max_m_; }
  const Sharding& sharding() const { return sharding_; }

  // Full sharding over `participants` ranks on `nodes` nodes.
  CommTimes comm(int participants, int nodes, bool even) const;
  // The collectives of these choices under this model's sharding.
  CommTimes comm_for(const std::vector<RankChoice>& choices) const;

  // Compute part of a rank's times (comm not yet applied): fwd, bwd, offload, head_compute.
  RankTimes compute_times(int rank, int64_t b, int m, bool offload) const;
  // Applies the collectives: block and head as in the formula above.
  static void apply_comm(RankTimes& t, const CommTimes& c);
  double optimizer_time(int rank, double r) const;

  // Memory of rank `rank` taking part with (b, m, offload) and share r.
  MemoryTerms memory_terms(int rank, int64_t b, int m, double r, bool offload) const;
  double capacity(int rank) const { return table(rank).device->memory_bytes; }

  struct Step {
    CommTimes comm;
    bool even = true;
    int participants = 0;
    std::vector<RankTimes> ranks;
    double block = 0, head = 0, optimizer = 0, step = 0;
  };
  Step evaluate(const std::vector<RankChoice>& choices) const;

  int64_t tokens_per_sample() const { return profile_.seq_len; }
  // Model FLOPs of one sample, forward + backward (3 × forward, no recompute): for MFU.
  double flops_per_sample() const;

 private:
  const Profile& profile_;
  MemoryModel memory_;
  int max_m_;
  std::vector<DeviceTable> tables_;
  std::vector<int> table_of_rank_;
  std::vector<int> node_of_rank_;
  Sharding sharding_;
};

// True when the participants' shares are equal (to 1e-9 relative).
bool shares_even(const std::vector<RankChoice>& choices);

}  // namespace gpumix::dist
