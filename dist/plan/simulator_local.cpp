// Local updates in the simulator (dist/plan/simulator.h: the model, term by term).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "dist/comm/collective_cost.h"
#include "dist/plan/simulator.h"

namespace gpumix::dist {

using nlohmann::json;

namespace {

constexpr int kSplitRounds = 4;  // re-splits of the rows by the groups' planned speeds

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

std::string ranks_text(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? std::to_string(ranks[0])
                           : std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
}

}  // namespace

LocalSimulation simulate_local(const Profile& profile, int64_t B, const LocalSync& sync,
                               const PlannerOptions& opts) {
  GPUMIX_CHECK_INPUT(sync.local, "simulate_local needs --sync local:H, got every-step");
  const int N = profile.num_ranks();
  check_sync_groups(sync, N, "this cluster", "describe more devices in the cluster file");
  LocalSimulation l;
  l.sync = sync;
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
    l.cross_s = ring_time(link, G, 2 * P * G);
  }
  double exchange = 0;
  for (const SyncGroupPrediction& g : l.groups) exchange = std::max(exchange, g.exchange_s);
  l.outer_s = exchange + l.cross_s;
  const int H = sync.every;
  l.cross_bytes_per_leader = 2 * P * (G - 1) / H;
  l.cross_bytes = G * l.cross_bytes_per_leader;

