#include "tests/dist/test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "dist/plan/memory_model.h"

namespace gpumix::dist::testing {

GPTConfig tiny_model(int L) {
  GPTConfig g;
  g.name = "tiny";
  g.L = L;
  g.NH = 2;
  g.C = 64;
  g.V = 256;
  g.T = 32;
  return g;
}

DeviceProfile fake_device(const GPTConfig& model, int seq_len, const FakeDevice& f) {
  DeviceProfile d;
  d.name = f.name;
  d.memory_bytes = f.memory_bytes;
  d.work_bytes = 64 * 1024;
  d.optimizer_s_per_param = f.opt_s_per_param;
  d.microbatch_overhead_s = f.fixed_s * 0.5;
  d.host_bandwidth_Bps = f.host_bandwidth;
  d.peak_flops = 1e12;
  for (int m : {1, 2, 4, 8}) {
    MicroBatchSample s;
    s.m = m;
    s.block_fwd_s = f.fixed_s + m * f.sec_per_sample;
    s.block_bwd_s = 2 * s.block_fwd_s;
    s.block_act_bytes = MemoryModel::analytic_block_act_bytes(model, seq_len, m, 2);
    s.head_s = 0.5 * f.fixed_s + m * f.sec_per_sample * 0.7;
    s.head_bytes = MemoryModel::analytic_head_bytes(model, seq_len, m, 2);
    d.samples.push_back(s);
  }
  return d;
}

Profile fake_profile(const GPTConfig& model, int seq_len, const std::vector<FakeDevice>& devices,
                     const std::vector<int>& ranks, double bandwidth, double latency, double uneven,
                     const std::vector<int>& nodes) {
  Profile p;
  p.model = model;
  p.seq_len = seq_len;
  p.dtype = DType::bf16;  // as the activation sizes below
  for (const FakeDevice& f : devices) p.devices.push_back(fake_device(model, seq_len, f));
  for (size_t i = 0; i < ranks.size(); i++)
    p.ranks.push_back({devices[ranks[i]].name, nodes.empty() ? 0 : nodes[i], ""});
  for (CollectiveProfile* c : {&p.comm.all_gather, &p.comm.reduce_scatter}) {
    c->intra_node = {latency, bandwidth};
    c->inter_node = {latency * 5, bandwidth / 8};
    c->uneven_factor = uneven;
  }
  p.validate();
  return p;
}

Profile random_profile(std::mt19937& rng, int max_ranks) {
  std::uniform_int_distribution<int> n_dist(1, max_ranks), types(1, 3), L_dist(1, 3);
  std::uniform_real_distribution<double> u(0, 1);
  const GPTConfig model = tiny_model(L_dist(rng));
  const int seq = 32;
  const int ntypes = types(rng);
  std::vector<FakeDevice> devs;
  for (int t = 0; t < ntypes; t++) {
    FakeDevice f;
    f.name = "dev" + std::to_string(t);
    f.memory_bytes = (0.5 + 3.0 * u(rng)) * 1024 * 1024;  // state alone is ~1.9 MB
    f.sec_per_sample = 1e-4 * (1 + 9 * u(rng));
    f.fixed_s = 1e-4 * (0.2 + 2 * u(rng));
    f.opt_s_per_param = u(rng) < 0.3 ? 0 : 1e-9 * (1 + 20 * u(rng));
    f.host_bandwidth = u(rng) < 0.4 ? 1e9 * (0.5 + 4 * u(rng)) : 0;
    devs.push_back(f);
  }
  const int N = n_dist(rng);
  std::vector<int> ranks, nodes;
  std::uniform_int_distribution<int> pick(0, ntypes - 1), node(0, 1);
  const bool two_nodes = u(rng) < 0.3;
  for (int i = 0; i < N; i++) {
    ranks.push_back(pick(rng));
    nodes.push_back(two_nodes ? node(rng) : 0);
  }
  return fake_profile(model, seq, devs, ranks, 1e8 * (1 + 50 * u(rng)), 1e-5 * (1 + 10 * u(rng)),
                      1.0 + 0.5 * u(rng), nodes);
}

Exhaustive exhaustive_search(const Profile& p, int64_t B, int grid, bool allow_offload) {
  const CostModel cost(p, {}, B);
  const int N = p.num_ranks();
  const double per_share = cost.memory().state_bytes_total();
  const double phi = 1.0 + cost.memory().params().fragmentation;
  Exhaustive ex;
  ex.step = std::numeric_limits<double>::infinity();
  std::vector<RankWork> c(N);
  std::vector<bool> in(N);

  auto max_share = [&](int i) {
    const MemoryTerms w = cost.memory_terms(i, c[i].batch, c[i].micro_batch, 0, c[i].offload);
    return cost.memory().max_share(w, cost.capacity(i));
  };
  auto try_plan = [&](std::vector<RankWork>& cand) {
    for (int i = 0; i < N; i++) {
      if (!cand[i].takes_part()) continue;
      if (cost.memory_terms(i, cand[i]).total() > cost.capacity(i)) return;
    }
    ex.configs++;
    const double s = cost.evaluate(cand).step;
    if (s < ex.step) {
      ex.step = s;
      ex.best = cand;
      ex.found = true;
    }
  };
  auto shares = [&]() {
    std::vector<double> cap(N, 0), opt(N, 0);
    int members = 0;
    for (int i = 0; i < N; i++) {
      if (!in[i]) continue;
      members++;
      cap[i] = max_share(i);
      if (cap[i] < 0) return;  // this rank cannot even take part
      opt[i] = cost.optimizer_time(i, 1.0);
    }
    if (members == 0) return;
    // Exactly even shares.
    std::vector<RankWork> cand = c;
    bool ok = true;
    for (int i = 0; i < N; i++) {
      cand[i].share = in[i] ? 1.0 / members : 0;
      if (in[i] && cand[i].share > cap[i]) ok = false;
    }
    if (ok) try_plan(cand);
    // The grid: each unit to the rank whose optimizer time grows least (min-max is
    // solved exactly by this greedy on a grid), within its memory.
    std::vector<int> units(N, 0);
    for (int u = 0; u < grid; u++) {
      int bestk = -1;
      double bestv = 0;
      for (int i = 0; i < N; i++) {
        if (!in[i] || (units[i] + 1.0) / grid > cap[i] * (1 + 1e-12)) continue;
        const double v = (units[i] + 1.0) / grid * opt[i];
        if (bestk < 0 || v < bestv) {
          bestk = i;
          bestv = v;
        }
      }
      if (bestk < 0) return;
      units[bestk]++;
    }
    cand = c;
    for (int i = 0; i < N; i++) cand[i].share = (double)units[i] / grid;
    // Keep the memory check honest: r exactly as on the grid, capacities exact.
    (void)per_share;
    (void)phi;
    try_plan(cand);
  };
  std::function<void(int, int64_t)> rec = [&](int i, int64_t left) {
    if (i == N) {
      if (left == 0) shares();
      return;
    }
    const int64_t lo = i == N - 1 ? left : 0, hi = left;
    const DeviceProfile& d = p.rank_device(i);
    const bool off_ok = allow_offload && d.kind == "gpu" && d.host_bandwidth_Bps > 0;
    for (int64_t b = lo; b <= hi; b++) {
      c[i].batch = b;
      if (b == 0) {
        c[i].micro_batch = 0;
        c[i].offload = false;
        for (int part = 0; part <= 1; part++) {
          in[i] = part;
          rec(i + 1, left);
        }
        continue;
      }
      in[i] = true;
      for (int64_t m = 1; m <= b; m++)
        for (int off = 0; off <= (off_ok ? 1 : 0); off++) {
          c[i].micro_batch = m;
          c[i].offload = off;
          rec(i + 1, left - b);
        }
    }
  };
  rec(0, B);
  return ex;
}

}  // namespace gpumix::dist::testing
