// The search of the gpumix planner's full sharding (dist/plan/planner.h says how it goes;
// docs/method.md §4 why): per participating set and shares mode, targets for the block
// and head times, an allocation of the batch that meets them with the most free memory,
// the shares by water-filling, every candidate scored with the cost model.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "dist/plan/planner_shared.h"

namespace gpumix::dist {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One way for a rank to run b samples (its work, share not yet set): its block time t,
// head time h, and the largest state share R that still fits next to it.
struct Option {
  double t = 0, h = 0, R = -kInf;
  RankWork work;
  bool ok() const { return R > -kInf; }
};

// Ranks of one device type inside the participating set: interchangeable.
struct Group {
  int device = 0;
  std::vector<int> ranks;
  std::vector<size_t> positions;  // of each rank among the members
};


class Search {
 public:
  Search(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid, const PlannerOptions& opts, bool exact)
      : cost_(cost), B_(B), opts_(opts), exact_(exact), L_(cost.profile().model.L), grid_(grid) {
    const Profile& p = cost.profile();
    for (int i = 0; i < p.num_ranks(); i++) {
      const DeviceProfile& d = p.rank_device(i);
      cap_.push_back(d.memory_bytes * (1 - 1e-12));  // slack against rounding
      can_offload_.push_back(opts.allow_offload && d.kind == "gpu" && d.host_bandwidth_Bps > 0);
      opt_per_share_.push_back(cost.memory().total_params() * d.optimizer_s_per_param);
    }
  }

  void run(const std::vector<std::vector<int>>& sets) {
    for (const std::vector<int>& s : sets) {
      search(s, false);
      search(s, true);
    }
  }

  bool found() const { return best_step_ < kInf; }
  const std::vector<RankWork>& best() const { return best_; }

 private:
  const CostModel& cost_;
  int64_t B_;
  const PlannerOptions& opts_;
  bool exact_;
  int L_;
  std::vector<int64_t> grid_;
  std::vector<double> cap_;
  std::vector<bool> can_offload_;
  std::vector<double> opt_per_share_;

  // The participating set and mode being searched.
  std::vector<int> members_;
  std::vector<Group> groups_;
  bool even_ = false;
  double thr_ = 0;  // smallest R a member must keep: its share when even
  bool node_aware_ = false;          // the placement between nodes matters (see set_members)
  std::vector<int> node_of_member_;  // per member: its node, numbered 0..K-1
  CommTimes comm_;
  double base_t_ = 0, base_h_ = 0;

  double best_step_ = kInf;
  std::vector<RankWork> best_;

  Option eval(int rank, int64_t b, int64_t m, bool off) const {
    RankTimes t = cost_.compute_times(rank, b, m, off);
    CostModel::apply_comm(t, comm_);
    const MemoryTerms w = cost_.memory_terms(rank, b, m, 0, off);
    Option o;
    o.t = t.block;
    o.h = t.head;
    o.R = cost_.memory().max_share(w, cap_[rank]);
    o.work = {b, b > 0 ? m : 0, 0, off};
    return o;
  }

  template <class F>
  void for_each_option(int rank, int64_t b, F f) const {
    if (b == 0) {
      f(eval(rank, 0, 0, false));
      return;
    }
    for (int off = 0; off <= (can_offload_[rank] ? 1 : 0); off++) {
      if (exact_) {
        for (int64_t m = 1; m <= b; m++) f(eval(rank, b, m, off));
      } else {
        for (int64_t m : grid_)
          if (m < b) f(eval(rank, b, m, off));
        f(eval(rank, b, b, off));
      }
    }
  }

  // The option with the most free memory among those that meet τ and η.
  Option best_option(int rank, int64_t b, double tau, double eta) const {
    Option best;
    for_each_option(rank, b, [&](const Option& o) {
      if (o.t <= tau && o.h <= eta && o.R >= thr_ && o.R > best.R) best = o;
    });
    return best;
  }

