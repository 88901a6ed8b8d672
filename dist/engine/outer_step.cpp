#include "dist/engine/outer_step.h"

#include <algorithm>
#include <cmath>
#include <utility>

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

namespace {

// A hash of this rank's slices (offsets and sizes) in 48 bits: a double holds it exactly.
double layout_hash(const std::vector<OwnedSlice>& slices) {
  uint64_t h = 1469598103934665603ull;
  for (const OwnedSlice& s : slices)
    for (uint64_t v : {(uint64_t)s.flat_offset, (uint64_t)s.master.numel()}) {
      h ^= v;
      h *= 1099511628211ull;
    }
  return (double)(h >> 16);
}

// Round r's partner of peer i of n (round-robin pairing: n - 1 rounds, n - 1 partners each;
// n odd plays with a dummy, whose partner sits the round out: -1).
int partner_in_round(int i, int n, int r) {
  const int even = n + n % 2;
  int partner;
  if (i == even - 1) partner = r;
  else if (i == r) partner = even - 1;
  else partner = ((2 * r - i) % (even - 1) + (even - 1)) % (even - 1);
  return partner < n ? partner : -1;
}

float weighted_delta(double weight, float outer, float master) { return (float)(weight * (double)(outer - master)); }

}  // namespace

OuterStep::OuterStep(const LocalSync& sync, Comm& comm, Comm& group_comm, int group, double weight, int64_t params,
                     Engine& engine, Device host, bool flat)
    : sync_(sync), group_(group_comm), group_id_(group), weight_(weight), params_(params), host_(host) {
  groups_ = (int)comm.all_reduce_sum(group_comm.rank() == 0 ? 1.0 : 0.0);
  // Sums of one leader's weight and zeros: exact, the same on every rank.
  for (int g = 0; g < groups_; ++g)
    weights_.push_back(comm.all_reduce_sum(group_comm.rank() == 0 && group == g ? weight : 0.0));
  const std::vector<OwnedSlice> slices = engine.slices();
  for (const OwnedSlice& s : slices) {
    outer_.push_back(s.master.device() == host_ ? s.master.clone() : s.master.to(host_));
    momentum_.push_back(Tensor::zeros(s.master.shape(), DType::f32, host_));
  }
  // The sliced exchange where every group has the same layout (decided alike on every rank).
  const double n = group_comm.size();
  const bool same_sizes = comm.all_reduce_max(n) == -comm.all_reduce_max(-n);
  if (same_sizes && !flat) {
    peers_ = comm.split(group_comm.rank());
    const double h = layout_hash(slices);
    const bool same_here = peers_->all_reduce_max(h) == -peers_->all_reduce_max(-h);
    if (comm.all_reduce_max(same_here ? 0.0 : 1.0) > 0) peers_.reset();
  }
  if (!peers_) {
    leaders_ = comm.split(group_comm.rank() == 0 ? 0 : 1);
    return;
  }
  const int G = peers_->size(), me = peers_->rank();
  Tensor mine = Tensor::full({1}, (float)group, DType::f32, host_), all = Tensor::empty({G}, DType::f32, host_);
  peers_->all_gather_v(mine, all, std::vector<int64_t>(G, 1));
  std::vector<std::pair<int, int>> by_group;
  for (int q = 0; q < G; ++q) by_group.push_back({(int)all.data<float>()[q], q});
  std::sort(by_group.begin(), by_group.end());
  for (const auto& [g, q] : by_group) peer_of_group_.push_back(q);
  for (int r = 0; r + 1 < G + G % 2; ++r) {
    const int q = partner_in_round(me, G, r);
    partner_.push_back(q);
    rounds_.push_back(peers_->split(q < 0 ? me : std::min(me, q)));
  }
  int64_t m = 0;
  for (const OwnedSlice& s : slices) m += s.master.numel();
  for (int j = 0; j <= G; ++j) chunk_.push_back(m * j / G);
  setup_ = {cross_group_bytes(), cross_group_calls()};  // the outer steps' counts start here
}

std::vector<const Comm*> OuterStep::cross_comms() const {
  std::vector<const Comm*> c;
  if (leaders_) c.push_back(leaders_.get());
  if (peers_) c.push_back(peers_.get());
  for (const auto& r : rounds_) c.push_back(r.get());
  return c;
}

int64_t OuterStep::cross_group_bytes() const {
  if (leaders_ && group_.rank() != 0) return 0;  // the others' leaders_ communicator carries nothing across
  int64_t bytes = -setup_.first;
  for (const Comm* c : cross_comms()) bytes += c->stats().bytes_sent();
  return bytes;
}

int64_t OuterStep::cross_group_calls() const {
  if (leaders_ && group_.rank() != 0) return 0;
  int64_t calls = -setup_.second;
  for (const Comm* c : cross_comms()) calls += c->stats().calls();
  return calls;
}

void OuterStep::step(Engine& engine) {
  std::vector<OwnedSlice> slices = engine.slices();
  std::vector<Tensor> masters;  // on host_: the slices themselves, or host copies of them
  for (const OwnedSlice& s : slices) masters.push_back(s.master.device() == host_ ? s.master : s.master.to(host_));
  std::vector<float> d;  // this rank's elements (its slices in order) of the bf16 sum, widened
  if (peers_)
    exchange_sliced(masters, d);
  else
    exchange_flat(slices, masters, d);
  const float lr = sync_.outer_lr, mu = sync_.outer_momentum;
  int64_t at = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    float* o = outer_[i].data<float>();
    float* v = momentum_[i].data<float>();
    float* m = masters[i].data<float>();
    const float* di = d.data() + at;
    const int64_t count = masters[i].numel();
    const bool nesterov = sync_.nesterov;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < count; ++j) {
      v[j] = mu * v[j] + di[j];
      o[j] -= lr * (nesterov ? di[j] + mu * v[j] : v[j]);
      m[j] = o[j];
    }
    at += count;
    if (!(slices[i].master.device() == host_)) slices[i].master.copy_from(masters[i]);
  }
  engine.sync_compute_params();
  ++steps_;
}

