#include "dist/plan/simulator.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "dist/plan/compute_dtype.h"
#include "dist/plan/device_catalog.h"
#include "dist/plan/memory_model.h"

namespace gpumix::dist {

using nlohmann::json;

static DeviceProfile synthesize_device(const ClusterDevice& cd, const GPTConfig& g, int T, DType dtype) {
  const DeviceSpec& spec = device_spec(cd.type);
  DeviceProfile d;
  d.name = cd.label();
  d.kind = spec.kind;
  d.memory_bytes = cd.memory_bytes > 0 ? cd.memory_bytes
                                       : spec.memory_gib * 1024.0 * 1024 * 1024 * kUsableMemoryFraction;
  const bool gpu = spec.kind == "gpu";
  d.work_bytes = gpu ? 1024.0 * 1024 * 1024 : 256.0 * 1024 * 1024;
  d.optimizer_s_per_param = 30.0 / (0.7 * spec.memory_bandwidth_GBps * 1e9) * cd.slowdown;
  d.microbatch_overhead_s = (gpu ? 30e-6 : 100e-6) * cd.slowdown;
  d.host_bandwidth_Bps = spec.host_bandwidth_GBps * 1e9;
  d.peak_flops = spec.peak_tflops * 1e12 / cd.slowdown;
  const double launch = gpu ? 60e-6 : 20e-6;  // per block pass: a dozen kernels
  const double lm_flops_token = g.head_forward_flops_per_token();
  const double block_flops_token = (g.forward_flops_per_token(T) - lm_flops_token) / g.L;
  for (int m = 1; m <= 512; m *= 2) {
    const double tokens = (double)m * T;
    const double rate = spec.peak_tflops * 1e12 * spec.efficiency * tokens / (tokens + kEfficiencyHalfTokens);
    MicroBatchSample s;
    s.m = m;
    const double fwd = tokens * block_flops_token / rate;
    s.block_fwd_s = (launch + fwd) * cd.slowdown;
    s.block_bwd_s = (2 * launch + 3 * fwd) * cd.slowdown;
    s.head_s = (launch + 3 * tokens * lm_flops_token / rate) * cd.slowdown;
    s.block_act_bytes = MemoryModel::analytic_block_act_bytes(g, T, m, (int)dtype_size(dtype));
    s.head_bytes = MemoryModel::analytic_head_bytes(g, T, m, (int)dtype_size(dtype));
    d.samples.push_back(s);
  }
  return d;
}

Profile synthesize_profile(const Cluster& cluster, const GPTConfig& model, int seq_len,
                           const std::vector<Profile>& measured, std::optional<DType> dtype) {
  cluster.validate();
  Profile p;
  p.model = model;
  p.seq_len = seq_len;
  ComputeDtypeSources sources;  // as a run on these devices would choose
  sources.flag = dtype;
  for (const Cluster::Rank& r : cluster.ranks()) sources.native.push_back(catalog_native_bf16(r.device.type));
  p.dtype = choose_compute_dtype(sources).dtype;
  for (const Profile& mp : measured)
    if (mp.dtype != p.dtype)
      throw FormatError(str("a measured profile (of ", mp.devices[0].name, ") computes in ", dtype_name(mp.dtype),
                            " but this simulation in ", dtype_name(p.dtype), "; pass --dtype ",
                            dtype_name(mp.dtype), ", or measure it again with `gpumix profile --dtype ",
                            dtype_name(p.dtype), "`"));
  for (const Cluster::Rank& r : cluster.ranks()) {
    const std::string label = r.device.label();
    p.ranks.push_back({label, r.node, ""});  // a described cluster names no host
    bool have = false;
    for (const DeviceProfile& d : p.devices) have |= d.name == label;
    if (have) continue;
    const DeviceProfile* found = nullptr;
    for (const Profile& mp : measured)
      for (const DeviceProfile& d : mp.devices)
        if (d.name == label && !found) found = &d;
    p.devices.push_back(found ? *found : synthesize_device(r.device, model, seq_len, p.dtype));
  }
  for (CollectiveProfile* c : {&p.comm.all_gather, &p.comm.reduce_scatter}) {
    c->intra_node = {cluster.intra_node.latency_us * 1e-6, cluster.intra_node.bandwidth_GBps * 1e9};
    c->inter_node = {cluster.inter_node.latency_us * 1e-6, cluster.inter_node.bandwidth_GBps * 1e9};
    c->uneven_factor = cluster.uneven_factor;
  }
  if (p.num_ranks() == 1)
    for (CollectiveProfile* c : {&p.comm.all_gather, &p.comm.reduce_scatter}) c->intra_node = {0, 1e12};
  p.validate();
  return p;
}

Simulation simulate(const Profile& profile, const std::string& cluster_name, int64_t B,
                    const PlannerOptions& opts) {
  Simulation s;
  s.cluster = cluster_name;
  s.ranks = profile.num_ranks();
  s.model = profile.model;
  s.seq_len = profile.seq_len;
  s.dtype = profile.dtype;
  s.global_batch = B;
  for (const std::string& name : planner_names()) {
    SimEntry e;
    e.planner = name;
    try {
      e.plan = run_planner(name, profile, B, opts);
      e.planned = true;
    } catch (const InfeasiblePlan& err) {
      e.error = err.what();
    }
    s.entries.push_back(e);
    const std::vector<int> sizes = hybrid_group_sizes(profile);
    if (name != "gpumix" || opts.group_size >= 0 || sizes.empty()) continue;
    // Both ways beside the choice (on clusters, where hybrid is tried): full sharding, and
    // the best hybrid group size.
    SimEntry full, hybrid;
    full.planner = "gpumix-full";
    hybrid.planner = "gpumix-hybrid";
    try {
      PlannerOptions o = opts;
      o.group_size = 0;
      full.plan = plan_gpumix(profile, B, o);
      full.planned = true;
    } catch (const InfeasiblePlan& err) {
      full.error = err.what();
    }
    for (int g : sizes) {
      try {
        Plan h = plan_hybrid(profile, B, g, opts);
        if (!hybrid.planned || (h.fits() && h.predicted.step_s < hybrid.plan.predicted.step_s)) {
          hybrid.plan = std::move(h);
          hybrid.planned = true;
        }
      } catch (const InfeasiblePlan& err) {
        if (!hybrid.planned) hybrid.error = err.what();
      }
    }
    s.entries.push_back(full);
    s.entries.push_back(hybrid);
  }
  return s;
}

static std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string simulation_table(const Simulation& s) {
  std::string out = "cluster " + s.cluster + " (" + std::to_string(s.ranks) + " ranks), model " + s.model.name +
                    ", T = " + std::to_string(s.seq_len) + ", " + dtype_name(s.dtype) + ", global batch " +
                    std::to_string(s.global_batch) + "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-13s %-22s %10s %12s %7s %8s %7s %7s %6s  %s\n", "planner", "sharding", "step (s)",
                "tokens/s", "MFU", "busy", "comm", "idle", "left", "memory");
  out += line;
  double best = 0;
  for (const SimEntry& e : s.entries)
    if (e.planned && e.plan.fits()) best = std::max(best, e.plan.predicted.tokens_per_s);
  for (const SimEntry& e : s.entries) {
    if (!e.planned) {
      std::snprintf(line, sizeof line, "%-13s %-22s %10s %12s %7s %8s %7s %7s %6s  %s\n", e.planner.c_str(), "-", "-",
                    "-", "-", "-", "-", "-", "-", "no plan fits");
      out += line;
      continue;
    }
    const Plan& p = e.plan;
    double busy = 0, comm = 0, idle = 0;
    int left = 0, active = 0;
    for (const RankPlan& r : p.ranks) {
      if (r.left_out()) {
        left++;
        continue;
      }
      active++;
      busy += r.busy_s;
      comm += r.comm_s;
      idle += r.idle_s;
    }
    const double step = p.predicted.step_s * std::max(active, 1);
    int oom = 0;
    for (const RankPlan& r : p.ranks) oom += !r.fits();
    const std::string mem = p.fits() ? "fits" : "OOM on " + std::to_string(oom) + " rank" + (oom > 1 ? "s" : "");
    const std::string speed = p.fits() && best > 0 ? fmt(" (%.2fx of best)", p.predicted.tokens_per_s / best) : "";
    std::snprintf(line, sizeof line, "%-13s %-22s %10.3f %12.0f %6.1f%% %7.1f%% %6.1f%% %6.1f%% %6d  %s%s\n",
                  e.planner.c_str(), p.sharding.describe().c_str(), p.predicted.step_s, p.predicted.tokens_per_s, 100 * p.predicted.mfu,
                  100 * busy / step, 100 * comm / step, 100 * idle / step, left, mem.c_str(), speed.c_str());
    out += line;
  }
  return out;
}

