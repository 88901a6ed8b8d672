// Local-update training (`gpumix train --sync local:H`, DiLoCo-style): the ranks form groups
// (one per node by default, or --groups N of consecutive ranks); each group trains as an
// every-step run of its own (its own communicator, its ranks' uneven batches and state
// shares, sharded AdamW) on its rows of every global batch, and every H inner steps the
// outer step brings the groups together:
//
//   delta_g  = outer - master_g            (group g's pseudo-gradient since the last outer step)
//   delta    = sum_g w_g delta_g           (w_g: group g's share of the global batch's tokens)
//   m        = mu m + delta                (outer momentum)
//   outer   -= lr (delta + mu m)           (Nesterov; lr (m) without --outer-nesterov off)
//   master_g = outer                       (every group continues from the same weights)
//
// The outer copy and the momentum are fp32 and sharded exactly like the master weights
// inside each group (one tensor per owned slice of the engine). Every element's sum is the
// same arithmetic whatever the layouts: d = bf16(sum over g in group order, in fp32, of
// bf16(w_g delta_g)), bf16 rounded to nearest even; so the result is bitwise the same
// through either exchange:
//
// - sliced (every group has the same layout: as many ranks, each position the same slices;
//   hybrid sharding's pattern). Each rank exchanges only its own slices with its peers (the
//   ranks at its position in the other groups), nothing inside its group: its m = P / n
//   elements (n ranks per group) cut in G chunks, a reduce-scatter (G - 1 rounds of pairwise
//   exchange, bf16 on the wire: each peer sums one chunk in fp32 in group order) and an
//   all-gather of the bf16 sums. Across groups per rank: 2 x 2 m (G - 1) / G bytes; memory
//   O(m).
// - flat (the groups' layouts differ: the flat vector maps them):
//   1. each rank writes w_g delta of its slices into a zeroed full-length fp32 vector and the
//      group all-reduces it (disjoint pieces plus zeros: exact): 4P bytes inside the group;
//   2. the group's first rank (its leader) rounds it to bf16 and the leaders all-gather
//      those: each leader sends 2P (G - 1) bytes across groups; each sums the G vectors;
//   3. the leader broadcasts the sums to its group (4P bytes inside it).
//
// Then every rank applies the outer optimizer to its own slices. The host loops are
// OpenMP-threaded.
// P: the model's parameters. One group has nobody to synchronise with: no outer step, and
// the run is every-step training exactly.
//
// Checkpoints (dist/engine/checkpoint.h) are written right after an outer step: at
// --ckpt-interval (a multiple of H), at the last step (--steps, which runs an outer step)
// and on SIGTERM / SIGINT (acted on at the next outer step, dist/engine/local_mode.h). There
// every group's master weights equal the outer copy, so one master.bin holds them all, and
// the state of local mode is what is left: the outer momentum and each group's own AdamW
// moments (the groups' gradients differed since the start). A resume continues exactly:
// the outer copy is the master it reads. A --stop-at between outer steps runs none early:
// its checkpoint holds every group's weights and the outer copy too (mid-period), and the
// resume continues the period bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm/comm.h"
#include "dist/engine/engine.h"
#include "dist/plan/sync.h"  // LocalSync, parse_sync, sync_groups
#include "dist/plan/work.h"
#include "nn/train_options.h"

namespace gpumix::dist {

// Every rule of local mode, before the run folder is touched: H >= 1, more than one rank,
// --groups dividing the ranks, every group with tokens to train on (its ranks' batches in
// `work`; null when a planner makes it, dist/plan/planner_local.h), and what local mode does
// not do (hybrid sharding, checkpoints or validation between outer steps). `node_of_rank`
// empty: the rules that need the groups are left to the call that has them. Throws
// InputError naming the problem, the numbers and the fix. Does nothing when !sync.local.
void check_local_sync(const LocalSync& sync, const TrainOptions& o, const Work* work, int ranks,
                      const std::vector<int>& node_of_rank);

// One rank's part of the outer step. Collective over `comm` (every rank of the run).
class OuterStep {
 public:
  // `group_comm`: this rank's group, number `group` of the run's (0, 1, ...); `weight`: its
  // group's share of the global batch's tokens; `host`: the host memory the exchange goes
  // through. Takes the engine's current master weights as the first outer copy, and every
  // group's weight from its leader.
  // `flat`: the flat exchange even where the sliced one could run (the tests' comparison).
  OuterStep(const LocalSync& sync, Comm& comm, Comm& group_comm, int group, double weight, int64_t params,
            Engine& engine, Device host, bool flat = false);
  // Whether the sliced exchange runs (every group with the same layout).
  bool sliced() const { return peers_ != nullptr; }

