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

struct CommTimes {
  double ag = 0, rs = 0;              // one block
  double embed_ag = 0, embed_rs = 0;  // the embedding (+ head) unit
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
  CostModel(const Profile& profile, MemoryParams memory = {}, int max_m = 0);

  const Profile& profile() const { return profile_; }
  const MemoryModel& memory() const { return memory_; }
  const DeviceTable& table(int rank) const { return tables_[table_of_rank_[rank]]; }
  int device_index(int rank) const { return table_of_rank_[rank]; }
  int num_device_types() const { return (int)tables_.size(); }
  int max_m() const { return max_m_; }

  CommTimes comm(int participants, int nodes, bool even) const;
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
};

// True when the participants' shares are equal (to 1e-9 relative).
bool shares_even(const std::vector<RankChoice>& choices);

}  // namespace gpumix::dist