  double share_cap(int rank, double theta) const { return share_cap_at(opt_per_share_[rank], theta); }
  // The largest share whose optimizer time, at `opt` per share, stays within θ.
  static double share_cap_at(double opt, double theta) {
    if (theta == kInf || opt <= 0) return kInf;
    return theta / opt;
  }

  // Per member: the share its free memory holds (max(0, R)) and its optimizer time per
  // share, side by side for the water-filling's many passes over thousands of members.
  void member_rooms(const std::vector<Option>& alloc, std::vector<double>* room, std::vector<double>* opt) const {
    room->resize(members_.size());
    opt->resize(members_.size());
    for (size_t k = 0; k < members_.size(); k++) {
      (*room)[k] = std::max(0.0, alloc[k].R);
      (*opt)[k] = opt_per_share_[members_[k]];
    }
  }

  // What an allocation maximises per rank: free memory, capped where the optimizer
  // target θ would be exceeded; 0 when shares are even (they are fixed).
  double value(const Option& o, int rank, double theta) const {
    if (!o.ok()) return -kInf;
    return even_ ? 0.0 : std::min(o.R, share_cap(rank, theta));
  }

  bool enough(double total) const { return even_ ? total > -kInf : total >= 1.0; }

  // Splits B over the members so that every one meets (τ, η) and the values reach 1.
  bool allocate(double tau, double eta, double theta, std::vector<Option>* out) {
    return exact_ ? allocate_dp(tau, eta, theta, out) : allocate_greedy(tau, eta, theta, out);
  }

  bool allocate_dp(double tau, double eta, double theta, std::vector<Option>* out) {
    const size_t K = members_.size();
    const int64_t B = B_;
    // Options per device type (members of one type share them), values per member.
    std::vector<std::vector<Option>> opts_of_device(cost_.num_device_types());
    for (const Group& g : groups_) {
      std::vector<Option>& v = opts_of_device[g.device];
      v.resize(B + 1);
      for (int64_t b = 0; b <= B; b++) v[b] = best_option(g.ranks[0], b, tau, eta);
    }
    std::vector<std::vector<double>> dp(K + 1, std::vector<double>(B + 1, -kInf));
    std::vector<std::vector<int64_t>> pick(K + 1, std::vector<int64_t>(B + 1, -1));
    dp[0][0] = 0;
    for (size_t k = 0; k < K; k++) {
      const int rank = members_[k];
      const std::vector<Option>& v = opts_of_device[cost_.device_index(rank)];
      for (int64_t s = 0; s <= B; s++) {
        if (dp[k][s] == -kInf) continue;
        for (int64_t b = 0; s + b <= B; b++) {
          const double val = value(v[b], rank, theta);
          if (val == -kInf) continue;
          const double total = dp[k][s] + val;
          if (total > dp[k + 1][s + b]) {
            dp[k + 1][s + b] = total;
            pick[k + 1][s + b] = b;
          }
        }
      }
    }
    if (!enough(dp[K][B])) return false;
    if (out) {
      out->assign(K, Option{});
      int64_t s = B;
      for (size_t k = K; k > 0; k--) {
        const int64_t b = pick[k][s];
        (*out)[k - 1] = opts_of_device[cost_.device_index(members_[k - 1])][b];
        s -= b;
      }
    }
    return true;
  }

