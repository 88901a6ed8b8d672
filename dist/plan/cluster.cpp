#include "dist/plan/cluster.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include <cmath>
#include <cstdio>

#include "dist/plan/device_catalog.h"

namespace gpumix::dist {

using nlohmann::json;

static std::string size_text(double bytes) {
  const double gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
  char buf[64];
  if (std::fmod(bytes, gib) == 0) std::snprintf(buf, sizeof buf, "%.0fGiB", bytes / gib);
  else if (std::fmod(bytes, mib) == 0) std::snprintf(buf, sizeof buf, "%.0fMiB", bytes / mib);
  else std::snprintf(buf, sizeof buf, "%.0f", bytes);
  return buf;
}

std::string ClusterDevice::label() const {
  std::string s = type;
  if (is_cuda() && gpu >= 0) s += ":" + std::to_string(gpu);
  if (memory_bytes > 0) s += ":mem=" + size_text(memory_bytes);
  if (slowdown != 1.0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ":slow=%g", slowdown);
    s += buf;
  }
  return s;
}

static constexpr int kMaxCount = 65536;

static constexpr int kMaxGpu = 1023;  // CUDA device numbers on one node

static void finish_device(ClusterDevice& d, const std::string& where) {
  if (d.type == "cuda" || d.type == "CUDA") {  // a real GPU: no catalog entry
    d.type = "cuda";
    d.kind = "gpu";
  } else if (d.gpu >= 0) {
    format_error(where + ".gpu", "a GPU index is for cuda devices (cuda:N), not '" + d.type + "'");
  } else try {
    const DeviceSpec& spec = device_spec(d.type);
    d.type = spec.name;
    d.kind = spec.kind;
  } catch (const std::invalid_argument& e) {
    format_error(where + ".type", std::string(e.what()) + ", or cuda[:N] for a GPU of this machine");
  }
  if (d.gpu < -1 || d.gpu > kMaxGpu)
    format_error(where + ".gpu", "must lie in [0, " + std::to_string(kMaxGpu) + "]");
  if (!(d.slowdown >= 1.0) || !std::isfinite(d.slowdown))
    format_error(where + ".slowdown", "must be >= 1");
  // Far above any real cluster, and low enough that rank counts never overflow an int.
  if (d.count < 1 || d.count > kMaxCount)
    format_error(where + ".count", "must lie in [1, " + std::to_string(kMaxCount) + "]");
}

ClusterDevice parse_device_spec(const std::string& spec, const std::string& where) {
  ClusterDevice d;
  size_t start = 0;
  bool first = true;
  while (start <= spec.size()) {
    size_t end = spec.find(':', start);
    if (end == std::string::npos) end = spec.size();
    const std::string part = spec.substr(start, end - start);
    if (first) {
      if (part.empty()) format_error(where, "device spec '" + spec + "' has no type");
      d.type = part;
      first = false;
    } else if (start == d.type.size() + 1 && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos) {
      // cuda:N (the GPU index, right after the type); other types reject it in finish_device.
      d.gpu = part.size() > 4 ? kMaxGpu + 1 : std::stoi(part);
    } else {
      const size_t eq = part.find('=');
      if (eq == std::string::npos) format_error(where, "'" + part + "' in '" + spec + "' is not key=value");
      const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
      try {
        if (key == "mem") d.memory_bytes = parse_bytes(value, where + ".mem");
        else if (key == "slow") d.slowdown = std::stod(value);
        else if (key == "count") d.count = (int)std::min<long long>(std::stoll(value), kMaxCount + 1LL);
        else format_error(where, "unknown key '" + key + "' in '" + spec + "' (mem, slow, count)");
      } catch (const std::logic_error&) {
        format_error(where + "." + key, "'" + value + "' is not a number");
      }
    }
    start = end + 1;
  }
  finish_device(d, where);
  return d;
}

int Cluster::num_ranks() const {
  int64_t n = 0;  // each count is at most kMaxCount; the total is checked by validate()
  for (const ClusterNode& node : nodes)
    for (const ClusterDevice& d : node.devices) n += d.count;
  return (int)std::min<int64_t>(n, INT32_MAX);
}

std::vector<Cluster::Rank> Cluster::ranks() const {
  std::vector<Rank> r;
  for (size_t n = 0; n < nodes.size(); n++)
    for (const ClusterDevice& d : nodes[n].devices)
      for (int k = 0; k < d.count; k++) {
        ClusterDevice one = d;
        one.count = 1;
        r.push_back({one, (int)n});
      }
  return r;
}