std::string plan_table(const Plan& p) {
  std::string out = "plan (" + p.planner + "): " + p.model.name + ", T = " + std::to_string(p.seq_len) + ", " +
                    dtype_name(p.dtype) + ", global batch " + std::to_string(p.global_batch) + ", " +
                    p.sharding.describe() + " sharding" +
                    (p.sharding.hybrid() ? " (" + std::to_string(p.ranks.size() / p.sharding.group_size) +
                                               " replicas; each rank's share is of its group's state)"
                                         : std::string()) + "\n";
  char line[640];
  // The node column: host names where the profile knew them (a run), else numbers.
  bool named = false;
  size_t node_width = 4;
  for (const RankPlan& r : p.ranks) {
    named = named || !r.node_name.empty();
    node_width = std::max(node_width, std::min<size_t>(24, r.node_name.size()));
  }
  auto node_of = [&](const RankPlan& r) {
    const std::string s = named && !r.node_name.empty() ? r.node_name.substr(0, 24) : std::to_string(r.node);
    return std::string(node_width > s.size() ? node_width - s.size() : 0, ' ') + s;
  };
  std::snprintf(line, sizeof line, "%4s %-26s %s %6s %5s %5s %8s %4s %10s %10s %10s %10s %10s %10s %9s %9s\n",
                "rank", "device", (std::string(node_width - 4, ' ') + "node").c_str(), "batch", "micro", "n", "share", "offl", "state", "gathered", "activ",
                "buffers", "total", "capacity", "block ms", "busy %");
  out += line;
  const double MiB = 1024.0 * 1024;
  for (const RankPlan& r : p.ranks) {
    std::snprintf(line, sizeof line,
                  "%4d %-26s %s %6lld %5lld %5lld %8.5f %4s %9.0fM %9.0fM %9.0fM %9.0fM %9.0fM %9.0fM %9.2f %8.1f%s\n",
                  r.rank, r.device.substr(0, 26).c_str(), node_of(r).c_str(), (long long)r.work.batch,
                  (long long)r.work.micro_batch, (long long)r.work.num_micro_batches(), r.work.share,
                  r.work.offload ? "yes" : "no", r.memory.state / MiB,
                  r.memory.gathered / MiB, r.memory.activations() / MiB, r.memory.buffers() / MiB,
                  r.memory.total() / MiB, r.capacity / MiB, 1e3 * r.block_s,
                  p.predicted.step_s > 0 ? 100 * r.busy_s / p.predicted.step_s : 0.0,
                  r.left_out() ? "  (left out)" : r.fits() ? "" : "  OOM");
    out += line;
  }
  const PlanPrediction& pr = p.predicted;
  std::snprintf(line, sizeof line,
                "step %.4f s = L x block %.2f ms + head %.2f ms + optimizer %.2f ms; AG %.2f ms, RS %.2f ms%s per "
                "block (%s shares); %.0f tokens/s, MFU %.1f%%\n",
                pr.step_s, 1e3 * pr.block_s, 1e3 * pr.head_s, 1e3 * pr.optimizer_s, 1e3 * pr.ag_s, 1e3 * pr.rs_s,
                p.sharding.hybrid() ? fmt(", AR across groups %.2f ms", 1e3 * pr.ar_s).c_str() : "",
                pr.even_shares ? "even" : "uneven", pr.tokens_per_s, 100 * pr.mfu);
  out += line;
  if (!p.fits()) out += "OUT OF MEMORY: " + p.oom_message() + "\n";
  return out;
}

json simulation_to_json(const Simulation& s) {
  json entries = json::array();
  for (const SimEntry& e : s.entries) {
    json j{{"planner", e.planner}, {"planned", e.planned}};
    if (!e.planned) {
      j["error"] = e.error;
    } else {
      j["fits"] = e.plan.fits();
      j["step_s"] = e.plan.predicted.step_s;
      j["tokens_per_s"] = e.plan.predicted.tokens_per_s;
      j["mfu"] = e.plan.predicted.mfu;
      if (!e.plan.fits()) j["oom"] = e.plan.oom_message();
      j["plan"] = plan_to_json(e.plan);
    }
    entries.push_back(j);
  }
  return json{{"cluster", s.cluster},       {"ranks", s.ranks},
              {"model", config_to_json(s.model)}, {"seq_len", s.seq_len}, {"dtype", dtype_name(s.dtype)},
              {"global_batch", s.global_batch},   {"planners", entries}};
}

}  // namespace gpumix::dist