  // Ranks of a group move level by level (their batches differ by at most one sample);
  // each step gives the next samples to the group that loses the least value.
  bool allocate_greedy(double tau, double eta, double theta, std::vector<Option>* out) {
    const size_t G = groups_.size();
    // The values asked for (a bisection and a few levels per group, of up to B + 1).
    std::vector<std::unordered_map<int64_t, double>> val(G);
    auto v = [&](size_t g, int64_t b) {
      const auto known = val[g].find(b);
      if (known != val[g].end()) return known->second;
      const double x = value(best_option(groups_[g].ranks[0], b, tau, eta), groups_[g].ranks[0], theta);
      val[g].emplace(b, x);
      return x;
    };
    std::vector<int64_t> bmax(G, 0), level(G, 0), above(G, 0);
    int64_t room = 0;
    for (size_t g = 0; g < G; g++) {
      if (v(g, 0) == -kInf) return false;
      int64_t lo = 0, hi = B_;  // largest feasible b: options are monotone in b
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (v(g, mid) > -kInf) lo = mid;
        else hi = mid - 1;
      }
      bmax[g] = lo;
      room += lo * (int64_t)groups_[g].ranks.size();
    }
    if (room < B_) return false;
    int64_t remaining = B_;
    while (remaining > 0) {
      size_t pick = G;
      double best_gain = -kInf;
      for (size_t g = 0; g < G; g++) {
        if (level[g] >= bmax[g]) continue;
        const double gain = v(g, level[g] + 1) - v(g, level[g]);
        if (pick == G || gain > best_gain) {
          pick = g;
          best_gain = gain;
        }
      }
      const int64_t n = (int64_t)groups_[pick].ranks.size();
      const int64_t k = std::min(n - above[pick], remaining);
      above[pick] += k;
      remaining -= k;
      if (above[pick] == n) {
        level[pick]++;
        above[pick] = 0;
      }
    }
    double total = 0;
    for (size_t g = 0; g < G; g++) {
      const double n = (double)groups_[g].ranks.size();
      total += (n - above[g]) * v(g, level[g]) + (above[g] > 0 ? above[g] * v(g, level[g] + 1) : 0.0);
    }
    if (!enough(total)) return false;
    if (out) {
      out->assign(members_.size(), Option{});
      for (size_t g = 0; g < G; g++) {
        // The ranks of a group (one device type) have the same options.
        const Group& gr = groups_[g];
        const Option at_level = best_option(gr.ranks[0], level[g], tau, eta);
        const Option one_more = above[g] > 0 ? best_option(gr.ranks[0], level[g] + 1, tau, eta) : Option{};
        for (size_t j = 0; j < gr.ranks.size(); j++) (*out)[gr.positions[j]] = (int64_t)j < above[g] ? one_more : at_level;
      }
    }
    return true;
  }

  // State shares for an allocation: even, or the smallest optimizer time θ with
  // r_i ≤ R_i and Σ r = 1 (water-filling).
  bool shares(const std::vector<Option>& alloc, std::vector<double>* r) const {
    const size_t K = members_.size();
    r->assign(K, 0);
    if (even_) {
      for (size_t k = 0; k < K; k++) (*r)[k] = 1.0 / K;
      return true;
    }
    std::vector<double> room, opt;
    member_rooms(alloc, &room, &opt);
    double total = 0, hi = 0;
    for (size_t k = 0; k < K; k++) {
      total += room[k];
      hi = std::max(hi, room[k] * opt[k]);
    }
    if (total < 1.0) return false;
    double* out = r->data();
    auto fill = [&](double theta) {
      double s = 0;
      for (size_t k = 0; k < K; k++) {
        out[k] = std::min(room[k], share_cap_at(opt[k], theta));
        s += out[k];
      }
      return s;
    };
    double lo = 0;
    for (int it = 0; it < 100 && hi - lo > 1e-15 * hi; it++) {
      const double mid = 0.5 * (lo + hi);
      if (fill(mid) >= 1.0) hi = mid;
      else lo = mid;
    }
    const double s = fill(hi);
    for (double& x : *r) x /= s;  // s >= 1: only shrinks, stays within R
    return true;
  }

