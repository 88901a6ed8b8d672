// The gpumix planner's full sharding: the sets of ranks its search tries, why nothing fits
// when nothing does, and the pass that takes back offload where it is not needed.
#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <string>

#include "dist/plan/planner_shared.h"

namespace gpumix::dist {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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

}  // namespace

Plan plan_full(const CostModel& cost, int64_t B, const std::vector<int64_t>& grid, const PlannerOptions& opts) {
  const bool exact = use_exact(cost.profile(), B, opts);
  const std::optional<std::vector<RankWork>> found =
      search_full(cost, B, grid, opts, exact, candidate_sets(cost, exact, opts.allow_leave_out));
  if (!found) throw_infeasible(cost, B, opts);
  // Offload only where it is needed: the search keeps the most free memory, so it may
  // offload where keeping the inputs on the device fits as well and is no slower. Rank by
  // rank, keeping each change that leaves the step no longer. A rank's offload changes only
  // its own block time (the collectives follow the shares; the head and optimizer terms do
  // not depend on it), so each try weighs that time against the others' largest, not a
  // whole new evaluation (thousands of offloading ranks on a large cluster).
  std::vector<RankWork> best = *found;
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

}  // namespace gpumix::dist
