#include "dist/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"

namespace gpumix::dist {

CostModel::CostModel(const Profile& profile, MemoryParams memory, int64_t max_m, Sharding sharding)
    : profile_(profile), memory_(profile.model, profile.seq_len, profile.dtype, memory), sharding_(sharding) {
  const std::string bad = check_sharding(sharding_, profile.num_ranks());
  if (!bad.empty()) throw InputError(bad);
  max_m_ = std::max<int64_t>(max_m, 1);
  std::vector<DeviceTable> tables;
  for (const DeviceProfile& d : profile.devices) {
    DeviceTable t;
    t.device = &d;
    t.at = d.table(max_m_);
    tables.push_back(std::move(t));
  }
  tables_ = std::make_shared<const std::vector<DeviceTable>>(std::move(tables));
  for (const RankInfo& r : profile.ranks) {
    int idx = 0;
    while (profile.devices[idx].name != r.device) idx++;
    table_of_rank_.push_back(idx);
    node_of_rank_.push_back(r.node);
  }
  const double dtype = (double)dtype_size(profile.dtype), grad = memory_.params().grad_accum_bytes;
  const GPTConfig& g = profile.model;
  block_ag_bytes_ = (double)g.block_params() * dtype;
  block_rs_bytes_ = (double)g.block_params() * grad;
  embed_ag_bytes_ = (double)g.embed_params() * dtype;
  embed_rs_bytes_ = (double)g.embed_params() * grad;
  head_rs_bytes_ = (double)g.head_params() * grad;
  head_ag_bytes_ = (double)g.head_params() * dtype;
}

CostModel CostModel::with_sharding(Sharding sharding) const {
  const std::string bad = check_sharding(sharding, profile_.num_ranks());
  if (!bad.empty()) throw InputError(bad);
  CostModel c = *this;
  c.sharding_ = sharding;
  return c;
}

TopologyLinks topology_links(const CollectiveProfile& c) {
  TopologyLinks l;
  l.intra = {c.intra_node.latency_s, c.intra_node.bandwidth_Bps};
  l.inter = c.inter_node.bandwidth_Bps > 0 ? TopologyLink{c.inter_node.latency_s, c.inter_node.bandwidth_Bps} : l.intra;
  l.leaders = {c.leaders.latency_s, c.leaders.bandwidth_Bps};
  l.uneven_factor = c.uneven_factor;
  return l;
}

TopologyLinks CostModel::links(bool gather) const {
  return topology_links(gather ? profile_.comm.all_gather : profile_.comm.reduce_scatter);
}

CommTimes CostModel::unit_comm(const std::vector<int>& ranks, const std::vector<double>& shares,
                               int even_shares) const {
  CommTimes c;
  c.overlap = profile_.comm.overlap;
  if (ranks.size() <= 1) return c;
  std::vector<int> nodes;
  for (int r : ranks) nodes.push_back(node_of_rank_[r]);
  // The stages need each node's ranks consecutive (TopologyComm's condition).
  bool contiguous = true;
  std::vector<char> done(profile_.ranks.size() + 1, 0);
  for (size_t i = 0; i < nodes.size() && contiguous; i++)
    if (i == 0 || nodes[i] != nodes[i - 1]) {
      if (nodes[i] >= (int)done.size()) done.resize((size_t)nodes[i] + 1, 0);
      contiguous = !done[(size_t)nodes[i]];
      done[(size_t)nodes[i]] = 1;
    }
  const Spread spread = spread_of(shares, nodes);
  const TopologyLinks ag = links(true), rs = links(false);
  auto times = [&](CollectiveKind kind, const TopologyLinks& l, double unit_bytes, bool* staged) {
    const CollectiveTimes t = collective_times(kind, spread, unit_bytes, l, contiguous, even_shares);
    if (staged) *staged = t.staged();
    return t.best();
  };
  c.ag = times(CollectiveKind::all_gather, ag, block_ag_bytes_, &c.ag_staged);
  c.rs = times(CollectiveKind::reduce_scatter, rs, block_rs_bytes_, &c.rs_staged);
  c.embed_ag = times(CollectiveKind::all_gather, ag, embed_ag_bytes_, nullptr);
  c.embed_rs = times(CollectiveKind::reduce_scatter, rs, embed_rs_bytes_, nullptr);
  c.head_rs = times(CollectiveKind::reduce_scatter, rs, head_rs_bytes_, nullptr);
  if (head_ag_bytes_ > block_ag_bytes_)  // an untied head: a gather larger than a block's
    c.head_ag_excess = std::max(0.0, times(CollectiveKind::all_gather, ag, head_ag_bytes_, nullptr) - c.ag);
  return c;
}

CommTimes CostModel::comm_members(const std::vector<int>& members, bool even) const {
  std::map<int, int> on_node;
  for (int r : members) on_node[node_of_rank_[r]]++;
  std::vector<double> r;
  for (int m : members)
    r.push_back(even ? 1.0 / members.size() : 1.0 / on_node.size() / on_node[node_of_rank_[m]]);
  return unit_comm(members, r, even ? 1 : 0);
}

bool shares_even(const std::vector<RankWork>& work) {
  double lo = 2, hi = -1;
  for (const RankWork& w : work) {
    if (!w.takes_part()) continue;
    lo = std::min(lo, w.share);
    hi = std::max(hi, w.share);
  }
  return hi < 0 || hi - lo <= 1e-9 * hi;
}

CommTimes CostModel::comm_for(const std::vector<RankWork>& work) const {
  if (!sharding_.hybrid()) {
    std::vector<int> members;
    std::vector<double> shares;
    for (size_t i = 0; i < work.size(); i++)
      if (work[i].takes_part()) {
        members.push_back((int)i);
        shares.push_back(work[i].share);
      }
    return unit_comm(members, shares);
  }
  // Within a group: the slowest group's collectives (every group runs its own at once).
  const int g = sharding_.group_size, N = (int)work.size(), G = N / g;
  CommTimes c;
  c.overlap = profile_.comm.overlap;
  for (int first = 0; first < N; first += g) {
    std::vector<int> members;
    std::vector<double> shares;
    for (int i = first; i < first + g; i++)
      if (work[i].takes_part()) {
        members.push_back(i);
        shares.push_back(work[i].share);
      }
    const CommTimes t = unit_comm(members, shares);
    for (auto [x, y] : {std::pair{&c.ag, t.ag}, {&c.rs, t.rs}, {&c.embed_ag, t.embed_ag}, {&c.embed_rs, t.embed_rs},
                        {&c.head_rs, t.head_rs}, {&c.head_ag_excess, t.head_ag_excess}})
      *x = std::max(*x, y);
    c.ag_staged = c.ag_staged || t.ag_staged;
    c.rs_staged = c.rs_staged || t.rs_staged;
  }
  // Across groups: the rings of one position each; the busiest node's link carries the sum
  // of its ranks' shares, on the link between nodes when a ring leaves the node.
  std::map<int, double> node_share;
  int ring_nodes = 1;
  for (int k = 0; k < g; k++) {
    std::set<int> nodes;
    for (int i = k; i < N; i += g) nodes.insert(node_of_rank_[i]);
    ring_nodes = std::max(ring_nodes, (int)nodes.size());
  }
  double load = 0;
  for (int i = 0; i < N; i++) load = std::max(load, node_share[node_of_rank_[i]] += work[i].share);
  const TopologyLinks l = links(false);
  const TopologyLink& link = ring_nodes > 1 ? l.leader_link() : l.intra;
  // ψ: the all-reduce in flight behind the next unit's backward moves on a GPU's comm stream.
  bool gpus = true;
  for (int i = 0; i < N; i++) gpus = gpus && (!work[i].takes_part() || table(i).device->kind == "gpu");
  c.ar_overlap = gpus ? 1 : 0;
  c.ar = all_reduce_time(link, G, block_rs_bytes_ * load);
  c.embed_ar = all_reduce_time(link, G, embed_rs_bytes_ * load);
  c.head_ar = all_reduce_time(link, G, head_rs_bytes_ * load);
  return c;
}

RankTimes CostModel::compute_times(int rank, int64_t b, int64_t m, bool offload) const {
  RankTimes t;
  if (b <= 0) return t;
  const DeviceTable& tab = table(rank);
  const DeviceProfile& d = *tab.device;
  m = std::min(m, b);
  const int64_t n = (b + m - 1) / m;
  const int64_t last = b - (n - 1) * m;
  auto get = [&](int64_t k) { return k <= max_m_ ? tab.get(k) : d.at(k); };
  const MicroBatchSample full = get(m), tail = get(last);
  t.fwd = (n - 1) * full.block_fwd_s + tail.block_fwd_s;
  t.bwd = (n - 1) * (full.block_bwd_s + d.microbatch_overhead_s) + tail.block_bwd_s;
  t.head_compute = (n - 1) * full.head_s + tail.head_s;
  if (offload && d.host_bandwidth_Bps > 0)
    t.offload = (double)b * profile_.seq_len * profile_.model.C * dtype_size(profile_.dtype) / d.host_bandwidth_Bps;
  return t;
}

void CostModel::apply_comm(RankTimes& t, const CommTimes& c) {
  const double f = std::max(t.fwd, t.offload), g = std::max(t.bwd, t.offload);
  t.block_fwd = f + c.exposed(f);
  t.block_bwd = g + c.exposed(g) + c.rs + c.exposed_ar(g);
  t.block = t.block_fwd + t.block_bwd;
  t.head = t.head_compute + c.head();
}

double CostModel::optimizer_time(int rank, double r) const {
  return r * memory_.total_params() * table(rank).device->optimizer_s_per_param;
}

MemoryTerms CostModel::memory_terms(int rank, int64_t b, int64_t m, double r, bool offload) const {
  const DeviceTable& tab = table(rank);
  const DeviceProfile& d = *tab.device;
  double act = 0, head = 0;
  if (b > 0) {
    const int64_t mb = std::min(m, b);
    const MicroBatchSample s = mb <= max_m_ ? tab.get(mb) : d.at(mb);
    act = s.block_act_bytes;
    head = s.head_bytes;
  }
  return memory_.terms_from(act, head, d.work_bytes, b, m, r, offload);
}

CostModel::Step CostModel::evaluate(const std::vector<RankWork>& work) const {
  Step s;
  s.comm = comm_for(work);
  s.even = shares_even(work);
  s.ranks.reserve(work.size());
  // Ranks of one device type with the same (b, m, offload) take the same times: computed
  // once per run of such ranks (a planner gives a device type's ranks few distinct works).
  struct Last {
    int64_t batch = -1, micro_batch = -1;
    bool offload = false;
    RankTimes t;
  };
  std::vector<Last> last(tables_->size());
  for (size_t i = 0; i < work.size(); i++) {
    const RankWork& w = work[i];
    RankTimes t;
    if (w.takes_part()) {
      s.participants++;
      Last& l = last[table_of_rank_[i]];
      if (l.batch != w.batch || l.micro_batch != w.micro_batch || l.offload != w.offload) {
        l = {w.batch, w.micro_batch, w.offload, compute_times((int)i, w.batch, w.micro_batch, w.offload)};
        apply_comm(l.t, s.comm);
      }
      t = l.t;
      t.optimizer = optimizer_time((int)i, w.share);
      s.block = std::max(s.block, t.block);
      s.head = std::max(s.head, t.head);
      s.optimizer = std::max(s.optimizer, t.optimizer);
    }
    s.ranks.push_back(t);
  }
  s.step = profile_.model.L * s.block + s.head + s.optimizer;
  return s;
}

double CostModel::flops_per_sample() const {
  return 3.0 * profile_.model.forward_flops_per_token(profile_.seq_len) * profile_.seq_len;
}

}  // namespace gpumix::dist
