// The planner of local updates (dist/plan/planner_local.h: the model, term by term).
#include "dist/plan/planner_local.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "dist/comm/collective_cost.h"

namespace gpumix::dist {

namespace {

// The group as a cluster of its own: its ranks in order, its nodes numbered from 0, the
// device types it uses in the profile's order, the profile's links.
Profile group_profile(const Profile& p, const std::vector<int>& ranks) {
  Profile g;
  g.model = p.model;
  g.seq_len = p.seq_len;
  g.dtype = p.dtype;
  g.comm = p.comm;
  std::map<int, int> node_index;
  std::set<std::string> used;
  for (int r : ranks) {
    RankInfo info = p.ranks[r];
    info.node = node_index.emplace(info.node, (int)node_index.size()).first->second;
    used.insert(info.device);
    g.ranks.push_back(info);
  }
  for (const DeviceProfile& d : p.devices)
    if (used.count(d.name)) g.devices.push_back(d);
  return g;
}

// What tells one group's plan from another's: its ranks' devices and nodes, and its rows.
std::string group_key(const Profile& g, int64_t batch) {
  std::string key = std::to_string(batch);
  for (const RankInfo& r : g.ranks) key += "|" + r.device + "@" + std::to_string(r.node);
  return key;
}

struct GroupPlan {
  bool planned = false;
  std::string error;
  Plan plan;
};

// B rows split in proportion to `weight` (largest remainders, ties to the lower group).
std::vector<int64_t> split_rows(int64_t B, const std::vector<double>& weight) {
  double total = 0;
  for (double w : weight) total += w;
  const size_t G = weight.size();
  std::vector<int64_t> rows(G);
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t g = 0; g < G; g++) {
    const double exact = (double)B * weight[g] / total;
    rows[g] = std::min<int64_t>(B, (int64_t)std::floor(exact));
    given += rows[g];
    rest.push_back({-(exact - (double)rows[g]), g});
  }
  std::sort(rest.begin(), rest.end());
  for (size_t k = 0; given < B; k = (k + 1) % G, given++) rows[rest[k].second]++;
  return rows;
}

// "4-7" for consecutive ranks, else "0, 2".
std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() > 1 && ranks.back() - ranks.front() + 1 == (int)ranks.size())
    return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

void check_local_sharding(const LocalSync& sync, int group_size) {
  GPUMIX_CHECK_INPUT(!sync.local || group_size <= 0, "--sharding ", group_size, " with --sync local:", sync.every,
                     ": each group of local updates shards its state fully over its own ranks; drop --sharding "
                     "(or choose the groups with --groups)");
}

namespace {

// The meeting of every rank after the outer step's exchange (dist/engine/local_mode.h): the
// period's busy times and losses (16 bytes a step and rank, gathered) and the stop request:
// two small collectives across the G groups, mostly their latency. Between outer steps
// nothing crosses a group.
double meeting_s(const TopologyLink& link, int G, int H, int ranks) {
  constexpr int kMeetingCollectives = 2;
  return kMeetingCollectives * ring_time(link, G, 16.0 * H * ranks);
}

}  // namespace

