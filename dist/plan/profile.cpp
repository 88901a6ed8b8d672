#include "dist/plan/profile.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/precision.h"

namespace gpumix::dist {

using nlohmann::json;

namespace {

// Where m falls among the samples: 0 at or below the smallest, i (1 <= i < k) when
// s[i - 1].m < m <= s[i].m, k above the largest.
size_t segment(const std::vector<MicroBatchSample>& s, int64_t m) {
  if (m <= s[0].m) return 0;
  size_t i = 1;
  while (i < s.size() && m > s[i].m) i++;
  return i;
}

// interpolate() in segment i of the samples.
double interpolate_in(const std::vector<MicroBatchSample>& s, size_t i, int64_t m, double MicroBatchSample::*field) {
  const size_t k = s.size();
  if (i == 0) return s[0].*field;
  if (i < k) {
    const double w = double(m - s[i - 1].m) / double(s[i].m - s[i - 1].m);
    return s[i - 1].*field + w * (s[i].*field - s[i - 1].*field);
  }
  const MicroBatchSample& last = s[k - 1];
  double slope = k == 1 ? last.*field / last.m
                        : (last.*field - s[k - 2].*field) / double(last.m - s[k - 2].m);
  slope = std::max(slope, 0.0);
  return last.*field + slope * (m - last.m);
}

MicroBatchSample sample_in(const std::vector<MicroBatchSample>& s, size_t i, int64_t m) {
  MicroBatchSample r;
  r.m = m;
  r.block_fwd_s = interpolate_in(s, i, m, &MicroBatchSample::block_fwd_s);
  r.block_bwd_s = interpolate_in(s, i, m, &MicroBatchSample::block_bwd_s);
  r.block_act_bytes = interpolate_in(s, i, m, &MicroBatchSample::block_act_bytes);
  r.head_s = interpolate_in(s, i, m, &MicroBatchSample::head_s);
  r.head_bytes = interpolate_in(s, i, m, &MicroBatchSample::head_bytes);
  return r;
}

}  // namespace

double interpolate(const std::vector<MicroBatchSample>& s, int64_t m, double MicroBatchSample::*field) {
  return interpolate_in(s, segment(s, m), m, field);
}

MicroBatchSample DeviceProfile::at(int64_t m) const { return sample_in(samples, segment(samples, m), m); }

std::vector<MicroBatchSample> DeviceProfile::table(int64_t max_m) const {
  std::vector<MicroBatchSample> t(max_m + 1);
  size_t i = 0;
  for (int64_t m = 1; m <= max_m; m++) {
    if (i == 0 && m > samples[0].m) i = 1;
    while (i > 0 && i < samples.size() && m > samples[i].m) i++;
    t[m] = sample_in(samples, i, m);
  }
  return t;
}

double collective_time(const CollectiveProfile& c, int ranks, int nodes, double bytes, bool even) {
  if (ranks <= 1) return 0;
  const LinkProfile& link = nodes > 1 ? c.inter_node : c.intra_node;
  const double factor = even ? 1.0 : c.uneven_factor;
  return (ranks - 1) * link.latency_s + double(ranks - 1) / ranks * bytes * factor / link.bandwidth_Bps;
}

const DeviceProfile& Profile::device(const std::string& name) const {
  for (const DeviceProfile& d : devices)
    if (d.name == name) return d;
  throw FormatError("profile: no device type '" + name + "' in devices");
}

int Profile::num_nodes() const {
  std::set<int> nodes;
  for (const RankInfo& r : ranks) nodes.insert(r.node);
  return (int)nodes.size();
}

static void validate_link(const LinkProfile& l, const std::string& where, bool required) {
  check_range(l.latency_s, 0, 10, where + ".latency_s");
  if (required && !(l.bandwidth_Bps > 0)) format_error(where + ".bandwidth_Bps", "must be > 0");
}

void Profile::validate() const {
  try {
    model.validate();
  } catch (const std::invalid_argument& e) {
    format_error("profile: model", e.what());
  }
  if (seq_len < 1 || seq_len > model.T)
    format_error("profile: seq_len", "must lie in [1, model.T = " + std::to_string(model.T) +
                                         "], got " + std::to_string(seq_len));
  if (!is_compute_dtype(dtype)) format_error("profile: dtype", "must be bf16 or f32");
  if (devices.empty()) format_error("profile: devices", "must list at least one device type");
  std::set<std::string> names;
  for (size_t i = 0; i < devices.size(); i++) {
    const DeviceProfile& d = devices[i];
    const std::string w = "profile: devices[" + std::to_string(i) + "]";
    if (d.name.empty()) format_error(w + ".name", "must not be empty");
    if (!names.insert(d.name).second) format_error(w + ".name", "'" + d.name + "' appears twice");
    if (d.kind != "gpu" && d.kind != "cpu") format_error(w + ".kind", "must be \"gpu\" or \"cpu\"");
    if (!(d.memory_bytes > 0)) format_error(w + ".memory_bytes", "must be > 0");
    check_range(d.work_bytes, 0, 1e15, w + ".work_bytes");
    check_range(d.optimizer_s_per_param, 0, 1, w + ".optimizer_s_per_param");
    check_range(d.microbatch_overhead_s, 0, 10, w + ".microbatch_overhead_s");
    check_range(d.host_bandwidth_Bps, 0, 1e15, w + ".host_bandwidth_Bps");
    check_range(d.peak_flops, 0, 1e18, w + ".peak_flops");
    if (d.samples.empty()) format_error(w + ".samples", "must hold at least one micro-batch size");
    for (size_t k = 0; k < d.samples.size(); k++) {
      const MicroBatchSample& s = d.samples[k];
      const std::string ws = w + ".samples[" + std::to_string(k) + "]";
      if (s.m < 1) format_error(ws + ".m", "must be >= 1, got " + std::to_string(s.m));
      if (k > 0 && s.m <= d.samples[k - 1].m)
        format_error(ws + ".m", "sizes must be strictly ascending");
      if (!(s.block_fwd_s > 0)) format_error(ws + ".block_fwd_s", "must be > 0");
      if (!(s.block_bwd_s > 0)) format_error(ws + ".block_bwd_s", "must be > 0");
      check_range(s.block_act_bytes, 0, 1e15, ws + ".block_act_bytes");
      check_range(s.head_s, 0, 1e4, ws + ".head_s");
      check_range(s.head_bytes, 0, 1e15, ws + ".head_bytes");
    }
  }
  if (ranks.empty()) format_error("profile: ranks", "must list at least one rank");
  for (size_t r = 0; r < ranks.size(); r++) {
    const std::string w = "profile: ranks[" + std::to_string(r) + "]";
    if (!names.count(ranks[r].device))
      format_error(w + ".device", "'" + ranks[r].device + "' is not one of devices[].name");
    if (ranks[r].node < 0) format_error(w + ".node", "must be >= 0");
  }
  const bool multi_node = num_nodes() > 1;
  validate_link(comm.all_gather.intra_node, "profile: comm.all_gather.intra_node", ranks.size() > 1);
  validate_link(comm.reduce_scatter.intra_node, "profile: comm.reduce_scatter.intra_node", ranks.size() > 1);
  validate_link(comm.all_gather.inter_node, "profile: comm.all_gather.inter_node", multi_node);
  validate_link(comm.reduce_scatter.inter_node, "profile: comm.reduce_scatter.inter_node", multi_node);
  validate_link(comm.all_gather.leaders, "profile: comm.all_gather.leaders", false);
  validate_link(comm.reduce_scatter.leaders, "profile: comm.reduce_scatter.leaders", false);
  check_range(comm.overlap, 0, 1, "profile: comm.overlap");
  check_range(comm.all_gather.uneven_factor, 1, 100, "profile: comm.all_gather.uneven_factor");
  check_range(comm.reduce_scatter.uneven_factor, 1, 100, "profile: comm.reduce_scatter.uneven_factor");
}

GPTConfig model_from_json(const json& j, const std::string& where) {
  try {
    return config_from_json(j, where);
  } catch (const std::invalid_argument& e) {
    throw FormatError(e.what());
  }
}

static json link_to_json(const LinkProfile& l) {
  return json{{"latency_s", l.latency_s}, {"bandwidth_Bps", l.bandwidth_Bps}};
}

static LinkProfile link_from_json(const json& j, const std::string& where) {
  LinkProfile l;
  l.latency_s = number_field(j, "latency_s", where);
  l.bandwidth_Bps = number_field(j, "bandwidth_Bps", where);
  return l;
}

static json collective_to_json(const CollectiveProfile& c) {
  json j{{"intra_node", link_to_json(c.intra_node)}, {"uneven_factor", c.uneven_factor}};
  if (c.inter_node.bandwidth_Bps > 0) j["inter_node"] = link_to_json(c.inter_node);
  if (c.leaders.bandwidth_Bps > 0) j["leaders"] = link_to_json(c.leaders);
  return j;
}

static CollectiveProfile collective_from_json(const json& j, const std::string& where) {
  CollectiveProfile c;
  c.intra_node = link_from_json(field(j, "intra_node", where), where + ".intra_node");
  if (has_field(j, "inter_node"))
    c.inter_node = link_from_json(j.at("inter_node"), where + ".inter_node");
  if (has_field(j, "leaders")) c.leaders = link_from_json(j.at("leaders"), where + ".leaders");
  c.uneven_factor = number_field_or(j, "uneven_factor", where, 1.0);
  return c;
}

json comm_to_json(const CommProfile& c) {
  return json{{"all_gather", collective_to_json(c.all_gather)},
              {"reduce_scatter", collective_to_json(c.reduce_scatter)},
              {"overlap", c.overlap}};
}

CommProfile comm_from_json(const json& comm, const std::string& where) {
  CommProfile c;
  c.all_gather = collective_from_json(field(comm, "all_gather", where), where + ".all_gather");
  c.reduce_scatter = collective_from_json(field(comm, "reduce_scatter", where), where + ".reduce_scatter");
  c.overlap = number_field_or(comm, "overlap", where, 1.0);
  for (const auto& [name, k] : {std::pair<const char*, const CollectiveProfile*>{"all_gather", &c.all_gather},
                                {"reduce_scatter", &c.reduce_scatter}}) {
    const std::string w = where + "." + name;
    validate_link(k->intra_node, w + ".intra_node", false);
    validate_link(k->inter_node, w + ".inter_node", false);
    validate_link(k->leaders, w + ".leaders", false);
    check_range(k->uneven_factor, 1, 100, w + ".uneven_factor");
  }
  check_range(c.overlap, 0, 1, where + ".overlap");
  return c;
}

json profile_to_json(const Profile& p) {
  json devices = json::array();
  for (const DeviceProfile& d : p.devices) {
    json samples = json::array();
    for (const MicroBatchSample& s : d.samples)
      samples.push_back({{"m", s.m},
                         {"block_fwd_s", s.block_fwd_s},
                         {"block_bwd_s", s.block_bwd_s},
                         {"block_act_bytes", s.block_act_bytes},
                         {"head_s", s.head_s},
                         {"head_bytes", s.head_bytes}});
    devices.push_back({{"name", d.name},
                       {"kind", d.kind},
                       {"memory_bytes", d.memory_bytes},
                       {"work_bytes", d.work_bytes},
                       {"optimizer_s_per_param", d.optimizer_s_per_param},
                       {"microbatch_overhead_s", d.microbatch_overhead_s},
                       {"host_bandwidth_Bps", d.host_bandwidth_Bps},
                       {"peak_flops", d.peak_flops},
                       {"samples", samples}});
  }
  json ranks = json::array();
  for (const RankInfo& r : p.ranks) {
    json e{{"device", r.device}, {"node", r.node}};
    if (!r.node_name.empty()) e["node_name"] = r.node_name;
    ranks.push_back(e);
  }
  return json{{"format", "gpumix-profile"},
              {"version", 1},
              {"model", config_to_json(p.model)},
              {"seq_len", p.seq_len},
              {"dtype", dtype_name(p.dtype)},
              {"devices", devices},
              {"ranks", ranks},
              {"comm", comm_to_json(p.comm)}};
}

Profile profile_from_json(const json& j) {
  const std::string w = "profile";
  if (!j.is_object()) format_error(w, "must be a JSON object");
  if (has_field(j, "format") && string_field(j, "format", w) != "gpumix-profile")
    format_error(w + ".format", "must be \"gpumix-profile\"");
  if (int_field_or(j, "version", w, 1) != 1) format_error(w + ".version", "only version 1 is known");
  Profile p;
  p.model = model_from_json(field(j, "model", w), w + ".model");
  p.seq_len = (int)int_field_or(j, "seq_len", w, p.model.T);
  const json& devices = array_field(j, "devices", w);
  const bool has_dtype = has_field(j, "dtype");
  if (has_dtype) p.dtype = compute_dtype_field(j, "dtype", w);
  for (size_t i = 0; i < devices.size(); i++) {
    const std::string wd = w + ".devices[" + std::to_string(i) + "]";
    const json& jd = devices[i];
    DeviceProfile d;
    d.name = string_field(jd, "name", wd);
    d.kind = string_field_or(jd, "kind", wd, "gpu");
    d.memory_bytes = bytes_field(jd, "memory_bytes", wd);
    // Profiles written before "dtype" said it per device, in bytes (by default 4 on CPUs,
    // 2 on GPUs): still read, as long as the devices agree (a run computes in one dtype).
    if (has_field(jd, "dtype_bytes") || !has_dtype) {
      const int64_t bytes = int_field_or(jd, "dtype_bytes", wd, d.kind == "cpu" ? 4 : 2);
      if (bytes != 2 && bytes != 4) format_error(wd + ".dtype_bytes", "must be 2 (bf16) or 4 (f32)");
      const DType t = bytes == 2 ? DType::bf16 : DType::f32;
      if (!has_dtype && i == 0) p.dtype = t;
      if (t != p.dtype)
        format_error(wd + ".dtype_bytes", str(bytes, " bytes, but the profile computes in ", dtype_name(p.dtype), " (",
                                              dtype_size(p.dtype), " bytes): a run computes in one dtype; drop "
                                              "dtype_bytes and give the profile's \"dtype\""));
    }
    d.work_bytes = has_field(jd, "work_bytes") ? bytes_field(jd, "work_bytes", wd) : 0;
    d.optimizer_s_per_param = number_field_or(jd, "optimizer_s_per_param", wd, 0);
    d.microbatch_overhead_s = number_field_or(jd, "microbatch_overhead_s", wd, 0);
    d.host_bandwidth_Bps = number_field_or(jd, "host_bandwidth_Bps", wd, 0);
    d.peak_flops = number_field_or(jd, "peak_flops", wd, 0);
    const json& samples = array_field(jd, "samples", wd);
    for (size_t k = 0; k < samples.size(); k++) {
      const std::string ws = wd + ".samples[" + std::to_string(k) + "]";
      MicroBatchSample s;
      s.m = int_field(samples[k], "m", ws);
      s.block_fwd_s = number_field(samples[k], "block_fwd_s", ws);
      s.block_bwd_s = number_field(samples[k], "block_bwd_s", ws);
      s.block_act_bytes = bytes_field(samples[k], "block_act_bytes", ws);
      s.head_s = number_field_or(samples[k], "head_s", ws, 0);
      s.head_bytes = has_field(samples[k], "head_bytes") ? bytes_field(samples[k], "head_bytes", ws) : 0;
      d.samples.push_back(s);
    }
    p.devices.push_back(d);
  }
  const json& ranks = array_field(j, "ranks", w);
  for (size_t r = 0; r < ranks.size(); r++) {
    const std::string wr = w + ".ranks[" + std::to_string(r) + "]";
    RankInfo info;
    if (ranks[r].is_string()) {
      info.device = ranks[r].get<std::string>();
    } else {
      info.device = string_field(ranks[r], "device", wr);
      info.node = (int)int_field_or(ranks[r], "node", wr, 0);
      info.node_name = string_field_or(ranks[r], "node_name", wr, "");
    }
    p.ranks.push_back(info);
  }
  if (p.ranks.size() > 1 || has_field(j, "comm")) {
    p.comm = comm_from_json(field(j, "comm", w), w + ".comm");
  }
  p.validate();
  return p;
}

Profile read_profile(const std::string& path) { return read_json_file(path, profile_from_json); }

void write_profile(const Profile& p, const std::string& path) {
  write_json_file(profile_to_json(p), path);
}

}  // namespace gpumix::dist
