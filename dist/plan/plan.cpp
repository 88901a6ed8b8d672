#include "dist/plan/plan.h"

#include <cmath>
#include <cstdio>

namespace gpumix::dist {

using nlohmann::json;

bool Plan::fits() const {
  for (const RankPlan& r : ranks)
    if (!r.fits()) return false;
  return true;
}

std::string Plan::oom_message() const {
  std::string msg;
  for (const RankPlan& r : ranks) {
    if (r.fits()) continue;
    const MemoryTerms& m = r.memory;
    msg += (msg.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r.rank) + " (" +
           r.device + ", " + format_bytes(r.capacity) + ") needs " + format_bytes(m.total()) +
           " (state " + format_bytes(m.state) + ", gathered " + format_bytes(m.gathered) +
           ", activations " + format_bytes(m.activations()) + ", buffers " +
           format_bytes(m.buffers()) + "): " + format_bytes(m.total() - r.capacity) + " short";
  }
  return msg;
}

Work Plan::work() const {
  Work w;
  for (const RankPlan& r : ranks) w.ranks.push_back(r.work);
  w.sharding = sharding;
  return w;
}

Plan make_plan(const CostModel& cost, const std::string& planner, int64_t global_batch,
               const std::vector<RankWork>& given) {
  const Profile& prof = cost.profile();
  Plan p;
  p.planner = planner;
  p.model = prof.model;
  p.seq_len = prof.seq_len;
  p.dtype = prof.dtype;
  p.global_batch = global_batch;
  p.sharding = cost.sharding();
  // The models see m only through min(m, b), and neither m nor offload where b = 0.
  std::vector<RankWork> work = given;
  for (RankWork& w : work) {
    w.micro_batch = w.batch > 0 ? std::min(w.micro_batch, w.batch) : 0;
    w.offload = w.batch > 0 && w.offload;
  }
  const CostModel::Step step = cost.evaluate(work);
  double peak = 0;
  for (size_t i = 0; i < work.size(); i++) {
    const RankWork& w = work[i];
    const RankTimes& t = step.ranks[i];
    RankPlan r;
    r.rank = (int)i;
    r.device = prof.ranks[i].device;
    r.node = prof.ranks[i].node;
    r.node_name = prof.ranks[i].node_name;
    r.work = w;
    r.memory = w.takes_part() ? cost.memory_terms((int)i, w) : MemoryTerms{};
    r.capacity = cost.capacity((int)i);
    r.block_s = t.block;
    r.fwd_s = t.fwd;
    r.bwd_s = t.bwd;
    r.head_s = t.head_compute;
    r.optimizer_s = t.optimizer;
    if (w.takes_part()) {
      const int L = prof.model.L;
      r.busy_s = L * (t.fwd + t.bwd) + t.head_compute + t.optimizer;
      // Waiting on transfers: the part of each phase that its collectives (or offload
      // copies) hold beyond the rank's compute.
      r.comm_s = std::max(0.0, L * (t.block - t.fwd - t.bwd) + (t.head - t.head_compute));
    }
    r.idle_s = std::max(0.0, step.step - r.busy_s - r.comm_s);
    peak += cost.table((int)i).device->peak_flops;
    p.ranks.push_back(r);
  }
  if (prof.num_ranks() > 1) p.comm = prof.comm;
  PlanPrediction& pr = p.predicted;
  pr.step_s = step.step;
  pr.block_s = step.block;
  pr.head_s = step.head;
  pr.optimizer_s = step.optimizer;
  pr.ag_s = step.comm.ag;
  pr.rs_s = step.comm.rs;
  pr.ar_s = step.comm.ar;
  pr.embed_ag_s = step.comm.embed_ag;
  pr.embed_rs_s = step.comm.embed_rs;
  pr.embed_ar_s = step.comm.embed_ar;
  pr.even_shares = step.even;
  pr.tokens_per_s = step.step > 0 ? (double)global_batch * prof.seq_len / step.step : 0;
  pr.mfu = step.step > 0 && peak > 0 ? global_batch * cost.flops_per_sample() / step.step / peak : 0;
  return p;
}

static json memory_to_json(const MemoryTerms& m) {
  return json{{"state", m.state},         {"gathered", m.gathered},     {"act_block", m.act_block},
              {"act_saved", m.act_saved}, {"act_carry", m.act_carry},   {"work_head", m.work_head},
              {"work_fixed", m.work_fixed}, {"work_margin", m.work_margin}, {"total", m.total()}};
}

static MemoryTerms memory_from_json(const json& j, const std::string& w) {
  MemoryTerms m;
  m.state = number_field_or(j, "state", w, 0);
  m.gathered = number_field_or(j, "gathered", w, 0);
  m.act_block = number_field_or(j, "act_block", w, 0);
  m.act_saved = number_field_or(j, "act_saved", w, 0);
  m.act_carry = number_field_or(j, "act_carry", w, 0);
  m.work_head = number_field_or(j, "work_head", w, 0);
  m.work_fixed = number_field_or(j, "work_fixed", w, 0);
  m.work_margin = number_field_or(j, "work_margin", w, 0);
  return m;
}

json plan_to_json(const Plan& p) {
  json ranks = json::array();
  for (const RankPlan& r : p.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"device", r.device},
                     {"node", r.node},
                     {"batch", r.work.batch},
                     {"micro_batch", r.work.micro_batch},
                     {"num_micro_batches", r.work.num_micro_batches()},
                     {"share", r.work.share},
                     {"offload", r.work.offload},
                     {"left_out", r.left_out()},
                     {"capacity_bytes", r.capacity},
                     {"memory_bytes", memory_to_json(r.memory)},
                     {"time_s",
                      {{"block", r.block_s},
                       {"block_fwd", r.fwd_s},
                       {"block_bwd", r.bwd_s},
                       {"head", r.head_s},
                       {"optimizer", r.optimizer_s},
                       {"busy", r.busy_s},
                       {"comm", r.comm_s},
                       {"idle", r.idle_s}}}});
    if (!r.node_name.empty()) ranks.back()["node_name"] = r.node_name;
  }
  const PlanPrediction& pr = p.predicted;
  json j = {{"format", "gpumix-plan"},
              {"version", 1},
              {"planner", p.planner},
              {"model", config_to_json(p.model)},
              {"seq_len", p.seq_len},
              {"dtype", dtype_name(p.dtype)},
              {"global_batch", p.global_batch},
              {"sharding",
               {{"mode", p.sharding.hybrid() ? "hybrid" : "full"},
                {"group_size", p.sharding.hybrid() ? p.sharding.group_size : (int)p.ranks.size()},
                {"groups", p.sharding.hybrid() ? (int)p.ranks.size() / p.sharding.group_size : 1}}},
              {"fits", p.fits()},
              {"predicted",
               {{"step_s", pr.step_s},
                {"block_s", pr.block_s},
                {"head_s", pr.head_s},
                {"optimizer_s", pr.optimizer_s},
                {"all_gather_s", pr.ag_s},
                {"reduce_scatter_s", pr.rs_s},
                {"all_reduce_s", pr.ar_s},
                {"embedding_all_gather_s", pr.embed_ag_s},
                {"embedding_reduce_scatter_s", pr.embed_rs_s},
                {"embedding_all_reduce_s", pr.embed_ar_s},
                {"even_shares", pr.even_shares},
                {"tokens_per_s", pr.tokens_per_s},
                {"mfu", pr.mfu}}},
              {"ranks", ranks}};
  if (p.comm) j["comm"] = comm_to_json(*p.comm);
  return j;
}