LocalPlan plan_local(const Profile& profile, int64_t B, const LocalSync& sync, const std::string& planner,
                     const PlannerOptions& opts) {
  GPUMIX_CHECK_INPUT(sync.local, "plan_local needs --sync local:H, got every-step");
  const std::vector<std::string> names = planner_names();
  GPUMIX_CHECK_INPUT(std::find(names.begin(), names.end(), planner) != names.end(), "unknown planner '", planner,
                     "' for --sync local:", sync.every, "; give gpumix (auto), even, proportional or cephalo");
  check_local_sharding(sync, opts.group_size);
  const int N = profile.num_ranks();
  check_sync_groups(sync, N, "this cluster", "describe more devices in the cluster file");
  LocalPlan l;
  l.sync = sync;
  l.planner = planner;
  l.global_batch = B;
  l.params = profile.model.total_params();
  std::vector<int> node_of_rank;
  for (const RankInfo& r : profile.ranks) node_of_rank.push_back(r.node);
  const std::vector<int> group_of = sync_groups(sync, node_of_rank);
  // Groups numbered as sync_groups numbers them (nodes may be numbered with gaps).
  std::map<int, size_t> index;
  for (int r = 0; r < N; r++) {
    auto [it, added] = index.emplace(group_of[r], l.groups.size());
    if (added) {
      l.groups.emplace_back();
      l.groups.back().group = group_of[r];
    }
    l.groups[it->second].ranks.push_back(r);
  }
  const int G = (int)l.groups.size();
  GPUMIX_CHECK_INPUT(B >= G, "--global-batch ", B, " gives the ", G, " groups fewer rows than one each; give "
                     "--global-batch ", G, " or more, or fewer groups (--groups)");

  // The outer step's exchange (none with one group: nobody to synchronise with).
  const double P = (double)l.params;
  const TopologyLinks ag = topology_links(profile.comm.all_gather), rs = topology_links(profile.comm.reduce_scatter);
  std::set<int> leader_nodes;
  for (SyncGroupPrediction& g : l.groups) {
    leader_nodes.insert(node_of_rank[g.ranks[0]]);
    std::set<int> nodes;
    for (int r : g.ranks) nodes.insert(node_of_rank[r]);
    const int n = (int)g.ranks.size();
    if (G > 1)
      g.exchange_s = all_reduce_time(nodes.size() > 1 ? rs.inter : rs.intra, n, 4 * P) +
                     tree_time(nodes.size() > 1 ? ag.inter : ag.intra, n, 4 * P);
  }
  if (G > 1) {
    const TopologyLink& link = leader_nodes.size() > 1 ? ag.leader_link() : ag.intra;
    // The leaders' bf16 all-gather, then the meeting of every rank after it
    // (dist/engine/local_mode.h): the period's busy times and losses (16 bytes a step and
    // rank) and the stop request, small: their latency. Between outer steps nothing crosses.
    // Priced flat here (the layouts, the groups' plans, come below: the split does not
    // depend on it); sliced at the end where they agree.
    l.cross_s = ring_time(link, G, 2 * P * G) + meeting_s(link, G, sync.every, (int)node_of_rank.size());
  }
  double exchange = 0;
  for (const SyncGroupPrediction& g : l.groups) exchange = std::max(exchange, g.exchange_s);
  l.outer_s = exchange + l.cross_s;
  const int H = sync.every;

  // Each group's plan, once per distinct group (a large cluster has few kinds).
  std::vector<Profile> profiles;
  for (const SyncGroupPrediction& g : l.groups) profiles.push_back(group_profile(profile, g.ranks));
  std::map<std::string, std::shared_ptr<const GroupPlan>> plans;
  PlannerOptions inside = opts;
  inside.group_size = 0;  // full sharding inside a group, as the engine's groups shard
  // Every rank of a group takes part: the engine keeps them all in their group's collectives
  // (dist/engine/replan.h), so a rank left out would still hold gathered units its memory
  // model does not count; and the simulator predicts what a run runs.
  inside.allow_leave_out = false;
  auto plan_of = [&](size_t g, int64_t rows) {
    std::shared_ptr<const GroupPlan>& slot = plans[group_key(profiles[g], rows)];
    if (!slot) {
      auto made = std::make_shared<GroupPlan>();
      try {
        made->plan = run_planner(planner, profiles[g], rows, inside);
        made->planned = true;
      } catch (const InfeasiblePlan& e) {
        made->error = e.what();
      }
      slot = made;
    }
    return slot;
  };
  // The period of a split; infinite when some group has no rows or no plan.
  auto period_of = [&](const std::vector<int64_t>& rows) {
    double slowest = 0;
    for (size_t g = 0; g < l.groups.size(); g++) {
      if (rows[g] < 1) return std::numeric_limits<double>::infinity();
      const auto gp = plan_of(g, rows[g]);
      if (!gp->planned) return std::numeric_limits<double>::infinity();
      slowest = std::max(slowest, gp->plan.predicted.step_s);
    }
    return H * slowest + l.outer_s;
  };

  std::vector<double> weight(G, 0);
  std::vector<int64_t> rows;
  if (planner == "even") {  // the same rows for every rank, whatever its speed
    for (int g = 0; g < G; g++) weight[g] = (double)l.groups[g].ranks.size();
    rows = split_rows(B, weight);
  } else {
    // First split: the ranks' compute rates (samples/s of a whole step at one micro-batch size).
    const int64_t m = std::clamp<int64_t>(B / N, 1, 8);
    std::map<std::string, double> rate_of;
    for (const DeviceProfile& d : profile.devices) {
      const MicroBatchSample s = d.at(m);
      rate_of[d.name] = (double)m / (profile.model.L * (s.block_fwd_s + s.block_bwd_s) + s.head_s);
    }
    for (int g = 0; g < G; g++)
      for (int r : l.groups[g].ranks) weight[g] += rate_of[profile.ranks[r].device];
    rows = split_rows(B, weight);
    double period = period_of(rows);
    // Again by the plans' own speeds, keeping the split with the shortest period.
    std::vector<int64_t> at = rows;
    for (int round = 0; round < kSplitRounds && std::isfinite(period); round++) {
      for (int g = 0; g < G; g++) weight[g] = (double)at[g] / plan_of(g, at[g])->plan.predicted.step_s;
      const std::vector<int64_t> again = split_rows(B, weight);
      if (again == at) break;
      at = again;
      const double p = period_of(at);
      if (!std::isfinite(p)) break;
      if (p < period) {
        rows = at;
        period = p;
      }
    }
  }

  double slowest = 0;
  for (int g = 0; g < G; g++) {
    SyncGroupPrediction& lg = l.groups[g];
    lg.batch = rows[g];
    if (rows[g] < 1) {
      if (l.error.empty())
        l.error = str("group ", lg.group, " (ranks ", ranks_text(lg.ranks), ") gets no rows of the global batch ", B,
                      ": give a larger --global-batch, or other --groups");
      continue;
    }
    const auto gp = plan_of(g, rows[g]);
    lg.planned = gp->planned;
    lg.error = gp->error;
    if (!gp->planned) {
      if (l.error.empty()) l.error = str("group ", lg.group, " (ranks ", ranks_text(lg.ranks), "): ", gp->error);
      continue;
    }
    lg.plan = gp->plan;
    lg.inner_s = lg.plan.predicted.step_s;
    slowest = std::max(slowest, lg.inner_s);
  }
  if (!l.planned()) return l;
  // Every group the same layout (as many ranks, the same shares by position): the sliced
  // exchange (outer_step.h), a reduce-scatter and an all-gather of the ranks' own slices
  // among their peers in bf16, nothing inside the groups. A node's ranks share its link:
  // 2 x (G - 1)/G x 2P bytes through it however many they are.
  l.sliced = G > 1;
  for (const SyncGroupPrediction& g : l.groups) {
    const std::vector<RankPlan>& a = g.plan.ranks, & b = l.groups[0].plan.ranks;
    l.sliced = l.sliced && a.size() == b.size();
    for (size_t i = 0; l.sliced && i < a.size(); ++i) l.sliced = a[i].work.share == b[i].work.share;
  }
  if (l.sliced) {
    const TopologyLink& link = leader_nodes.size() > 1 ? ag.leader_link() : ag.intra;
    for (SyncGroupPrediction& g : l.groups) g.exchange_s = 0;
    l.cross_s = 2 * ring_time(link, G, 2 * P) + meeting_s(link, G, H, (int)node_of_rank.size());
    l.outer_s = l.cross_s;
  }
  for (SyncGroupPrediction& g : l.groups) g.wait_s = H * (slowest - g.inner_s);
  l.period_s = H * slowest + l.outer_s;
  l.step_s = slowest + l.outer_s / H;  // period / H, and with one group its inner step to the bit
  return l;
}