  // The smallest optimizer time θ with r_i ≤ R_i, Σ r = 1, and no node holding more than
  // `cap` of the state (water-filling, each node's ranks scaled down to the cap together).
  bool shares_capped(const std::vector<Option>& alloc, double cap, std::vector<double>* r) const {
    const size_t K = members_.size();
    std::vector<double> room, opt;
    member_rooms(alloc, &room, &opt);
    r->assign(K, 0);
    double* out = r->data();
    const int* node_of = node_of_member_.data();
    // Each node's members are consecutive (node_aware_): a node's run is summed, then scaled
    // to the cap, before the next run. The same additions in the same order as summing every
    // node first and scaling every member after, with fewer of them waiting on each other.
    auto fill = [&](double theta) {
      double s = 0;
      for (size_t k = 0; k < K;) {
        const size_t first = k;
        double node = 0;
        for (; k < K && node_of[k] == node_of[first]; k++) {
          out[k] = std::min(room[k], share_cap_at(opt[k], theta));
          node += out[k];
        }
        for (size_t j = first; j < k; j++) {
          if (node > cap) out[j] *= cap / node;
          s += out[j];
        }
      }
      return s;
    };
    double hi = 0;
    for (size_t k = 0; k < K; k++) hi = std::max(hi, room[k] * opt[k]);
    if (fill(kInf) < 1.0) return false;
    double lo = 0;
    if (hi > 0)
      for (int it = 0; it < 100 && hi - lo > 1e-15 * hi; it++) {
        const double mid = 0.5 * (lo + hi);
        if (fill(mid) >= 1.0) hi = mid;
        else lo = mid;
      }
    const double s = fill(hi > 0 ? hi : kInf);
    for (double& x : *r) x /= s;
    return true;
  }

  // Placements that split the state more evenly between the nodes than the optimizer's
  // best (`r`): node caps from the most even split the memory allows to r's largest node,
  // each scored.
  void score_node_placements(const std::vector<Option>& alloc, const std::vector<double>& r) {
    const int nodes = *std::max_element(node_of_member_.begin(), node_of_member_.end()) + 1;
    std::vector<double> on_node(nodes, 0), room(nodes, 0);
    for (size_t k = 0; k < r.size(); k++) {
      on_node[node_of_member_[k]] += r[k];
      room[node_of_member_[k]] += std::max(0.0, alloc[k].R);
    }
    const double most = *std::max_element(on_node.begin(), on_node.end());
    // The smallest cap that the nodes' memory can still hold the state under.
    double lo = 1.0 / nodes, hi = most;
    auto holds = [&](double cap) {
      double s = 0;
      for (double x : room) s += std::min(cap, x);
      return s >= 1.0;
    };
    if (!holds(lo)) {
      for (int it = 0; it < 60 && hi - lo > 1e-12; it++) {
        const double mid = 0.5 * (lo + hi);
        if (holds(mid)) hi = mid;
        else lo = mid;
      }
      lo = hi;
    }
    if (most <= lo * (1 + 1e-9)) return;
    std::vector<double> capped;
    for (double f : {0.0, 0.25, 0.5, 0.75}) {
      if (!shares_capped(alloc, lo + f * (most - lo), &capped)) continue;
      score(with_shares(alloc, capped));
    }
  }

  // Every rank's work: the members' allocated options with shares r (in member order);
  // the others left out.
  std::vector<RankWork> with_shares(const std::vector<Option>& alloc, const std::vector<double>& r) const {
    std::vector<RankWork> work(cost_.profile().num_ranks());
    for (size_t k = 0; k < members_.size(); k++) {
      work[members_[k]] = alloc[k].work;
      work[members_[k]].share = r[k];
    }
    return work;
  }

  // Scores a plan; keeps it when it is the fastest so far. Returns its optimizer time θ.
  double score(const std::vector<RankWork>& work) {
    const CostModel::Step step = cost_.evaluate(work);
    for (size_t i = 0; i < work.size(); i++) {  // the safety net: never keep a plan that does not fit
      if (!work[i].takes_part()) continue;
      if (cost_.memory_terms((int)i, work[i]).total() > cost_.capacity((int)i)) return kInf;
    }
    if (step.step < best_step_) {
      best_step_ = step.step;
      best_ = work;
    }
    return step.optimizer;
  }