namespace {

// The shares of plan `p` (named `w` in errors; their sum sum_r): 1 in all under full sharding
// (else `flat_error`), what check_sharding asks of each group under hybrid.
void check_share_sums(const Plan& p, const std::string& w, double sum_r, const std::string& flat_error) {
  if (p.sharding.hybrid()) {
    std::vector<double> shares;
    for (const RankPlan& r : p.ranks) shares.push_back(r.work.share);
    const std::string bad = check_sharding(p.sharding, (int)p.ranks.size(), shares);
    if (!bad.empty()) format_error(w + ".sharding", bad);
  } else if (std::fabs(sum_r - 1.0) > 1e-6) {
    format_error(w + ".ranks[].share", flat_error);
  }
}

}  // namespace

Plan plan_from_json(const json& j) {
  const std::string w = "plan";
  if (!j.is_object()) format_error(w, "must be a JSON object");
  if (has_field(j, "format") && string_field(j, "format", w) != "gpumix-plan")
    format_error(w + ".format", "must be \"gpumix-plan\"");
  if (int_field_or(j, "version", w, 1) != 1) format_error(w + ".version", "only version 1 is known");
  Plan p;
  p.planner = string_field_or(j, "planner", w, "unknown");
  p.model = model_from_json(field(j, "model", w), w + ".model");
  p.seq_len = (int)int_field(j, "seq_len", w);
  if (p.seq_len < 1 || p.seq_len > p.model.T)
    format_error(w + ".seq_len", "must lie in [1, model.T], got " + std::to_string(p.seq_len));
  if (has_field(j, "dtype")) p.dtype = compute_dtype_field(j, "dtype", w);
  p.global_batch = int_field(j, "global_batch", w);
  if (p.global_batch < 1) format_error(w + ".global_batch", "must be >= 1");
  if (has_field(j, "predicted")) {
    const json& pj = j.at("predicted");
    const std::string wp = w + ".predicted";
    PlanPrediction& pr = p.predicted;
    pr.step_s = number_field_or(pj, "step_s", wp, 0);
    pr.block_s = number_field_or(pj, "block_s", wp, 0);
    pr.head_s = number_field_or(pj, "head_s", wp, 0);
    pr.optimizer_s = number_field_or(pj, "optimizer_s", wp, 0);
    pr.ag_s = number_field_or(pj, "all_gather_s", wp, 0);
    pr.rs_s = number_field_or(pj, "reduce_scatter_s", wp, 0);
    pr.ar_s = number_field_or(pj, "all_reduce_s", wp, 0);
    pr.embed_ag_s = number_field_or(pj, "embedding_all_gather_s", wp, 0);
    pr.embed_rs_s = number_field_or(pj, "embedding_reduce_scatter_s", wp, 0);
    pr.embed_ar_s = number_field_or(pj, "embedding_all_reduce_s", wp, 0);
    pr.even_shares = bool_field_or(pj, "even_shares", wp, true);
    pr.tokens_per_s = number_field_or(pj, "tokens_per_s", wp, 0);
    pr.mfu = number_field_or(pj, "mfu", wp, 0);
  }
  if (has_field(j, "comm")) p.comm = comm_from_json(j.at("comm"), w + ".comm");
  const json& ranks = array_field(j, "ranks", w);
  if (ranks.empty()) format_error(w + ".ranks", "must list at least one rank");
  if (has_field(j, "sharding")) {
    const json& sj = j.at("sharding");
    const std::string ws = w + ".sharding";
    const std::string mode = string_field(sj, "mode", ws);
    if (mode == "hybrid")
      p.sharding.group_size = (int)int_field(sj, "group_size", ws);
    else if (mode != "full")
      format_error(ws + ".mode", "must be \"full\" or \"hybrid\", got \"" + mode + "\"");
  }
  int64_t sum_b = 0;
  double sum_r = 0;
  for (size_t i = 0; i < ranks.size(); i++) {
    const std::string wr = w + ".ranks[" + std::to_string(i) + "]";
    const json& jr = ranks[i];
    RankPlan r;
    r.rank = (int)int_field_or(jr, "rank", wr, (int64_t)i);
    if (r.rank != (int)i) format_error(wr + ".rank", "must be " + std::to_string(i));
    r.device = string_field(jr, "device", wr);
    r.node = (int)int_field_or(jr, "node", wr, 0);
    r.node_name = string_field_or(jr, "node_name", wr, "");
    RankWork& k = r.work;
    k.batch = int_field(jr, "batch", wr);
    if (k.batch < 0) format_error(wr + ".batch", "must be >= 0");
    k.micro_batch = int_field_or(jr, "micro_batch", wr, 0);
    if (k.batch > 0 && (k.micro_batch < 1 || k.micro_batch > k.batch))
      format_error(wr + ".micro_batch", "must lie in [1, batch = " + std::to_string(k.batch) + "]");
    if (k.batch == 0 && k.micro_batch != 0) format_error(wr + ".micro_batch", "must be 0 when batch is 0");
    if (has_field(jr, "num_micro_batches") && int_field(jr, "num_micro_batches", wr) != k.num_micro_batches())
      format_error(wr + ".num_micro_batches", "must be ceil(batch / micro_batch) = " +
                                                  std::to_string(k.num_micro_batches()));
    k.share = number_field(jr, "share", wr);
    check_range(k.share, 0, 1, wr + ".share");
    k.offload = bool_field_or(jr, "offload", wr, false);
    r.capacity = number_field_or(jr, "capacity_bytes", wr, 0);
    if (has_field(jr, "memory_bytes")) r.memory = memory_from_json(jr.at("memory_bytes"), wr + ".memory_bytes");
    if (has_field(jr, "time_s")) {
      const json& t = jr.at("time_s");
      const std::string wt = wr + ".time_s";
      r.block_s = number_field_or(t, "block", wt, 0);
      r.fwd_s = number_field_or(t, "block_fwd", wt, 0);
      r.bwd_s = number_field_or(t, "block_bwd", wt, 0);
      r.head_s = number_field_or(t, "head", wt, 0);
      r.optimizer_s = number_field_or(t, "optimizer", wt, 0);
      r.busy_s = number_field_or(t, "busy", wt, 0);
      r.comm_s = number_field_or(t, "comm", wt, 0);
      r.idle_s = number_field_or(t, "idle", wt, 0);
    }
    sum_b += k.batch;
    sum_r += k.share;
    p.ranks.push_back(r);
  }
  if (sum_b != p.global_batch)
    format_error(w + ".ranks[].batch", "sum to " + std::to_string(sum_b) + ", not global_batch = " +
                                           std::to_string(p.global_batch));
  char buf[96];
  std::snprintf(buf, sizeof buf, "sum to %.9g, not 1", sum_r);
  check_share_sums(p, w, sum_r, buf);
  return p;
}