Plan local_combined_plan(const LocalPlan& l, const Profile& profile) {
  GPUMIX_CHECK(l.planned(), "local_combined_plan of a local plan that failed: ", l.error);
  const int G = (int)l.groups.size();
  const SyncGroupPrediction* slowest = &l.groups[0];
  for (const SyncGroupPrediction& g : l.groups)
    if (g.inner_s > slowest->inner_s) slowest = &g;
  Plan c;
  c.planner = l.planner;
  c.model = profile.model;
  c.seq_len = profile.seq_len;
  c.dtype = profile.dtype;
  c.global_batch = l.global_batch;
  c.comm = profile.comm;
  c.ranks.resize(profile.num_ranks());
  for (const SyncGroupPrediction& g : l.groups)
    for (size_t k = 0; k < g.ranks.size(); ++k) {
      const int r = g.ranks[k];
      RankPlan p = g.plan.ranks[k];
      p.rank = r;
      p.node = profile.ranks[r].node;
      p.node_name = profile.ranks[r].node_name;
      p.work.share /= G;
      p.idle_s += slowest->inner_s - g.inner_s;  // each step ends with the slowest group's (the loss all-reduce)
      c.ranks[r] = p;
    }
  c.predicted = slowest->plan.predicted;
  // The collectives of rank 0's group (a run measures its engine's collectives there).
  const PlanPrediction& first = l.groups[0].plan.predicted;
  c.predicted.ag_s = first.ag_s;
  c.predicted.rs_s = first.rs_s;
  c.predicted.ar_s = first.ar_s;
  c.predicted.embed_ag_s = first.embed_ag_s;
  c.predicted.embed_rs_s = first.embed_rs_s;
  c.predicted.embed_ar_s = first.embed_ar_s;
  c.predicted.even_shares = false;
  c.predicted.tokens_per_s = (double)l.global_batch * profile.seq_len / slowest->inner_s;
  double peak = 0;
  for (const RankInfo& r : profile.ranks) peak += profile.device(r.device).peak_flops;
  c.predicted.mfu = peak > 0 ? (double)l.global_batch * CostModel(profile).flops_per_sample() / slowest->inner_s / peak : 0;
  return c;
}

