// The gpumix planner's hybrid sharding (dist/plan/work.h's Sharding): which group sizes
// tile the nodes, the positions' shares, and the batch split by bisection on the block time.
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <string>
#include <tuple>

#include "dist/plan/planner_shared.h"

namespace gpumix::dist {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<int> hybrid_group_sizes(const Profile& profile) {
  // On one node every ring runs on the same link: the replicas' all-reduce then moves each
  // group's whole gradient through it on top of the group's own collectives, so hybrid
  // sharding is for clusters, to keep the big rings off the slow link between nodes.
  if (profile.num_nodes() < 2) return {};
  const int N = profile.num_ranks();
  std::map<int, int> ranks_on_node;
  for (const RankInfo& r : profile.ranks) ranks_on_node[r.node]++;
  std::vector<int> sizes;
  for (int g = 1; g < N; g++) {
    if (N % g != 0) continue;
    bool aligned = true;
    for (int first = 0; first < N && aligned; first += g) {
      std::map<int, int> in_group;
      for (int i = first; i < first + g; i++) in_group[profile.ranks[i].node]++;
      if (in_group.size() == 1) continue;  // inside one node
      for (const auto& [node, n] : in_group) aligned = aligned && n == ranks_on_node[node];
    }
    if (aligned) sizes.push_back(g);
  }
  return sizes;
}

Plan plan_hybrid_on(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid) {
  const int N = cost.profile().num_ranks(), g = cost.sharding().group_size;
  const std::string where = "hybrid sharding in groups of " + std::to_string(g);
  // Position shares: even where every position's ranks can hold 1/g of the state next to
  // one sample; otherwise in proportion to the positions' free memory.
  std::vector<double> cap(g, kInf);
  for (int i = 0; i < N; i++) {
    const double base = cost.memory_terms(i, 1, 1, 0, false).total();
    const double per_share = cost.memory_terms(i, 1, 1, 1, false).total() - base;
    cap[i % g] = std::min(cap[i % g], std::max(0.0, cost.capacity(i) - base) / per_share);
  }
  std::vector<double> share(g, 1.0 / g);
  if (*std::min_element(cap.begin(), cap.end()) < 1.0 / g) {
    const double total = std::accumulate(cap.begin(), cap.end(), 0.0);
    if (total < 1)
      throw InfeasiblePlan(where + ": a group's memory holds " + std::to_string(total) +
                               " of the training state next to one sample per rank, not all of it",
                           (1 - total) * cost.memory().state_bytes_total());
    for (int k = 0; k < g; k++) share[k] = cap[k] / total;
  }
  std::vector<RankWork> c(N);
  for (int i = 0; i < N; i++) c[i].share = share[i % g];
  const CommTimes comm = cost.comm_for(c);

  // Ranks of one device type and one share behave alike: one class each.
  std::map<std::pair<int, double>, int> class_of;
  std::vector<int> cls(N), rep;  // rank -> class, class -> a rank of it
  for (int i = 0; i < N; i++) {
    const auto key = std::make_pair(cost.device_index(i), c[i].share);
    auto it = class_of.find(key);
    if (it == class_of.end()) {
      it = class_of.emplace(key, (int)rep.size()).first;
      rep.push_back(i);
    }
    cls[i] = it->second;
  }
  // The fastest fitting micro-batch for b rows on rank i: (block time, m); infinite if none fits.
  auto best = [&](int i, int64_t b) -> std::pair<double, int64_t> {
    if (b == 0) return {0.0, 0};
    std::pair<double, int64_t> out{kInf, 0};
    for (int64_t m : grid) {
      const int64_t mb = std::min(m, b);
      if (cost.memory_terms(i, b, mb, c[i].share, false).total() > cost.capacity(i)) continue;
      RankTimes t = cost.compute_times(i, b, mb, false);
      CostModel::apply_comm(t, comm);
      if (t.block < out.first) out = {t.block, mb};
      if (m >= b) break;
    }
    return out;
  };
  // Rows a class takes within block time tau (the time is monotone in b).
  auto bmax = [&](int k, double tau) {
    int64_t lo = 0, hi = B;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (best(rep[k], mid).first <= tau) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  std::vector<int64_t> members(rep.size(), 0);
  for (int i = 0; i < N; i++) members[cls[i]]++;
  auto room = [&](double tau) {
    int64_t total = 0;
    for (size_t k = 0; k < rep.size(); k++) total += members[k] * bmax((int)k, tau);
    return total;
  };
  double hi = std::max(1e-6, 2 * comm.ag + comm.rs + comm.ar);
  for (int it = 0; it < 80 && room(hi) < B; it++) hi *= 2;
  if (room(hi) < B)
    throw InfeasiblePlan(where + ": the ranks' memory holds fewer than the " + std::to_string(B) +
                             " sequences of a step next to the state",
                         0);
  double lo = 0;
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
    const double mid = 0.5 * (lo + hi);
    if (room(mid) >= B) hi = mid;
    else lo = mid;
  }
  std::vector<int64_t> kb(rep.size());
  int64_t total = 0;
  for (size_t k = 0; k < rep.size(); k++) total += members[k] * (kb[k] = bmax((int)k, hi));
  std::vector<int64_t> b(N);
  for (int i = 0; i < N; i++) b[i] = kb[cls[i]];
  // Trim the excess from the slowest ranks first (the highest rank on a tie).
  std::priority_queue<std::tuple<double, int>> slowest;
  for (int i = 0; i < N; i++)
    if (b[i] > 0) slowest.push({best(i, b[i]).first, i});
  while (total > B) {
    const int i = std::get<1>(slowest.top());
    slowest.pop();
    b[i]--;
    total--;
    if (b[i] > 0) slowest.push({best(i, b[i]).first, i});
  }
  for (int i = 0; i < N; i++) {
    c[i].batch = b[i];
    c[i].micro_batch = best(i, b[i]).second;
  }
  return make_plan(cost, "gpumix", B, c);
}

Plan plan_hybrid(const Profile& profile, int64_t B, int g, const PlannerOptions& opts) {
  const CostModel cost = planner_cost_model(profile, B, opts);
  return plan_hybrid_on(cost.with_sharding(Sharding{g}), B, micro_batch_grid(cost, B));
}

}  // namespace gpumix::dist