void OuterStep::exchange_flat(const std::vector<OwnedSlice>& slices, const std::vector<Tensor>& masters,
                              std::vector<float>& d) {
  // 1. This group's weighted pseudo-gradient, whole, on every rank of the group.
  Tensor full = Tensor::zeros({params_}, DType::f32, host_);
  float* f = full.data<float>();
  for (size_t i = 0; i < slices.size(); ++i) {
    const float* m = masters[i].data<float>();
    const float* o = outer_[i].data<float>();
    float* di = f + slices[i].flat_offset;
    const int64_t count = masters[i].numel();
    const double w = weight_;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < count; ++j) di[j] = weighted_delta(w, o[j], m[j]);
  }
  group_.all_reduce_sum(full);
  // 2. Across groups in bf16, summed in fp32 in group order, the sum rounded to bf16.
  if (group_.rank() == 0) {
    Tensor mine = Tensor::empty({params_}, DType::bf16, host_);
    bf16* b = mine.data<bf16>();
    const int64_t P = params_;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < P; ++j) b[j] = bf16(f[j]);
    Tensor all = Tensor::empty({params_ * groups_}, DType::bf16, host_);
    leaders_->all_gather_v(mine, all, std::vector<int64_t>(groups_, params_));
    const bf16* a = all.data<bf16>();
    const int G = groups_;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < P; ++j) {
      float sum = 0;
      for (int g = 0; g < G; ++g) sum += (float)a[g * P + j];
      f[j] = (float)bf16(sum);
    }
  }
  // 3. The sums to the group; this rank's elements of them.
  group_.broadcast(full, 0);
  for (const OwnedSlice& s : slices) d.insert(d.end(), f + s.flat_offset, f + s.flat_offset + s.master.numel());
}

void OuterStep::exchange_sliced(const std::vector<Tensor>& masters, std::vector<float>& d) {
  const int G = peers_->size(), me = peers_->rank();
  const int64_t m = chunk_.back();
  auto chunk_size = [&](int j) { return chunk_[j + 1] - chunk_[j]; };
  // This rank's weighted pseudo-gradient in bf16, its slices in order.
  Tensor mine = Tensor::empty({std::max<int64_t>(m, 1)}, DType::bf16, host_);
  bf16* b = mine.data<bf16>();
  int64_t at = 0;
  for (size_t i = 0; i < masters.size(); ++i) {
    const float* mm = masters[i].data<float>();
    const float* o = outer_[i].data<float>();
    const int64_t count = masters[i].numel();
    const double w = weight_;
    bf16* bi = b + at;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < count; ++j) bi[j] = bf16(weighted_delta(w, o[j], mm[j]));
    at += count;
  }
  // Reduce-scatter: in each round this rank sends its partner the partner's chunk and gets
  // its own chunk's values from it (pair rank 0 is the lower peer index).
  const int64_t mine_n = chunk_size(me);
  std::vector<Tensor> got(G);  // per peer: its values of this rank's chunk
  got[me] = mine.flat_slice(chunk_[me], mine_n);
  for (size_t r = 0; r < rounds_.size(); ++r) {
    const int q = partner_[r];
    if (q < 0) continue;
    const int lo = std::min(me, q), hi = std::max(me, q);
    const std::vector<int64_t> counts = {chunk_size(hi), chunk_size(lo)};  // lo sends hi's chunk, hi lo's
    Tensor out = Tensor::empty({std::max<int64_t>(counts[0] + counts[1], 1)}, DType::bf16, host_);
    Tensor send = mine.flat_slice(chunk_[q], chunk_size(q));
    rounds_[r]->all_gather_v(send, out, counts);
    got[q] = out.flat_slice(me == lo ? counts[0] : 0, mine_n);
  }
  // This rank's chunk summed in fp32 in group order, rounded to bf16.
  Tensor sums = Tensor::empty({std::max<int64_t>(mine_n, 1)}, DType::bf16, host_);
  bf16* su = sums.data<bf16>();
  std::vector<const bf16*> in;
  for (int q : peer_of_group_) in.push_back(got[q].data<bf16>());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < mine_n; ++k) {
    float sum = 0;
    for (int g = 0; g < G; ++g) sum += (float)in[g][k];
    su[k] = bf16(sum);
  }
  // All-gather: every chunk's sums to every peer.
  Tensor all = Tensor::empty({std::max<int64_t>(m, 1)}, DType::bf16, host_);
  std::vector<int64_t> counts;
  for (int j = 0; j < G; ++j) counts.push_back(chunk_size(j));
  peers_->all_gather_v(sums.flat_slice(0, mine_n), all, counts);
  d.resize(m);
  const bf16* a = all.data<bf16>();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < m; ++k) d[k] = (float)a[k];
}

void OuterStep::resume_mid_period(Engine& engine, int steps) {
  GPUMIX_CHECK(engine.slices().size() == outer_.size(), "outer step: the engine has ", engine.slices().size(),
               " slices, the outer state ", outer_.size());
  steps_ = steps;
}

void OuterStep::restart(Engine& engine, int steps) {
  const std::vector<OwnedSlice> slices = engine.slices();
  GPUMIX_CHECK(slices.size() == outer_.size(), "outer step: the engine has ", slices.size(), " slices, the outer "
               "state ", outer_.size(), " (resharded in between?)");
  for (size_t i = 0; i < slices.size(); ++i) outer_[i].copy_from(slices[i].master);
  steps_ = steps;
}

}  // namespace gpumix::dist