std::string local_plan_table(const LocalPlan& l) {
  const int H = l.sync.every;
  std::string out = str("local updates (--sync local:", H, "): ", l.groups.size(), " groups, each planned by ",
                        l.planner, " as a cluster of its own (full sharding inside) on its rows of every global "
                        "batch; outer step every ", H, " inner steps\n");
  char line[256];
  std::snprintf(line, sizeof line, "outer step %.2f ms: inside the groups up to %.2f ms (all-reduce + broadcast of "
                "4P fp32 bytes), across groups %.2f ms (the leaders' bf16 all-gather); period %.1f ms\n",
                1e3 * l.outer_s, 1e3 * (l.outer_s - l.cross_s), 1e3 * l.cross_s, 1e3 * l.period_s);
  out += line;
  std::snprintf(line, sizeof line, "%5s %-12s %6s %14s %14s %10s %8s\n", "group", "ranks", "rows", "inner step ms",
                "outer comm ms", "wait ms", "wait %");
  out += line;
  for (const SyncGroupPrediction& g : l.groups) {
    std::snprintf(line, sizeof line, "%5d %-12s %6lld %14.2f %14.2f %10.2f %7.1f%%\n", g.group,
                  ranks_text(g.ranks).c_str(), (long long)g.batch, 1e3 * g.inner_s, 1e3 * (g.exchange_s + l.cross_s),
                  1e3 * g.wait_s, l.period_s > 0 ? 100 * g.wait_s / l.period_s : 0.0);
    out += line;
  }
  return out;
}

}  // namespace gpumix::dist
