#include "dist/engine/outer_step.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace gpumix::dist {

void check_local_sync(const LocalSync& s, const TrainOptions& o, const Work* work, int ranks,
                      const std::vector<int>& node_of_rank) {
  if (!s.local) return;
  check_sync_groups(s, ranks, "this run", "start more ranks (--ranks, mpirun -np)");
  GPUMIX_CHECK_INPUT(std::isfinite(s.outer_lr) && s.outer_lr > 0, "--outer-lr must be positive and finite, got ",
                     s.outer_lr, "; DiLoCo's is 0.7");
  GPUMIX_CHECK_INPUT(std::isfinite(s.outer_momentum) && s.outer_momentum >= 0 && s.outer_momentum < 1,
                     "--outer-momentum must be in [0, 1), got ", s.outer_momentum, "; DiLoCo's is 0.9, 0 for none");
  // Checkpoints are taken right after an outer step, where one master holds every group's
  // weights (outer_step.h).
  GPUMIX_CHECK_INPUT(o.ckpt_interval % s.every == 0, "--ckpt-interval ", o.ckpt_interval, " is not a multiple of H = ",
                     s.every, ": local mode's checkpoints are written right after an outer step, where every group "
                     "holds the same weights; give --ckpt-interval ", s.every * std::max(1, o.ckpt_interval / s.every),
                     " (or 0: at the end only)");
  // Between outer steps the groups hold different weights: validation (split over every
  // rank) runs only where they agree.
  GPUMIX_CHECK_INPUT(o.eval_interval % s.every == 0, "--eval-interval ", o.eval_interval, " is not a multiple of H = ",
                     s.every, ": validation runs right after an outer step, where every group holds the same "
                     "weights; give --eval-interval ", s.every * std::max(1, o.eval_interval / s.every),
                     " (or 0: at the end only)");
  if (!work) return;
  GPUMIX_CHECK_INPUT(!work->sharding.hybrid(), "--sync local:", s.every, " with hybrid sharding (groups of ",
                     work->sharding.group_size, "): local mode's groups shard fully inside; drop the hybrid sharding");
  if (node_of_rank.empty()) return;
  const std::vector<int> group = sync_groups(s, node_of_rank);
  const int groups = *std::max_element(group.begin(), group.end()) + 1;
  std::vector<int64_t> rows(groups, 0);
  std::vector<double> shares(groups, 0);
  for (int r = 0; r < ranks; ++r) {
    rows[group[r]] += work->ranks[r].batch;
    shares[group[r]] += work->ranks[r].share;
  }
  for (int g = 0; g < groups; ++g) {
    std::string members;
    for (int r = 0; r < ranks; ++r)
      if (group[r] == g) members += str(members.empty() ? "" : ", ", r);
    GPUMIX_CHECK_INPUT(rows[g] > 0, "group ", g, " (ranks ", members, ") has no rows of the batch (its ranks' "
                       "batches are all 0): it would have no pseudo-gradient; give its ranks rows (--batches) or "
                       "choose other --groups");
    GPUMIX_CHECK_INPUT(shares[g] > 0, "group ", g, " (ranks ", members, ") holds no state (its ranks' shares are "
                       "all 0): each group keeps the whole model; give its ranks shares (--shares)");
  }
}

OuterStep::OuterStep(const LocalSync& sync, Comm& comm, Comm& group_comm, int group, double weight, int64_t params,
                     Engine& engine, Device host)
    : sync_(sync), group_(group_comm), group_id_(group), weight_(weight), params_(params), host_(host) {
  leaders_ = comm.split(group_comm.rank() == 0 ? 0 : 1);
  groups_ = (int)comm.all_reduce_sum(group_comm.rank() == 0 ? 1.0 : 0.0);
  // Sums of one leader's weight and zeros: exact, the same on every rank.
  for (int g = 0; g < groups_; ++g)
    weights_.push_back(comm.all_reduce_sum(group_comm.rank() == 0 && group == g ? weight : 0.0));
  for (const OwnedSlice& s : engine.slices()) {
    outer_.push_back(s.master.device() == host_ ? s.master.clone() : s.master.to(host_));
    momentum_.push_back(Tensor::zeros(s.master.shape(), DType::f32, host_));
  }
}

void OuterStep::step(Engine& engine) {
  std::vector<OwnedSlice> slices = engine.slices();
  // 1. This group's weighted pseudo-gradient, whole, on every rank of the group.
  Tensor full = Tensor::zeros({params_}, DType::f32, host_);
  float* f = full.data<float>();
  std::vector<Tensor> masters;  // on host_: the slices themselves, or host copies of them
  for (size_t i = 0; i < slices.size(); ++i) {
    masters.push_back(slices[i].master.device() == host_ ? slices[i].master : slices[i].master.to(host_));
    const float* m = masters[i].data<float>();
    const float* o = outer_[i].data<float>();
    float* d = f + slices[i].flat_offset;
    for (int64_t j = 0; j < masters[i].numel(); ++j) d[j] = (float)(weight_ * (double)(o[j] - m[j]));
  }
  group_.all_reduce_sum(full);
  // 2. Across groups in bf16, summed in fp32 in group order.
  if (group_.rank() == 0) {
    Tensor mine = full.to(DType::bf16);
    Tensor all = Tensor::empty({params_ * groups_}, DType::bf16, host_);
    leaders_->all_gather_v(mine, all, std::vector<int64_t>(groups_, params_));
    cross_bytes_ += params_ * 2 * (groups_ - 1);  // all-gather: this leader's vector to each other leader
    const Tensor wide = all.to(DType::f32);
    const float* w = wide.data<float>();
    for (int64_t j = 0; j < params_; ++j) {
      float sum = 0;
      for (int g = 0; g < groups_; ++g) sum += w[g * params_ + j];
      f[j] = sum;
    }
  }
  // 3. The average to the group; the outer optimizer on this rank's slices.
  group_.broadcast(full, 0);
  const float lr = sync_.outer_lr, mu = sync_.outer_momentum;
  for (size_t i = 0; i < slices.size(); ++i) {
    float* o = outer_[i].data<float>();
    float* v = momentum_[i].data<float>();
    float* m = masters[i].data<float>();
    const float* d = f + slices[i].flat_offset;
    for (int64_t j = 0; j < masters[i].numel(); ++j) {
      v[j] = mu * v[j] + d[j];
      o[j] -= lr * (sync_.nesterov ? d[j] + mu * v[j] : v[j]);
      m[j] = o[j];
    }
    if (!(slices[i].master.device() == host_)) slices[i].master.copy_from(masters[i]);
  }
  engine.sync_compute_params();
  ++steps_;
}

void OuterStep::restart(Engine& engine, int steps) {
  const std::vector<OwnedSlice> slices = engine.slices();
  GPUMIX_CHECK(slices.size() == outer_.size(), "outer step: the engine has ", slices.size(), " slices, the outer "
               "state ", outer_.size(), " (resharded in between?)");
  for (size_t i = 0; i < slices.size(); ++i) outer_[i].copy_from(slices[i].master);
  steps_ = steps;
}

}  // namespace gpumix::dist
