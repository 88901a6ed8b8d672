// Local updates in the simulator (dist/plan/simulator.h: the model, term by term).
#include <cstdio>
#include <set>

#include "dist/plan/simulator.h"

namespace gpumix::dist {

using nlohmann::json;

LocalSimulation simulate_local(const Profile& profile, int64_t B, const LocalSync& sync,
                               const PlannerOptions& opts) {
  LocalSimulation l;
  static_cast<LocalPlan&>(l) = plan_local(profile, B, sync, "gpumix", opts);
  const int G = (int)l.groups.size();
  // Flat: each leader sends its 2P bf16 bytes to the G - 1 others. Sliced: each rank of a
  // group of n its 2 x 2 (P / n) (G - 1) / G, every rank of the run G n of them.
  const double P = (double)l.params;
  const double n = l.groups.empty() ? 1 : (double)l.groups[0].ranks.size();
  l.cross_bytes_per_leader = (l.sliced ? 4 * (P / n) * (G - 1) / G : 2 * P * (G - 1)) / sync.every;
  l.cross_bytes = (l.sliced ? G * n : G) * l.cross_bytes_per_leader;
  if (!l.planned()) return l;
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
  if (l.sliced)
    out += "outer step " + fmt("%.3f s", l.outer_s) + ", all across groups (sliced: every group the same layout; "
           "each rank's reduce-scatter and all-gather of its own slices with its peers in bf16: 4(P/n)(G-1)/G = " +
           bytes_text(l.cross_bytes_per_leader * H) + " sent per rank)\n";
  else
    out += "outer step " + fmt("%.3f s", l.outer_s) + ": inside the groups " + fmt("%.3f s", l.outer_s - l.cross_s) +
           " (all-reduce + broadcast of 4P fp32 bytes), across groups " + fmt("%.3f s", l.cross_s) +
           " (the leaders' bf16 all-gather: 2P(G-1) = " + bytes_text(l.cross_bytes_per_leader * H) +
           " sent per leader)\n";
  out += "step " + fmt("%.4f s", l.step_s) + " (= (" + std::to_string(H) + " x slowest inner step + outer step) / " +
         std::to_string(H) + "), " + fmt("%.0f tokens/s", l.tokens_per_s) + ", MFU " + fmt("%.1f%%", 100 * l.mfu) +
         "; across groups per step " + bytes_text(l.cross_bytes_per_leader) + (l.sliced ? " per rank, " : " per leader, ") +
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
  j["exchange"] = l.sliced ? "sliced" : "flat";
  j["cross_group_s"] = l.cross_s;
  j["cross_group_bytes_per_step"] = l.cross_bytes;
  j["cross_group_bytes_per_step_per_leader"] = l.cross_bytes_per_leader;
  j["every_step_cross_group_bytes_per_step"] = l.every_step_cross_bytes;
  return j;
}

}  // namespace gpumix::dist
