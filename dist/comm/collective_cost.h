// What the uneven all-gather and reduce-scatter cost in the forms dist/comm runs them: flat
// (the backend's own collective over every rank) or hierarchical across nodes (three
// stages: dist/comm/hierarchical.h). One place for both TopologyComm's choice of form and
// the cost model's prediction (dist/plan/cost_model.h), so that the planner prices the
// collective the engine will run. Header-only: dist/plan uses it without linking dist/comm.
//
// A link class follows the ring model: a collective over n ranks moving B bytes (the full
// buffer) costs (n − 1)·latency + (n − 1)/n·B / bandwidth, bandwidth being what each rank
// receives per second (the bus bandwidth nccl-tests reports). Three link classes:
//   intra    the ranks of one node among themselves (shared memory, NVLink);
//   inter    a flat collective over ranks that span nodes (whatever algorithm the backend
//            picks, measured as it runs: its bytes cross the slow link);
//   leaders  one rank per node: the link between nodes as the hierarchical middle stage
//            and the replicas' all-reduce of hybrid sharding use it (unset: inter).
//
// Flat: ring(n = every rank) on inter (intra on one node), its bytes term × uneven_factor
// when the ranks' shares differ.
// Hierarchical, K nodes, node k holding R_k of the B bytes (its ranks' shares), n_k ranks:
//   all-gather      1. node all-gather of R_k          (n_k − 1)·lat + (R_k − min own)/bw   intra
//                   2. leaders exchange node ranges    (K − 1)·lat + max_k (B − R_k)/bw       leaders
//                   3. node broadcast of all B         ⌈log2 n_k⌉·(lat + B/bw)                 intra
//   reduce-scatter  1. node reduce of B onto the leader ⌈log2 n_k⌉·(lat + B/bw)                intra
//                   2. leaders reduce-scatter by range (K − 1)·lat + max_k max((K − 1)·R_k, B − R_k)/bw
//                   3. node broadcast of R_k           ⌈log2 n_k⌉·(lat + R_k/bw)               intra
// (each stage's time is its slowest node's; a leader receives what it lacks, so the middle
// stage is bound by the node holding the least state in the all-gather and by the one
// holding the most in the reduce-scatter: state on the far side of a slow link costs more
// to gather, and a balanced split across nodes costs least.) With even ranges stage 2 is
// the ring's (K − 1)/K·B.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace gpumix::dist {

struct TopologyLink {
  double latency_s = 0;
  double bandwidth_Bps = 0;
};

// One collective kind's links (all-gather's or reduce-scatter's: they are measured apart).
struct TopologyLinks {
  TopologyLink intra{8e-6, 40e9};
  TopologyLink inter{20e-6, 25e9};
  TopologyLink leaders{0, 0};  // bandwidth 0: the inter link's figures
  double uneven_factor = 1.0;  // the flat form's bytes term when the shares differ
  const TopologyLink& leader_link() const { return leaders.bandwidth_Bps > 0 ? leaders : inter; }
};

// Both kinds' links (the profile measures them apart).
struct CollectiveLinks {
  TopologyLinks all_gather, reduce_scatter;
};

// The ring model of one link: n ranks, `bytes` of the whole buffer.
inline double ring_time(const TopologyLink& l, int n, double bytes) {
  if (n <= 1) return 0;
  return (n - 1) * l.latency_s + double(n - 1) / n * bytes / l.bandwidth_Bps;
}

// A tree over n ranks (a reduce onto one rank or a broadcast from it): every level moves
// all `bytes`.
inline double tree_time(const TopologyLink& l, int n, double bytes) {
  if (n <= 1) return 0;
  return std::ceil(std::log2((double)n)) * (l.latency_s + bytes / l.bandwidth_Bps);
}

enum class CollectiveKind : unsigned char { all_gather, reduce_scatter };

struct CollectiveTimes {
  double flat = 0;
  double hierarchical = std::numeric_limits<double>::infinity();  // where the stages can run
  bool staged() const { return hierarchical < flat; }
  double best() const { return std::min(flat, hierarchical); }
};