  // Allocates for the targets, sets the shares, scores. Returns θ, or infinity.
  double try_alloc(double tau, double eta, double theta) {
    std::vector<Option> alloc;
    if (!allocate(tau, eta, theta, &alloc)) return kInf;
    std::vector<double> r;
    if (!shares(alloc, &r)) return kInf;
    const double optimizer = score(with_shares(alloc, r));
    if (node_aware_) score_node_placements(alloc, r);
    return optimizer;
  }

  bool feasible(double tau, double eta, double theta) { return allocate(tau, eta, theta, nullptr); }

  void set_members(const std::vector<int>& members, bool even) {
    members_ = members;
    even_ = even;
    thr_ = even ? 1.0 / members.size() : 0.0;
    groups_.clear();
    for (size_t k = 0; k < members.size(); k++) {
      const int d = cost_.device_index(members[k]);
      auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.device == d; });
      if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{d, {}, {}});
      it->ranks.push_back(members[k]);
      it->positions.push_back(k);
    }
    // Uneven shares: the targets take the collectives at their cheapest (the state split
    // evenly between the nodes); each plan is then scored with its own.
    comm_ = cost_.comm_members(members, even);
    base_t_ = 2 * comm_.ag + comm_.rs;
    base_h_ = comm_.head();
    // Across nodes on consecutive ranks the hierarchical form's middle stage depends on how
    // the state is split between the nodes: node_of_member_ numbers them for the placement.
    node_of_member_.clear();
    std::map<int, int> index;
    bool contiguous = true;
    for (size_t k = 0; k < members.size(); k++) {
      const int node = cost_.profile().ranks[members[k]].node;
      const bool new_node = !index.count(node);
      if (k > 0 && node != cost_.profile().ranks[members[k - 1]].node && !new_node) contiguous = false;
      if (new_node) index.emplace(node, (int)index.size());
      node_of_member_.push_back(index[node]);
    }
    node_aware_ = !even && contiguous && index.size() > 1;
  }

  double theta_lower_bound() const {
    if (even_) {
      double worst = 0;
      for (int r : members_) worst = std::max(worst, opt_per_share_[r]);
      return worst / members_.size();
    }
    double inv = 0;
    for (int r : members_) {
      if (opt_per_share_[r] <= 0) return 0;
      inv += 1.0 / opt_per_share_[r];
    }
    return 1.0 / inv;
  }

  void search(const std::vector<int>& members, bool even);
  void search_exact(double theta_lb);
  void search_fast(double theta_lb);
  void try_theta(double tau, double eta, double theta_lb);
};

void Search::search(const std::vector<int>& members, bool even) {
  set_members(members, even);
  if (even && members.size() == 1) return;  // one rank: the uneven search covers it
  const double theta_lb = theta_lower_bound();
  if (L_ * base_t_ + base_h_ + theta_lb >= best_step_) return;
  // Every member must at least take part (gather, hold its share when even).
  for (const Group& g : groups_)
    if (!best_option(g.ranks[0], 0, kInf, kInf).ok()) return;
  if (exact_) search_exact(theta_lb);
  else search_fast(theta_lb);
}

