// Topology-aware collectives (dist/comm/hierarchical.h) on thread ranks that simulate 2 and 3
// nodes (LocalOptions::node_of_rank), with uneven counts including zeros: the hierarchical
// all-gather is bitwise the flat one; the hierarchical reduce-scatter (node sums first, then
// across nodes) is within fp32 reassociation of the rank-order sum, (N-1) * FLT_EPSILON *
// sum |x| per element (scatter_reference's allowance); the cost model's choice.
#include <cmath>
#include <limits>

#include "dist/comm/hierarchical.h"
#include "tests/dist_comm/comm_test_util.h"

namespace gpumix::dist {
namespace {

using namespace test;  // the shared references and inputs (comm_test_util.h)

Tensor tensor_of(const std::vector<float>& v) { return Tensor::from_vector(v, Shape{(int64_t)v.size()}); }

void check_against_reference(const std::vector<int>& nodes) {
  const int n = (int)nodes.size();
  LocalOptions o;
  o.timeout_s = 20;
  o.node_of_rank = nodes;
  run_local(n, [&](Comm& base) {
    TopologyComm c(base, TopologyLinks{}, TopologyComm::Mode::hierarchical);
    const int r = c.rank();
    for (const std::vector<int64_t>& counts : count_patterns(n)) {
      const std::string where = str("nodes of ", n, " ranks, counts ", counts_str(counts), " rank ", r);
      Tensor in = tensor_of(rank_input(r, counts[r]));
      Tensor out = Tensor::full(Shape{sum_of(counts)}, -7.0f);
      c.all_gather_v(in, out, counts);
      EXPECT_TRUE(bitwise_equal("all_gather_v " + where, out.to_vector(), gather_reference(counts)));
      // In place: in is out's view at this rank's offset.
      Tensor buf = Tensor::full(Shape{sum_of(counts)}, -7.0f);
      Tensor mine = buf.flat_slice(offsets_of(counts)[r], counts[r]);
      mine.copy_from(in);
      c.all_gather_v(mine, buf, counts);
      EXPECT_TRUE(bitwise_equal("in-place all_gather_v " + where, buf.to_vector(), gather_reference(counts)));

      Tensor full = tensor_of(rank_input(r, sum_of(counts)));
      Tensor part = Tensor::full(Shape{counts[r]}, -7.0f);
      c.reduce_scatter_v(full, part, counts);
      std::vector<double> allowance;
      const std::vector<float> ref = scatter_reference(counts, r, &allowance);
      EXPECT_TRUE(within("reduce_scatter_v " + where, part.to_vector(), ref, allowance));
      // Async forms give the same.
      Tensor again = Tensor::full(Shape{counts[r]}, -7.0f);
      c.reduce_scatter_v_async(full, again, counts)->wait();
      EXPECT_TRUE(bitwise_equal("async reduce_scatter_v " + where, again.to_vector(), part.to_vector()));
    }
    EXPECT_GT(c.hierarchical_calls(), 0);
    // Payload counters as comm.h defines them, whatever the form.
    EXPECT_EQ(c.stats()[CommOp::all_gather_v].calls, 2 * (int64_t)count_patterns(n).size());
  }, o);
}

TEST(Hierarchical, TwoNodesMatchTheFlatCollectives) { check_against_reference({0, 0, 1, 1}); }
TEST(Hierarchical, ThreeUnevenNodesMatchTheFlatCollectives) { check_against_reference({0, 0, 0, 1, 2, 2}); }

TEST(Hierarchical, CostModelChoosesByTheLinks) {
  const TopologyLinks links;  // intra 8 µs, 40 GB/s; inter 20 µs, 25 GB/s
  std::vector<int> nodes;
  for (int i = 0; i < 32; ++i) nodes.push_back(i / 8);  // 4 nodes of 8
  const std::vector<int64_t> small(32, 1000);          // 4 KB each: latency-bound
  TopologyChoice c = choose_topology_algo(CommOp::all_gather_v, small, nodes, 4, links);
  EXPECT_EQ(c.algo, TopologyAlgo::hierarchical);
  // flat: 31 inter-node steps; hierarchical: a node ring of 7 steps, 3 steps between the
  // leaders, a broadcast tree of 3 levels in each node.
  const double T = 32 * 1000 * 4.0;
  EXPECT_NEAR(c.flat_s, 31 * 20e-6 + 31.0 / 32 * T / 25e9, 1e-12);
  EXPECT_NEAR(c.hierarchical_s, (7 * 8e-6 + 7.0 / 8 * (T / 4) / 40e9) + (3 * 20e-6 + 3.0 / 4 * T / 25e9) +
                                    3 * (8e-6 + T / 40e9),
              1e-12);
  EXPECT_EQ(choose_topology_algo(CommOp::reduce_scatter_v, small, nodes, 4, links).algo, TopologyAlgo::hierarchical);
  // Huge buffers on a link between nodes as fast as inside: the extra intra stages lose.
  TopologyLinks same;
  same.inter = same.intra;
  const std::vector<int64_t> big(32, 50'000'000);
  EXPECT_EQ(choose_topology_algo(CommOp::all_gather_v, big, nodes, 4, same).algo, TopologyAlgo::flat);
  // One rank per node, one node, or interleaved nodes: flat.
  std::vector<int> each(8), interleaved;
  for (int i = 0; i < 8; ++i) each[i] = i;
  for (int i = 0; i < 32; ++i) interleaved.push_back(i % 4);
  EXPECT_EQ(choose_topology_algo(CommOp::all_gather_v, std::vector<int64_t>(8, 1000), each, 4, links).algo,
            TopologyAlgo::flat);
  EXPECT_EQ(choose_topology_algo(CommOp::all_gather_v, small, std::vector<int>(32, 0), 4, links).algo,
            TopologyAlgo::flat);
  c = choose_topology_algo(CommOp::all_gather_v, small, interleaved, 4, links);
  EXPECT_EQ(c.algo, TopologyAlgo::flat);
  EXPECT_TRUE(std::isinf(c.hierarchical_s));
  EXPECT_FALSE(nodes_contiguous(interleaved));
  EXPECT_TRUE(nodes_contiguous(nodes));
}

// The middle stage between the leaders is bound by how the state is split between the
// nodes: an all-gather by the node that holds least (it receives the rest), a
// reduce-scatter by the one that holds most; an even split costs least.
TEST(Hierarchical, StateOnTheFarSideOfTheLinkCostsMore) {
  TopologyLinks links;
  links.leaders = {1e-4, 1e8};  // a slow link between the nodes
  const std::vector<int> nodes = {0, 0, 1, 1};
  const double B = 4e6;
  auto t = [&](CollectiveKind kind, double node0) {
    const std::vector<double> bytes = {node0 * B / 2, node0 * B / 2, (1 - node0) * B / 2, (1 - node0) * B / 2};
    return collective_times(kind, bytes, nodes, links, true).hierarchical;
  };
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    EXPECT_LT(t(kind, 0.5), t(kind, 0.7));
    EXPECT_LT(t(kind, 0.5), t(kind, 0.3));
    // Each 10 % of the state moved off the even split costs its bytes once over the slow link.
    EXPECT_NEAR(t(kind, 0.8) - t(kind, 0.7), 0.1 * B / 1e8, 0.02 * 0.1 * B / 1e8);
  }
  // The stage itself, even: the leaders' ring, (K − 1)/K of the buffer.
  const TopologyLinks fast_nodes = [] {
    TopologyLinks l;
    l.intra = {0, 1e30};
    l.leaders = {1e-4, 1e8};
    return l;
  }();
  EXPECT_NEAR(collective_times(CollectiveKind::all_gather, {B / 4, B / 4, B / 4, B / 4}, nodes, fast_nodes, true)
                  .hierarchical,
              1e-4 + 0.5 * B / 1e8, 1e-9);
  // Unset, the leaders' link is the inter-node one.
  EXPECT_EQ(TopologyLinks{}.leader_link().bandwidth_Bps, TopologyLinks{}.inter.bandwidth_Bps);
}

// Where a second thread may run collectives, asynchronous gathers run on one of their own
// (flat or hierarchical), in issue order, beside the rank's own collectives on the
// calling thread: the same bits as the flat gather, errors in wait().
TEST(Hierarchical, AsynchronousGathersRunOnAThreadOfTheirOwn) {
  for (TopologyComm::Mode mode : {TopologyComm::Mode::hierarchical, TopologyComm::Mode::flat}) {
    LocalOptions o;
    o.timeout_s = 20;
    o.node_of_rank = {0, 0, 1, 1, 1};
    o.concurrent_threads = true;
    run_local(5, [&](Comm& base) {
      TopologyComm c(base, TopologyLinks{}, mode);
      ASSERT_TRUE(c.gathers_in_background());
      const int r = c.rank();
      for (const std::vector<int64_t>& counts : count_patterns(5)) {
        const std::string where = str(mode == TopologyComm::Mode::flat ? "flat" : "hierarchical", ", counts ",
                                      counts_str(counts), " rank ", r);
        // Two gathers in flight, and a reduce-scatter on this thread meanwhile.
        Tensor a = Tensor::full(Shape{sum_of(counts)}, -7.0f), b = Tensor::full(Shape{sum_of(counts)}, -7.0f);
        Tensor in = tensor_of(rank_input(r, counts[r]));
        CommRequestPtr first = c.all_gather_v_async(in, a, counts);
        CommRequestPtr second = c.all_gather_v_async(in, b, counts);
        Tensor full = tensor_of(rank_input(r, sum_of(counts)));
        Tensor part = Tensor::full(Shape{counts[r]}, -7.0f);
        c.reduce_scatter_v(full, part, counts);
        second->wait();
        first->wait();
        EXPECT_TRUE(bitwise_equal("background all_gather_v " + where, a.to_vector(), gather_reference(counts)));
        EXPECT_TRUE(bitwise_equal("second background all_gather_v " + where, b.to_vector(), gather_reference(counts)));
        std::vector<double> allowance;
        EXPECT_TRUE(within("reduce_scatter_v beside them " + where, part.to_vector(),
                           scatter_reference(counts, r, &allowance), allowance));
      }
      // Counts that do not match the ranks: the base's own error, as flat.
      Tensor out = Tensor::empty(Shape{3});
      EXPECT_THROW(c.all_gather_v_async(tensor_of({1}), out, {1, 1, 1})->wait(), Error);
    }, o);
  }
  // Without a second thread: none.
  LocalOptions o;
  o.node_of_rank = {0, 1};
  run_local(2, [&](Comm& base) { EXPECT_FALSE(TopologyComm(base, TopologyLinks{}).gathers_in_background()); }, o);
}

// Automatic mode on simulated nodes: small calls go hierarchical, and the results hold.
TEST(Hierarchical, AutomaticModeFollowsTheCostModel) {
  LocalOptions o;
  o.timeout_s = 20;
  o.node_of_rank = {0, 0, 0, 1, 1, 1};
  run_local(6, [&](Comm& base) {
    TopologyComm c(base, TopologyLinks{});
    const std::vector<int64_t> counts = {3, 0, 5, 2, 2, 1};
    Tensor in = tensor_of(rank_input(c.rank(), counts[c.rank()]));
    Tensor out = Tensor::empty(Shape{sum_of(counts)});
    c.all_gather_v(in, out, counts);
    EXPECT_EQ(c.last_choice().algo, TopologyAlgo::hierarchical);
    EXPECT_TRUE(bitwise_equal("auto all_gather_v", out.to_vector(), gather_reference(counts)));
    // Sub-communicators keep the topology and the mode.
    std::unique_ptr<Comm> half = c.split(c.rank() % 2);
    EXPECT_EQ(half->nodes(), 2);
  }, o);
}

}  // namespace
}  // namespace gpumix::dist
