// PeerWatch (dist/engine/peer_watch.h): the report of what was lost, and the connections of
// thread ranks made and closed in order (no rank is reported lost when all say goodbye).
// The loss itself, a node's processes killed under mpirun, is tested on the emulated cluster
// (tools/cluster/lose_node.sh, the cluster_mpi_lose_node test).
#include <gtest/gtest.h>

#include "dist/engine/peer_watch.h"

using gpumix::dist::peer_loss_message;

TEST(PeerLossMessage, NamesTheLostNodeAndItsRanks) {
  const std::vector<std::string> hosts = {"n0", "n0", "n1", "n1"};
  const std::string m = peer_loss_message(1, hosts, {false, false, true, true}, "resume it");
  EXPECT_NE(m.find("rank 1 (node n0): lost node n1 (ranks 2, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("; resume it"), std::string::npos) << m;
}

TEST(PeerLossMessage, APartOfANodeIsNamedAsRanks) {
  const std::vector<std::string> hosts = {"a", "b", "b", "c", "c"};
  const std::string m = peer_loss_message(0, hosts, {false, true, false, true, true}, "");
  EXPECT_NE(m.find("lost rank 1 on node b (its rank 2 still answer) and node c (ranks 3, 4)"), std::string::npos) << m;
}

TEST(PeerWatch, ThreadRanksConnectAndPartInOrder) {
  std::vector<std::vector<std::string>> seen(3);
  gpumix::dist::run_local(3, [&](gpumix::dist::Comm& comm) {
    for (int round = 0; round < 2; ++round) {  // made twice: nothing is left behind
      gpumix::dist::PeerWatch watch(comm, "");
      seen[comm.rank()] = watch.hosts();
      comm.barrier();
    }
  });
  for (const auto& h : seen) {
    ASSERT_EQ(h.size(), 3u);
    EXPECT_EQ(h[0], h[2]);
    EXPECT_FALSE(h[0].empty());
  }
}