  // At every H-th step and the run's last (--steps: not a --stop-at, which saves mid-period).
  bool due(int step, int steps) const { return step % sync_.every == 0 || step == steps; }
  // The exchange and the outer optimizer; the engine's master weights become the new outer copy.
  void step(Engine& engine);
  int steps() const { return steps_; }  // outer steps so far (a resumed run's include the checkpoint's)
  // The step of the last outer step (the run's start, a checkpoint's): where the groups'
  // period began. A checkpoint at another step is a mid-period one.
  int period_start() const { return period_start_; }
  void set_period_start(int step) { period_start_ = step; }
  const LocalSync& sync() const { return sync_; }
  int group() const { return group_id_; }
  int groups() const { return groups_; }
  // Every group's share of the global batch's tokens, by group (they sum to 1).
  const std::vector<double>& weights() const { return weights_; }
  // The outer momentum, per owned slice of the engine (slices()' order), on the host: what
  // a checkpoint writes and a resume reads.
  std::vector<Tensor>& momentum() { return momentum_; }
  const std::vector<Tensor>& momentum() const { return momentum_; }
  // The outer copy, likewise: what a mid-period checkpoint writes (the groups' masters have
  // moved from it) and its resume reads, then resume_mid_period().
  std::vector<Tensor>& outer_copy() { return outer_; }
  const std::vector<Tensor>& outer_copy() const { return outer_; }
  // After a mid-period resume wrote the group's masters, outer_copy() and momentum(): the
  // first outer step measures the change from outer_copy(); `steps` outer steps done.
  void resume_mid_period(Engine& engine, int steps);
  // After the engine's master weights were set from elsewhere (a resume, which also wrote
  // momentum(); --init-from): they are the outer copy (checkpoints are taken right after an
  // outer step), `steps` outer steps done.
  void restart(Engine& engine, int steps);
  // Bytes this rank sent to other groups in outer steps so far (flat: 0 but on a group's
  // leader), and the collectives it ran across groups, as its communicators counted them.
  int64_t cross_group_bytes() const;
  int64_t cross_group_calls() const;

 private:
  void exchange_flat(const std::vector<OwnedSlice>& slices, const std::vector<Tensor>& masters, std::vector<float>& d);
  void exchange_sliced(const std::vector<Tensor>& masters, std::vector<float>& d);
  std::vector<const Comm*> cross_comms() const;

  LocalSync sync_;
  Comm& group_;
  std::unique_ptr<Comm> leaders_;  // flat: the groups' first ranks (on the others: unused)
  // Sliced: this position's ranks in every group, and per round of the pairwise exchange
  // this rank with its partner (partner_ -1: none that round, when G is odd).
  std::unique_ptr<Comm> peers_;
  std::vector<std::unique_ptr<Comm>> rounds_;
  std::vector<int> partner_;
  std::vector<int> peer_of_group_;  // the peers' indices in group order
  std::vector<int64_t> chunk_;      // G + 1 offsets into this rank's elements: peer j sums chunk j
  std::pair<int64_t, int64_t> setup_{0, 0};  // bytes and calls across groups before the first outer step
  int group_id_, groups_;
  double weight_;
  std::vector<double> weights_;
  int64_t params_;
  Device host_;
  std::vector<Tensor> outer_, momentum_;  // per owned slice of the engine, on host_
  int steps_ = 0;
  int period_start_ = 0;
};

}  // namespace gpumix::dist