void Cluster::validate() const {
  if (nodes.empty()) format_error("cluster: nodes", "must list at least one node");
  for (size_t n = 0; n < nodes.size(); n++) {
    const std::string w = "cluster: nodes[" + std::to_string(n) + "]";
    if (nodes[n].devices.empty()) format_error(w + ".devices", "must list at least one device");
  }
  if (num_ranks() > 1 && !(intra_node.bandwidth_GBps > 0))
    format_error("cluster: intra_node.bandwidth_GBps", "must be > 0");
  if (nodes.size() > 1 && !(inter_node.bandwidth_GBps > 0))
    format_error("cluster: inter_node.bandwidth_GBps", "must be > 0 when there is more than one node");
  check_range(uneven_factor, 1, 100, "cluster: uneven_factor");
}

static json link_json(const ClusterLink& l) {
  return json{{"bandwidth_GBps", l.bandwidth_GBps}, {"latency_us", l.latency_us}};
}

static ClusterLink link_from(const json& j, const std::string& w) {
  ClusterLink l;
  l.bandwidth_GBps = number_field(j, "bandwidth_GBps", w);
  l.latency_us = number_field_or(j, "latency_us", w, 0);
  if (l.bandwidth_GBps <= 0) format_error(w + ".bandwidth_GBps", "must be > 0");
  check_range(l.latency_us, 0, 1e7, w + ".latency_us");
  return l;
}

json cluster_to_json(const Cluster& c) {
  json nodes = json::array();
  for (const ClusterNode& n : c.nodes) {
    json devs = json::array();
    for (const ClusterDevice& d : n.devices)
      devs.push_back(d.count == 1 ? d.label() : d.label() + ":count=" + std::to_string(d.count));
    nodes.push_back({{"name", n.name}, {"devices", devs}});
  }
  json j{{"format", "gpumix-cluster"}, {"name", c.name}, {"intra_node", link_json(c.intra_node)},
         {"uneven_factor", c.uneven_factor}, {"nodes", nodes}};
  if (c.inter_node.bandwidth_GBps > 0) j["inter_node"] = link_json(c.inter_node);
  return j;
}

Cluster cluster_from_json(const json& j) {
  const std::string w = "cluster";
  if (!j.is_object()) format_error(w, "must be a JSON object");
  if (has_field(j, "format") && string_field(j, "format", w) != "gpumix-cluster")
    format_error(w + ".format", "must be \"gpumix-cluster\"");
  Cluster c;
  c.name = string_field_or(j, "name", w, "cluster");
  if (has_field(j, "intra_node")) c.intra_node = link_from(j.at("intra_node"), w + ".intra_node");
  if (has_field(j, "inter_node")) c.inter_node = link_from(j.at("inter_node"), w + ".inter_node");
  c.uneven_factor = number_field_or(j, "uneven_factor", w, 1.1);
  const json& nodes = array_field(j, "nodes", w);
  for (size_t n = 0; n < nodes.size(); n++) {
    const std::string wn = w + ": nodes[" + std::to_string(n) + "]";
    ClusterNode node;
    node.name = string_field_or(nodes[n], "name", wn, "node" + std::to_string(n));
    const json& devs = array_field(nodes[n], "devices", wn);
    for (size_t k = 0; k < devs.size(); k++) {
      const std::string wd = wn + ".devices[" + std::to_string(k) + "]";
      if (devs[k].is_string()) {
        node.devices.push_back(parse_device_spec(devs[k].get<std::string>(), wd));
        continue;
      }
      ClusterDevice d;
      d.type = string_field(devs[k], "type", wd);
      if (has_field(devs[k], "gpu")) d.gpu = (int)std::clamp<int64_t>(int_field_or(devs[k], "gpu", wd, -1), -2, kMaxGpu + 1);
      if (has_field(devs[k], "memory")) d.memory_bytes = bytes_field(devs[k], "memory", wd);
      d.slowdown = number_field_or(devs[k], "slowdown", wd, 1.0);
      const int64_t count = int_field_or(devs[k], "count", wd, 1);
      d.count = count > kMaxCount ? kMaxCount + 1 : (int)std::max<int64_t>(count, 0);  // checked below
      finish_device(d, wd);
      node.devices.push_back(d);
    }
    c.nodes.push_back(node);
  }
  c.validate();
  return c;
}

Cluster read_cluster(const std::string& path) { return read_json_file(path, cluster_from_json); }

void write_cluster(const Cluster& c, const std::string& path) { write_json_file(cluster_to_json(c), path); }

}  // namespace gpumix::dist