Plan read_plan(const std::string& path) { return read_json_file(path, plan_from_json); }

void write_plan(const Plan& p, const std::string& path) { write_json_file(plan_to_json(p), path); }

void validate_plan(const Plan& p, const Profile& profile, const MemoryParams& memory) {
  const std::string w = "plan";
  const GPTConfig& a = p.model;
  const GPTConfig& b = profile.model;
  if (a.L != b.L || a.NH != b.NH || a.C != b.C || a.V != b.V || a.T != b.T)
    format_error(w + ".model", "is " + a.name + " but the profile is for " + b.name);
  if (p.seq_len != profile.seq_len)
    format_error(w + ".seq_len", std::to_string(p.seq_len) + " but the profile is for " +
                                     std::to_string(profile.seq_len));
  if (p.dtype != profile.dtype)
    format_error(w + ".dtype", std::string(dtype_name(p.dtype)) + " but the profile computes in " +
                                   dtype_name(profile.dtype));
  if ((int)p.ranks.size() != profile.num_ranks())
    format_error(w + ".ranks", "has " + std::to_string(p.ranks.size()) + " ranks, the profile " +
                                   std::to_string(profile.num_ranks()));
  int64_t sum_b = 0;
  double sum_r = 0;
  for (size_t i = 0; i < p.ranks.size(); i++) {
    const RankPlan& r = p.ranks[i];
    const std::string wr = w + ".ranks[" + std::to_string(i) + "]";
    if (r.device != profile.ranks[i].device)
      format_error(wr + ".device", "'" + r.device + "' but rank " + std::to_string(i) + " is a " +
                                       profile.ranks[i].device);
    const RankWork& k = r.work;
    if (k.batch < 0) format_error(wr + ".batch", "must be >= 0");
    if (k.batch > 0 && (k.micro_batch < 1 || k.micro_batch > k.batch))
      format_error(wr + ".micro_batch", "must lie in [1, batch]");
    if (k.share < 0 || k.share > 1) format_error(wr + ".share", "must lie in [0, 1]");
    sum_b += k.batch;
    sum_r += k.share;
  }
  if (sum_b != p.global_batch) format_error(w + ".ranks[].batch", "do not sum to global_batch");
  check_share_sums(p, w, sum_r, "do not sum to 1");
  CostModel cost(profile, memory, 0, p.sharding);
  const Plan fresh = make_plan(cost, p.planner, p.global_batch, p.work().ranks);
  for (size_t i = 0; i < fresh.ranks.size(); i++)
    if (!fresh.ranks[i].fits())
      format_error(w + ".ranks[" + std::to_string(i) + "]", "does not fit its memory: " +
                                                                fresh.oom_message());
}

}  // namespace gpumix::dist