// How a buffer is spread over the ranks that take part and their nodes: what both forms'
// times depend on. part[i] is rank i's part (bytes, or a share to be scaled), node[i] its
// node (any labels >= 0).
struct Spread {
  struct Node {
    int ranks = 0;
    double range = 0;                                      // the node's ranks' parts together
    double least = std::numeric_limits<double>::infinity();  // its smallest part
  };
  int ranks = 0;
  double total = 0, lo = std::numeric_limits<double>::infinity(), hi = 0;
  std::vector<Node> nodes;  // the nodes that take part
};

inline Spread spread_of(const std::vector<double>& part, const std::vector<int>& node) {
  Spread s;
  s.ranks = (int)part.size();
  int top = -1;
  for (int n : node) top = std::max(top, n);
  std::vector<int> index((size_t)(top + 1), -1);
  for (size_t i = 0; i < part.size(); i++) {
    s.total += part[i];
    s.lo = std::min(s.lo, part[i]);
    s.hi = std::max(s.hi, part[i]);
    int& k = index[(size_t)node[i]];
    if (k < 0) {
      k = (int)s.nodes.size();
      s.nodes.emplace_back();
    }
    Spread::Node& n = s.nodes[(size_t)k];
    n.ranks++;
    n.range += part[i];
    n.least = std::min(n.least, part[i]);
  }
  return s;
}

// Both forms of one collective over the ranks of `s`, each rank's bytes its part × `scale`.
// `hierarchical_ok`: the stages can run (several nodes, each on consecutive ranks:
// TopologyComm's condition); otherwise only the flat time is given. `even_shares`: whether
// the flat form pays the uneven factor: -1 as the parts say, 0 uneven, 1 even.
inline CollectiveTimes collective_times(CollectiveKind kind, const Spread& s, double scale,
                                        const TopologyLinks& links, bool hierarchical_ok, int even_shares = -1) {
  CollectiveTimes t;
  const int N = s.ranks, K = (int)s.nodes.size();
  const double B = s.total * scale;
  const bool even = even_shares >= 0 ? even_shares == 1 : N == 0 || s.hi - s.lo <= 1e-9 * s.hi;
  const TopologyLink& flat_link = K > 1 ? links.inter : links.intra;
  if (N > 1)
    t.flat = (N - 1) * flat_link.latency_s +
             double(N - 1) / N * B * (even ? 1.0 : links.uneven_factor) / flat_link.bandwidth_Bps;
  if (!hierarchical_ok || K < 2 || B <= 0) return t;
  const TopologyLink& lead = links.leader_link();
  double s1 = 0, s2 = 0, s3 = 0;
  for (const Spread::Node& node : s.nodes) {
    const int n = node.ranks;
    const double R = node.range * scale;
    if (kind == CollectiveKind::all_gather) {
      if (n > 1)
        s1 = std::max(s1, (n - 1) * links.intra.latency_s + (R - node.least * scale) / links.intra.bandwidth_Bps);
      s2 = std::max(s2, (B - R) / lead.bandwidth_Bps);
      s3 = std::max(s3, tree_time(links.intra, n, B));
    } else {
      s1 = std::max(s1, tree_time(links.intra, n, B));
      s2 = std::max(s2, std::max((K - 1) * R, B - R) / lead.bandwidth_Bps);
      s3 = std::max(s3, tree_time(links.intra, n, R));
    }
  }
  t.hierarchical = s1 + (K - 1) * lead.latency_s + s2 + s3;
  return t;
}

// The same from each rank's bytes and node.
inline CollectiveTimes collective_times(CollectiveKind kind, const std::vector<double>& bytes,
                                        const std::vector<int>& node, const TopologyLinks& links,
                                        bool hierarchical_ok, int even_shares = -1) {
  return collective_times(kind, spread_of(bytes, node), 1.0, links, hierarchical_ok, even_shares);
}

// A ring all-reduce (a reduce-scatter, then an all-gather) over G ranks on one link.
inline double all_reduce_time(const TopologyLink& l, int G, double bytes) { return 2 * ring_time(l, G, bytes); }

}  // namespace gpumix::dist