// All candidate (τ, η) in increasing order while they can still beat the best plan.
void Search::search_exact(double theta_lb) {
  std::vector<double> taus{base_t_};
  for (const Group& g : groups_)
    for (int64_t b = 1; b <= B_; b++)
      for_each_option(g.ranks[0], b, [&](const Option& o) {
        if (o.R >= thr_) taus.push_back(o.t);
      });
  std::sort(taus.begin(), taus.end());
  taus.erase(std::unique(taus.begin(), taus.end()), taus.end());
  if (!feasible(taus.back(), kInf, kInf)) return;
  size_t lo = 0, hi = taus.size() - 1;  // first feasible τ
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (feasible(taus[mid], kInf, kInf)) hi = mid;
    else lo = mid + 1;
  }
  for (size_t i = lo; i < taus.size(); i++) {
    const double tau = taus[i];
    if (L_ * tau + base_h_ + theta_lb >= best_step_) break;
    std::vector<double> etas{base_h_};
    for (const Group& g : groups_)
      for (int64_t b = 1; b <= B_; b++)
        for_each_option(g.ranks[0], b, [&](const Option& o) {
          if (o.R >= thr_ && o.t <= tau) etas.push_back(o.h);
        });
    std::sort(etas.begin(), etas.end());
    etas.erase(std::unique(etas.begin(), etas.end()), etas.end());
    size_t elo = 0, ehi = etas.size() - 1;
    while (elo < ehi) {
      const size_t mid = (elo + ehi) / 2;
      if (feasible(tau, etas[mid], kInf)) ehi = mid;
      else elo = mid + 1;
    }
    for (size_t j = elo; j < etas.size(); j++) {
      if (L_ * tau + etas[j] + theta_lb >= best_step_) break;
      try_theta(tau, etas[j], theta_lb);
    }
  }
}

// For fixed (τ, η): the plan with the most free memory, then bisection on θ.
void Search::try_theta(double tau, double eta, double theta_lb) {
  const double theta0 = try_alloc(tau, eta, kInf);
  if (theta0 == kInf || even_) return;
  double lo = theta_lb, hi = theta0;
  bool improved = false;
  while (L_ * tau + eta + lo < best_step_ && hi - lo > 1e-12 * (L_ * tau + eta + hi)) {
    const double mid = 0.5 * (lo + hi);
    if (feasible(tau, eta, mid)) {
      hi = mid;
      improved = true;
    } else {
      lo = mid;
    }
  }
  if (improved) try_alloc(tau, eta, hi);
}

// Bisection for the smallest feasible τ, then a few larger τ (and the smallest η at each)
// inside the window where the head and optimizer terms could still pay for them.
void Search::search_fast(double theta_lb) {
  double hi = base_t_;
  for (const Group& g : groups_)
    for_each_option(g.ranks[0], B_, [&](const Option& o) { hi = std::max(hi, o.t); });
  if (!feasible(hi, kInf, kInf)) return;
  double lo = base_t_;
  if (feasible(lo, kInf, kInf)) hi = lo;
  while (hi - lo > 1e-7 * hi) {
    const double mid = 0.5 * (lo + hi);
    if (feasible(mid, kInf, kInf)) hi = mid;
    else lo = mid;
  }
  const double tau_min = hi;
  auto at_tau = [&](double tau) {
    if (L_ * tau + base_h_ + theta_lb >= best_step_) return;
    try_alloc(tau, kInf, kInf);
    // The smallest head time reachable at this τ.
    double elo = base_h_, ehi = 0;
    for (const Group& g : groups_)
      for_each_option(g.ranks[0], B_, [&](const Option& o) { ehi = std::max(ehi, o.h); });
    ehi = std::max(ehi, elo);
    if (!feasible(tau, ehi, kInf)) return;
    for (int it = 0; it < 30 && ehi - elo > 1e-6 * ehi; it++) {
      const double mid = 0.5 * (elo + ehi);
      if (feasible(tau, mid, kInf)) ehi = mid;
      else elo = mid;
    }
    try_alloc(tau, ehi, kInf);
  };
  at_tau(tau_min);
  const double window = (best_step_ - L_ * tau_min - base_h_ - theta_lb) / L_;
  if (window > 1e-9 * tau_min)
    for (double f : {0.0625, 0.125, 0.25, 0.5}) at_tau(tau_min + f * window);
}

}  // namespace

std::optional<std::vector<RankWork>> search_full(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid,
                                                 const PlannerOptions& opts, bool exact,
                                                 const std::vector<std::vector<int>>& sets) {
  Search search(cost, B, grid, opts, exact);
  search.run(sets);
  if (!search.found()) return std::nullopt;
  return search.best();
}

}  // namespace gpumix::dist
