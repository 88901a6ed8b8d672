// The baselines the gpumix planner is compared with (dist/plan/planner.h): the even split,
// the split in proportion to throughput, and Cephalo as published, each evaluated with the
// same cost and memory models.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "dist/plan/planner_shared.h"

namespace gpumix::dist {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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
  const CostModel cost = planner_cost_model(profile, B, opts);
  return even_shares_plan(cost, "even", B, even_batches(B, profile.num_ranks()));
}

Plan plan_proportional(const Profile& profile, int64_t B, const PlannerOptions& opts) {
  const CostModel cost = planner_cost_model(profile, B, opts);
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
  const CostModel cost = planner_cost_model(profile, B, opts);
  const int N = profile.num_ranks();
  CommTimes assumed;  // free by default
  if (opts.cephalo_comm_scale > 0) {
    std::vector<int> all(N);
    std::iota(all.begin(), all.end(), 0);
    assumed = cost.comm_members(all, true);
    for (double* x : {&assumed.ag, &assumed.rs, &assumed.embed_ag, &assumed.embed_rs, &assumed.head_rs})
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

}  // namespace gpumix::dist