  // Each group's plan, once per distinct group (a large cluster has few kinds).
  std::vector<Profile> profiles;
  for (const SyncGroupPrediction& g : l.groups) profiles.push_back(group_profile(profile, g.ranks));
  std::map<std::string, std::shared_ptr<const GroupPlan>> plans;
  PlannerOptions inside = opts;
  inside.group_size = 0;  // full sharding inside a group, as the engine's groups shard
  auto plan_of = [&](size_t g, int64_t rows) {
    std::shared_ptr<const GroupPlan>& slot = plans[group_key(profiles[g], rows)];
    if (!slot) {
      auto made = std::make_shared<GroupPlan>();
      try {
        made->plan = plan_gpumix(profiles[g], rows, inside);
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

  // First split: the ranks' compute rates (samples/s of a whole step at one micro-batch size).
  const int64_t m = std::clamp<int64_t>(B / N, 1, 8);
  std::map<std::string, double> rate_of;
  for (const DeviceProfile& d : profile.devices) {
    const MicroBatchSample s = d.at(m);
    rate_of[d.name] = (double)m / (profile.model.L * (s.block_fwd_s + s.block_bwd_s) + s.head_s);
  }
  std::vector<double> weight(G, 0);
  for (int g = 0; g < G; g++)
    for (int r : l.groups[g].ranks) weight[g] += rate_of[profile.ranks[r].device];
  std::vector<int64_t> rows = split_rows(B, weight);
  double period = period_of(rows);
  // Again by the plans' own speeds (a few rounds; a group's communication and memory make its
  // speed depend on its rows), keeping the split with the shortest period.
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
  for (SyncGroupPrediction& g : l.groups) g.wait_s = H * (slowest - g.inner_s);
  l.period_s = H * slowest + l.outer_s;
  l.step_s = slowest + l.outer_s / H;  // period / H, and with one group its inner step to the bit
  double peak = 0;
  for (const RankInfo& r : profile.ranks) peak += profile.device(r.device).peak_flops;
  const CostModel cost(profile);
  l.tokens_per_s = (double)B * profile.seq_len / l.step_s;
  l.mfu = peak > 0 ? (double)B * cost.flops_per_sample() / l.step_s / peak : 0;
  return l;
}

double every_step_cross_bytes(const Plan& p, const std::vector<int>& group_of_rank) {
  const GPTConfig& m = p.model;
  const double grad = MemoryParams{}.grad_accum_bytes;
  // One step's collectives, in bytes of the unit each moves.
  const double gathers = (double)dtype_size(p.dtype) * (2.0 * m.L * m.block_params() + m.embed_params() + m.head_params());
  const double reduces = grad * (double)m.total_params();
  const int N = (int)p.ranks.size();
  const int g = p.sharding.hybrid() ? p.sharding.group_size : N;
  double bytes = 0;
  for (int first = 0; first < N; first += g) {  // within each replica (the one group when full)
    std::set<int> groups;
    for (int r = first; r < first + g; r++)
      if (p.ranks[r].work.takes_part()) groups.insert(group_of_rank[r]);
    if (!groups.empty()) bytes += (double)(groups.size() - 1) * (gathers + reduces);
  }
  if (p.sharding.hybrid())
    for (int k = 0; k < g; k++) {  // the replicas' all-reduce of position k's slice
      std::set<int> groups;
      for (int r = k; r < N; r += g) groups.insert(group_of_rank[r]);
      bytes += 2.0 * (double)(groups.size() - 1) * p.ranks[k].work.share * reduces;
    }
  return bytes;
}

void set_every_step_cross_bytes(LocalSimulation& l, const Plan& every) {
  std::vector<int> group_of_rank(every.ranks.size(), 0);
  for (const SyncGroupPrediction& g : l.groups)
    for (int r : g.ranks) group_of_rank[r] = g.group;
  l.every_step_cross_bytes = every_step_cross_bytes(every, group_of_rank);
}

static std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

static std::string bytes_text(double b) {
  const char* unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int k = 0;
  while (b >= 1000 && k < 5) {
    b /= 1000;
    k++;
  }
  return fmt(k == 0 ? "%.0f " : "%.3g ", b) + unit[k];
}

// "8 x H100" or "4 x H100 + 4 x A100-80GB": a group's devices, in rank order.
static std::string devices_text(const Plan& p) {
  std::string out;
  for (size_t i = 0; i < p.ranks.size();) {
    size_t j = i;
    while (j < p.ranks.size() && p.ranks[j].device == p.ranks[i].device) j++;
    out += (out.empty() ? "" : " + ") + std::to_string(j - i) + " x " + p.ranks[i].device;
    i = j;
  }
  return out;
}

std::string local_table(const LocalSimulation& l, const Simulation& s) {
  const int G = (int)l.groups.size();
  const int H = l.sync.every;
  std::string out = "\nlocal updates (--sync local:" + std::to_string(H) + "): " + std::to_string(G) + " groups (" +
                    (l.sync.groups > 0 ? "--groups " + std::to_string(l.sync.groups) + ", consecutive ranks"
                                       : std::string("one per node")) +
                    "), each an every-step run (full sharding inside), outer step every " + std::to_string(H) +
                    " inner steps; P = " + std::to_string(l.params) + " parameters\n";
  if (!l.planned()) return out + "no prediction: " + l.error + "\n";
  out += "outer step " + fmt("%.3f s", l.outer_s) + ": inside the groups " + fmt("%.3f s", l.outer_s - l.cross_s) +
         " (all-reduce + broadcast of 4P fp32 bytes), across groups " + fmt("%.3f s", l.cross_s) +
         " (the leaders' bf16 all-gather: 2P(G-1) = " + bytes_text(l.cross_bytes_per_leader * H) +
         " received per leader)\n";
  out += "step " + fmt("%.4f s", l.step_s) + " (= (" + std::to_string(H) + " x slowest inner step + outer step) / " +
         std::to_string(H) + "), " + fmt("%.0f tokens/s", l.tokens_per_s) + ", MFU " + fmt("%.1f%%", 100 * l.mfu) +
         "; across groups per step " + bytes_text(l.cross_bytes_per_leader) + " per leader, " +
         bytes_text(l.cross_bytes) + " in all\n";
  double best = 0;
  for (const SimEntry& e : s.entries)
    if (e.planner == "gpumix" && e.planned && e.plan.fits()) best = e.plan.predicted.step_s;
  if (best > 0)
    out += "every-step (gpumix above): step " + fmt("%.4f s", best) + ", across these groups per step " +
           bytes_text(l.every_step_cross_bytes) + " in all (hierarchical forms); local:" + std::to_string(H) +
           " is " + fmt("%.2fx", best / l.step_s) + " its speed\n";
  // Groups of the same devices and rows share a row.
  char line[512];
  std::snprintf(line, sizeof line, "%7s %6s %-28s %7s %12s %12s %10s %12s\n", "groups", "first", "devices", "batch",
                "inner (s)", "tokens/s", "wait (s)", "exchange (s)");
  out += line;
  std::vector<bool> shown(G, false);
  for (int g = 0; g < G; g++) {
    if (shown[g]) continue;
    const std::string devices = devices_text(l.groups[g].plan);
    int count = 0;
    for (int h = g; h < G; h++)
      if (!shown[h] && l.groups[h].batch == l.groups[g].batch && devices_text(l.groups[h].plan) == devices &&
          l.groups[h].inner_s == l.groups[g].inner_s && l.groups[h].exchange_s == l.groups[g].exchange_s) {
        shown[h] = true;
        count++;
      }
    const SyncGroupPrediction& lg = l.groups[g];
    std::snprintf(line, sizeof line, "%7d %6d %-28s %7lld %12.4f %12.0f %10.3f %12.3f\n", count, lg.group,
                  devices.substr(0, 28).c_str(), (long long)lg.batch, lg.inner_s,
                  (double)lg.batch * s.seq_len / lg.inner_s, lg.wait_s, lg.exchange_s);
    out += line;
  }
  return out;
}

json local_to_json(const LocalSimulation& l) {
  json groups = json::array();
  for (const SyncGroupPrediction& g : l.groups) {
    json j{{"group", g.group}, {"ranks", g.ranks}, {"batch", g.batch}, {"planned", g.planned}};
    if (!g.planned) {
      if (!g.error.empty()) j["error"] = g.error;
    } else {
      j["inner_step_s"] = g.inner_s;
      j["exchange_s"] = g.exchange_s;
      j["wait_s"] = g.wait_s;
      json batches = json::array(), shares = json::array();  // its ranks' (the group's plan)
      for (const RankPlan& r : g.plan.ranks) {
        batches.push_back(r.work.batch);
        shares.push_back(r.work.share);
      }
      j["rank_batches"] = batches;
      j["rank_shares"] = shares;
    }
    groups.push_back(j);
  }
  json j{{"sync", "local:" + std::to_string(l.sync.every)}, {"groups", groups}, {"params", l.params}};
  if (l.sync.groups > 0) j["groups_given"] = l.sync.groups;
  if (!l.planned()) {
    j["error"] = l.error;
    return j;
  }
  j["step_s"] = l.step_s;
  j["tokens_per_s"] = l.tokens_per_s;
  j["mfu"] = l.mfu;
  j["period_s"] = l.period_s;
  j["outer_s"] = l.outer_s;
  j["cross_group_s"] = l.cross_s;
  j["cross_group_bytes_per_step"] = l.cross_bytes;
  j["cross_group_bytes_per_step_per_leader"] = l.cross_bytes_per_leader;
  j["every_step_cross_group_bytes_per_step"] = l.every_step_cross_bytes;
  return j;
}

}  // namespace gpumix::dist
