#include "dist/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <tuple>
#include <set>
#include <unordered_map>

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

// The 1-2-4-8 grid of micro-batch sizes for large instances, plus the profiled sizes.
std::vector<int64_t> micro_batch_grid(const Profile& p, int64_t B) {
  std::set<int64_t> ms;
  for (int64_t m = 1; m <= B; m *= 2) ms.insert(m);
  for (const DeviceProfile& d : p.devices)
    for (const MicroBatchSample& s : d.samples)
      if (s.m <= B) ms.insert(s.m);
  return std::vector<int64_t>(ms.begin(), ms.end());
}

class Search {
 public:
  Search(const CostModel& cost, int64_t B, const PlannerOptions& opts, bool exact)
      : cost_(cost), B_(B), opts_(opts), exact_(exact), L_(cost.profile().model.L) {
    const Profile& p = cost.profile();
    grid_ = micro_batch_grid(p, B);
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

// The participating sets worth trying: all subsets on small clusters; otherwise all
// ranks, then all but the slowest device type, all but the two slowest, and so on.
std::vector<std::vector<int>> candidate_sets(const CostModel& cost, bool exact, bool leave_out) {
  const int N = cost.profile().num_ranks();
  std::vector<int> all(N);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::vector<int>> sets{all};
  if (!leave_out) return sets;
  if (exact && N <= 12) {
    for (int mask = (1 << N) - 2; mask >= 1; mask--) {
      std::vector<int> s;
      for (int i = 0; i < N; i++)
        if (mask & (1 << i)) s.push_back(i);
      sets.push_back(s);
    }
    return sets;
  }
  // Speed of a device type: samples per second through one block at its best profiled size.
  std::vector<double> speed(cost.num_device_types(), 0);
  for (int d = 0; d < cost.num_device_types(); d++)
    for (const MicroBatchSample& s : cost.profile().devices[d].samples)
      speed[d] = std::max(speed[d], s.m / (s.block_fwd_s + s.block_bwd_s));
  std::vector<int> types;
  for (int r = 0; r < N; r++)
    if (std::find(types.begin(), types.end(), cost.device_index(r)) == types.end())
      types.push_back(cost.device_index(r));
  std::stable_sort(types.begin(), types.end(), [&](int a, int b) { return speed[a] > speed[b]; });
  for (size_t keep = types.size() - 1; keep >= 1; keep--) {
    std::vector<int> s;
    for (int r = 0; r < N; r++)
      if (std::find(types.begin(), types.begin() + keep, cost.device_index(r)) != types.begin() + keep)
        s.push_back(r);
    sets.push_back(s);
  }
  return sets;
}

// Why nothing fits, with the numbers: ranks that cannot even take part, and how much
// memory the whole cluster lacks for the state and the samples at micro-batch 1.
[[noreturn]] void throw_infeasible(const CostModel& cost, int64_t B, const PlannerOptions& opts) {
  const Profile& p = cost.profile();
  const MemoryModel& mm = cost.memory();
  const double phi = 1.0 + mm.params().fragmentation;
  std::string per_rank;
  double slack = 0;  // Σ over usable ranks of free bytes (before margin), minus the state
  std::vector<int> usable;
  for (int i = 0; i < p.num_ranks(); i++) {
    const MemoryTerms base = cost.memory_terms(i, 0, 0, 0, false);
    if (base.total() > cost.capacity(i)) {
      per_rank += "; rank " + std::to_string(i) + " (" + p.ranks[i].device + ", " +
                  format_bytes(cost.capacity(i)) + ") cannot even hold the gathered parameters and buffers (" +
                  format_bytes(base.total()) + ")";
      continue;
    }
    usable.push_back(i);
    slack += cost.capacity(i) / phi - base.total() / phi;
  }
  // The samples go where they cost least: micro-batch 1, offloaded where possible.
  double worst_fixed = 0;
  for (int i : usable) {
    const bool off = opts.allow_offload && p.rank_device(i).kind == "gpu" && p.rank_device(i).host_bandwidth_Bps > 0;
    const MemoryTerms one = cost.memory_terms(i, 1, 1, 0, off);
    const MemoryTerms base = cost.memory_terms(i, 0, 0, 0, false);
    worst_fixed = std::max(worst_fixed, (one.total() - base.total()) / phi);
  }
  double per_sample = kInf;
  for (int i : usable) {
    const bool off = opts.allow_offload && p.rank_device(i).kind == "gpu" && p.rank_device(i).host_bandwidth_Bps > 0;
    const MemoryTerms two = cost.memory_terms(i, 2, 1, 0, off);
    const MemoryTerms one = cost.memory_terms(i, 1, 1, 0, off);
    per_sample = std::min(per_sample, (two.total() - one.total()) / phi);
  }
  const double state = mm.state_bytes_total();
  double missing = 0;
  if (!usable.empty()) {
    // The first sample on a rank also brings one block's activations and the logits.
    const double need = state + worst_fixed + std::max<int64_t>(0, B - 1) * per_sample;
    missing = std::max(0.0, (need - slack) * phi);
  } else {
    missing = state * phi;
  }
  std::string msg = "no plan fits " + p.model.name + " (T = " + std::to_string(p.seq_len) +
                    ", global batch " + std::to_string(B) + ") on these " + std::to_string(p.num_ranks()) +
                    " ranks: ";
  if (missing > 0)
    msg += "the cluster lacks " + format_bytes(missing) + " in total (the state alone needs " +
           format_bytes(state) + ")";
  else
    msg += "the memory would do in total, but no split of the batch fits every rank";
  msg += per_rank + " - add a device, use a smaller model or a smaller batch";
  throw InfeasiblePlan(msg, missing);
}

bool use_exact(const Profile& p, int64_t B, const PlannerOptions& opts) {
  return p.num_ranks() <= opts.exact_max_ranks && B <= opts.exact_max_batch;
}

void check_batch(int64_t B) {
  if (B < 1 || B > kMaxGlobalBatch)
    throw std::invalid_argument("global batch must be in [1, " + std::to_string(kMaxGlobalBatch) +
                                "] sequences, got " + std::to_string(B));
}

}  // namespace

namespace {

Plan plan_full(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  const bool exact = use_exact(profile, B, opts);
  CostModel cost(profile, opts.memory, B);
  Search search(cost, B, opts, exact);
  search.run(candidate_sets(cost, exact, opts.allow_leave_out));
  if (!search.found()) throw_infeasible(cost, B, opts);
  // Offload only where it is needed: the search keeps the most free memory, so it may
  // offload where keeping the inputs on the device fits as well and is no slower. Rank by
  // rank, keeping each change that leaves the step no longer. A rank's offload changes only
  // its own block time (the collectives follow the shares; the head and optimizer terms do
  // not depend on it), so each try weighs that time against the others' largest, not a
  // whole new evaluation (thousands of offloading ranks on a large cluster).
  std::vector<RankWork> best = search.best();
  const CostModel::Step step = cost.evaluate(best);
  std::vector<double> block(best.size());
  std::multiset<double> blocks;
  for (size_t i = 0; i < best.size(); i++) blocks.insert(block[i] = step.ranks[i].block);
  for (size_t i = 0; i < best.size(); i++) {
    if (!best[i].offload) continue;
    best[i].offload = false;
    if (cost.memory_terms((int)i, best[i]).total() > cost.capacity((int)i)) {
      best[i].offload = true;
      continue;
    }
    RankTimes t = cost.compute_times((int)i, best[i].batch, best[i].micro_batch, false);
    CostModel::apply_comm(t, step.comm);
    blocks.erase(blocks.find(block[i]));
    blocks.insert(t.block);
    // CostModel::evaluate's T_step with this rank's new block time (the others' that are
    // not taking part are 0, as evaluate's maximum starts).
    if (cost.profile().model.L * *blocks.rbegin() + step.head + step.optimizer > step.step) {
      blocks.erase(blocks.find(t.block));
      blocks.insert(block[i]);
      best[i].offload = true;
    } else {
      block[i] = t.block;
    }
  }
  return make_plan(cost, "gpumix", B, best);
}

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

Plan plan_hybrid(const Profile& profile, int64_t B, int g, const PlannerOptions& opts) {
  check_batch(B);
  const int N = profile.num_ranks();
  const CostModel cost(profile, opts.memory, B, Sharding{g});
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
  std::vector<int64_t> grid;
  for (int64_t m = 1; m <= B; m *= 2) grid.push_back(m);
  for (int i : rep)
    for (const MicroBatchSample& sm : cost.table(i).device->samples)
      if (sm.m <= B) grid.push_back(sm.m);
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
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

Plan plan_gpumix(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  check_batch(B);
  if (opts.group_size > 0) return plan_hybrid(profile, B, opts.group_size, opts);
  if (opts.group_size == 0) return plan_full(profile, B, opts);
  // Full, then every aligned hybrid: the shortest predicted step that fits (full on a tie).
  std::optional<Plan> chosen;
  std::optional<InfeasiblePlan> full_error;
  try {
    chosen = plan_full(profile, B, opts);
  } catch (const InfeasiblePlan& e) {
    full_error = e;
  }
  for (int g : hybrid_group_sizes(profile)) {
    try {
      Plan h = plan_hybrid(profile, B, g, opts);
      if (h.fits() && (!chosen || h.predicted.step_s < chosen->predicted.step_s)) chosen = std::move(h);
    } catch (const InfeasiblePlan&) {
      // This group size cannot hold the state or the batch: others may.
    }
  }
  if (!chosen) throw *full_error;
  return *chosen;
}

// ---- baselines -------------------------------------------------------------------------

namespace {

// The largest micro-batch that fits next to share r without offload (1 if none does).
int64_t largest_fitting_m(const CostModel& cost, int rank, int64_t b, double r) {
  if (b == 0) return 0;
  for (int64_t m = b; m >= 1; m--)
    if (cost.memory_terms(rank, b, m, r, false).total() <= cost.capacity(rank)) return m;
  return 1;
}

// The even split's batches (dist/plan/work.h's even_work).
std::vector<int64_t> even_batches(int64_t B, int N) {
  std::vector<int64_t> b;
  for (const RankWork& w : even_work(B, N).ranks) b.push_back(w.batch);
  return b;
}

// Splits B by weights with the largest-remainder rule; ties go to the lower rank.
std::vector<int64_t> split_by_weight(const std::vector<double>& w, int64_t B) {
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<int64_t> b(w.size());
  std::vector<std::pair<double, int>> rem;
  int64_t given = 0;
  for (size_t i = 0; i < w.size(); i++) {
    const double exact = B * w[i] / total;
    b[i] = (int64_t)std::floor(exact);
    given += b[i];
    rem.push_back({exact - b[i], (int)i});
  }
  std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& c) { return a.first > c.first; });
  for (int64_t k = 0; k < B - given; k++) b[rem[k % rem.size()].second]++;
  return b;
}

Plan even_shares_plan(const CostModel& cost, const std::string& name, int64_t B,
                      const std::vector<int64_t>& batch) {
  const int N = cost.profile().num_ranks();
  std::vector<RankWork> c(N);
  for (int i = 0; i < N; i++) {
    c[i].batch = batch[i];
    c[i].share = 1.0 / N;
    c[i].micro_batch = largest_fitting_m(cost, i, batch[i], c[i].share);
  }
  return make_plan(cost, name, B, c);
}

}  // namespace

Plan plan_even(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  check_batch(B);
  CostModel cost(profile, opts.memory, B);
  return even_shares_plan(cost, "even", B, even_batches(B, profile.num_ranks()));
}

Plan plan_proportional(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  check_batch(B);
  CostModel cost(profile, opts.memory, B);
  // Throughput at the largest profiled micro-batch (what Poplar / Whale measure).
  std::vector<double> w;
  for (int i = 0; i < profile.num_ranks(); i++) {
    const MicroBatchSample& s = profile.rank_device(i).samples.back();
    w.push_back(s.m / (s.block_fwd_s + s.block_bwd_s + s.head_s / profile.model.L));
  }
  return even_shares_plan(cost, "proportional", B, split_by_weight(w, B));
}

// Cephalo as published: (1) split the batch to minimise the slowest rank's compute time,
// each rank's micro-batch chosen so that its compute memory (without state) fits, with
// communication assumed free; (2) check only that the cluster's total free memory holds
// the state; (3) start from even shares and water-fill the overflow of full ranks into
// the ranks with spare memory in equal parts, without checking that each receiver can
// take its part (the flaw docs/method.md §4.1 names). Evaluated with our models.
Plan plan_cephalo(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  check_batch(B);
  const int N = profile.num_ranks();
  CostModel cost(profile, opts.memory, B);
  CommTimes assumed;  // free by default
  if (opts.cephalo_comm_scale > 0) {
    std::vector<int> all(N);
    std::iota(all.begin(), all.end(), 0);
    assumed = cost.comm_members(all, true);
    for (double* x : {&assumed.ag, &assumed.rs, &assumed.embed_ag, &assumed.embed_rs, &assumed.head_ag, &assumed.head_rs})
      *x *= 1.25 * opts.cephalo_comm_scale;
  }
  // Fastest micro-batch per (rank, b) whose compute memory fits.
  auto best_time = [&](int i, int64_t b, int64_t* m_out) {
    if (b == 0) {
      *m_out = 0;
      return 0.0;
    }
    double best = kInf;
    std::vector<int64_t> ms;
    for (int64_t m = 1; m <= std::min<int64_t>(b, 8); m++) ms.push_back(m);
    for (int64_t m = 16; m < b; m *= 2) ms.push_back(m);
    if (b > 8) ms.push_back(b);
    for (int64_t m : ms) {
      if (cost.memory_terms(i, b, m, 0, false).total() > cost.capacity(i)) break;
      RankTimes t = cost.compute_times(i, b, m, false);
      CostModel::apply_comm(t, assumed);
      if (t.block < best) {
        best = t.block;
        *m_out = m;
      }
    }
    return best;
  };
  auto bmax = [&](int i, double tau) {
    int64_t lo = 0, hi = B;
    int64_t m;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (best_time(i, mid, &m) <= tau) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  auto room = [&](double tau) {
    int64_t s = 0;
    for (int i = 0; i < N; i++) s += bmax(i, tau);
    return s;
  };
  std::vector<RankWork> c(N);
  double hi = 1;
  while (room(hi) < B && hi < 1e9) hi *= 2;
  if (room(hi) < B) {
    // Even its compute does not fit: fall back to the even split in micro-batches of 1,
    // reported as OOM.
    c = even_work(B, N).ranks;
    for (RankWork& w : c) w.micro_batch = w.batch > 0 ? 1 : 0;
    return make_plan(cost, "cephalo", B, c);
  }
  double lo = 0;
  while (hi - lo > 1e-7 * hi) {
    const double mid = 0.5 * (lo + hi);
    if (room(mid) >= B) hi = mid;
    else lo = mid;
  }
  std::vector<int64_t> b(N);
  int64_t total = 0;
  for (int i = 0; i < N; i++) total += (b[i] = bmax(i, hi));
  while (total > B) {  // trim the slowest ranks first
    int worst = -1;
    double worst_t = -1;
    for (int i = 0; i < N; i++) {
      int64_t m;
      const double t = b[i] > 0 ? best_time(i, b[i], &m) : -1;
      if (b[i] > 0 && t > worst_t) {
        worst_t = t;
        worst = i;
      }
    }
    b[worst]--;
    total--;
  }
  for (int i = 0; i < N; i++) {
    c[i].batch = b[i];
    best_time(i, b[i], &c[i].micro_batch);
    c[i].share = 1.0 / N;
  }
  // Water-filling the state: overflow of full ranks, in equal parts to the others.
  const double per_share = cost.memory().state_bytes_total();
  double overflow = 0;
  std::vector<int> receivers;
  for (int i = 0; i < N; i++) {
    const MemoryTerms m = cost.memory_terms(i, c[i].batch, c[i].micro_batch, c[i].share, false);
    const double excess = m.total() - cost.capacity(i);
    if (excess > 0) {
      const double dr = std::min(c[i].share, excess / (1.0 + cost.memory().params().fragmentation) / per_share);
      c[i].share -= dr;
      overflow += dr;
    } else {
      receivers.push_back(i);
    }
  }
  if (receivers.empty()) {
    // Nowhere to put it: the cluster check of step (2) fails; keep even shares (OOM).
    for (int i = 0; i < N; i++) c[i].share = 1.0 / N;
  } else {
    for (int i : receivers) c[i].share += overflow / receivers.size();
  }
  return make_plan(cost, "cephalo", B, c);
}

std::vector<std::string> planner_names() { return {"gpumix", "even", "proportional", "cephalo"}; }

Plan run_planner(const std::string& name, const Profile& profile, int64_t B, const PlannerOptions& opts) {
  if (name == "gpumix") return plan_gpumix(profile, B, opts);
  if (name == "even") return plan_even(profile, B, opts);
  if (name == "proportional") return plan_proportional(profile, B, opts);
  if (name == "cephalo") return plan_cephalo(profile, B, opts);
  throw std::invalid_argument("unknown planner '" + name + "' (gpumix, even, proportional, cephalo)");
}

}  // namespace gpumix::dist
