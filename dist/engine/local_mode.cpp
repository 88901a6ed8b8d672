#include "dist/engine/local_mode.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace gpumix::dist {

void LocalMode::form_groups(const TrainOptions& o, const Work& work, Comm& comm, Comm* device_comm) {
  const int ranks = comm.size(), rank = comm.rank();
  check_local_sync(sync_, o, &work, ranks, comm.node_of_rank());
  group_of_rank_ = sync_groups(sync_, comm.node_of_rank());
  group_ = group_of_rank_[rank];
  groups_ = *std::max_element(group_of_rank_.begin(), group_of_rank_.end()) + 1;
  group_comm_ = comm.split(group_);
  if (device_comm) engine_group_ = device_comm->split(group_);
  for (int r = 0; r < ranks; ++r)
    if (group_of_rank_[r] == group_) {
      members_.push_back(r);
      rows_ += work.ranks[r].batch;
    }
  weight_ = (double)rows_ / (double)o.batch;
  if (rank != 0) return;
  if (groups_ == 1)
    log_info("--sync local:", sync_.every, ": one group of every rank, nothing to synchronise with: every-step "
             "training (no outer step: --outer-lr and --outer-momentum do nothing)");
  else
    log_info("--sync local:", sync_.every, ": ", groups_, " groups, an outer step every ", sync_.every,
             " steps (outer lr ", sync_.outer_lr, ", momentum ", sync_.outer_momentum,
             sync_.nesterov ? ", Nesterov" : "", "); between outer steps no collective crosses a group");
}

void LocalMode::make_outer(Comm& comm, int64_t params, Engine& engine, Device host) {
  if (groups_ > 1) outer_ = std::make_unique<OuterStep>(sync_, comm, *group_comm_, group_, weight_, params, engine, host);
}

void LocalMode::masters_set(Engine& engine) {
  if (outer_) outer_->restart(engine, outer_->steps());
}

double LocalMode::outer_step(int step, Engine& engine) {
  const double t0 = detail::now_seconds();
  outer_->step(engine);
  outer_history_s_.push_back(detail::seconds_since(t0));
  outer_->set_period_start(step);
  return outer_history_s_.back();
}

LocalMode::Period LocalMode::gather_period(Comm& comm, Device host) {
  const int ranks = comm.size();
  const int64_t n = (int64_t)period_.size();  // the same on every rank: the steps since the last meeting
  const bool leader = group_comm_->rank() == 0;  // one loss term per group
  std::vector<double> mine;
  for (const auto& [busy, loss] : period_) {
    mine.push_back(busy);
    mine.push_back(leader ? loss * weight_ : 0.0);
  }
  const int64_t words = 2 * n * (int64_t)(sizeof(double) / sizeof(int32_t));
  Tensor sent = Tensor::empty({words}, DType::i32, host);
  std::memcpy(sent.data<int32_t>(), mine.data(), mine.size() * sizeof(double));
  Tensor all = Tensor::empty({words * ranks}, DType::i32, host);
  comm.all_gather_v(sent, all, std::vector<int64_t>(ranks, words));
  const double* a = reinterpret_cast<const double*>(all.data<int32_t>());
  Period p;
  p.busy_s.assign(n, std::vector<double>(ranks));
  p.loss.assign(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int r = 0; r < ranks; ++r) {  // ranks in order: the groups' leaders in group order
      p.busy_s[i][r] = a[(r * n + i) * 2];
      p.loss[i] += a[(r * n + i) * 2 + 1];
    }
  period_.clear();
  return p;
}

int64_t LocalMode::cross_group_calls(const Comm& comm) const {
  return comm.stats().calls() + (outer_ ? outer_->cross_group_calls() : 0);
}

LocalRunSummary LocalMode::summary(const Work& work) const {
  std::vector<int64_t> rows;
  for (const RankWork& w : work.ranks) rows.push_back(w.batch);
  return LocalRunSummary{sync_.every, group_of_rank_, rows, outer_history_s_, plan_.get()};
}

}  // namespace gpumix::dist
