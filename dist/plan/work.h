// What each rank does in a training step, and how the training state is sharded over the
// ranks: the decision a plan makes (dist/plan/plan.h adds its predictions to it) and the
// engine executes (dist/engine/trainer.h). One type from the planner's search through the
// cost model, plan files, the step loop, re-planning and checkpoints (docs/method.md §4, §5).
//
// The group size of hybrid sharding is the plan's, not a rank's: the groups are formed once
// for all the ranks (ShardedEngine splits the communicator by it), so every rank must hold
// the same number, and a copy per rank could only disagree with the others. It lives once,
// in Work::sharding, beside the ranks' work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpumix::dist {

// One rank's part of a step: b rows of the global batch as micro-batches of m rows (the
// last one may be smaller), and share r of the training state.
struct RankWork {
  int64_t batch = 0;        // b_i
  int64_t micro_batch = 0;  // m_i; a plan's is 0 when b_i = 0 (the engine ignores it then)
  double share = 0;         // r_i; under hybrid sharding, of its group's state
  // Keep the saved block inputs in host memory between a block's forward and its backward
  // (GPUs; dist/engine/offload.h).
  bool offload = false;

  // A rank with neither rows nor state is left out of a plan.
  bool takes_part() const { return batch > 0 || share > 0; }
  // ceil(b / m); 0 when b = 0. Needs m >= 1 where b > 0 (validate_work).
  int64_t num_micro_batches() const { return batch > 0 ? (batch + micro_batch - 1) / micro_batch : 0; }
};

// How the training state is sharded (docs/method.md §5; FSDP2's HSDP, ZeRO++'s hpZ).
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

// Every rank's work in rank order, and the sharding of the state over them. A plan's is
// Plan::work() (dist/plan/plan.h).
struct Work {
  std::vector<RankWork> ranks;
  Sharding sharding;
};

// Checks work for a run of `ranks` ranks (one entry per rank, b >= 0, m >= 1 where b > 0,
// r in [0, 1], Σ b = global batch, Σ r = 1 (per group when hybrid)); throws InputError
// naming the numbers and the fix.
void validate_work(const Work& work, int64_t global_batch, int ranks);

// Even batches (ranks' batches differ by at most one row, the extra rows on the lowest
// ranks), each run as one micro-batch, and even shares; full sharding.
Work even_work(int64_t global_batch, int ranks);

}  // namespace gpumix::dist
