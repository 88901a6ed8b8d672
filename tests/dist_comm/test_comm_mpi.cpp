// The MPI backend of dist/comm, run under mpirun with 3 and 4 ranks (tests/dist_comm/
// meson.build). Every collective against the sequential reference (gathers bitwise; sums
// within the fp32 allowance of any summation order, (N-1) * FLT_EPSILON * sum |x|, since
// MPI's reduction order is its own); asynchronous and in-place forms; the split path for
// counts beyond MpiOptions::max_count; disagreement and bad sizes: a clear error on every
// rank; byte counters. Only rank 0 prints the run; every rank prints its own failures, and
// all ranks exit with the worst rank's status.
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "core/error.h"
#include "tests/dist_comm/comm_test_util.h"

namespace gpumix::dist {
namespace {

using namespace test;  // the shared references and inputs (comm_test_util.h)

Comm* g_comm = nullptr;

Tensor tensor_of(const std::vector<float>& v) {
  return Tensor::from_vector(v, Shape{(int64_t)v.size()});
}

// The gather / scatter / all-reduce / broadcast checks on `comm`, sync or async.
void check_collectives(Comm& comm, bool async) {
  const int n = comm.size();
  const int r = comm.rank();
  for (const std::vector<int64_t>& counts : count_patterns(n)) {
    const std::string where = str(async ? "async " : "", "counts ", counts_str(counts), " rank ", r);
    Tensor in = tensor_of(rank_input(r, counts[r]));
    Tensor out = Tensor::full(Shape{sum_of(counts)}, -7.0f);
    if (async)
      comm.all_gather_v_async(in, out, counts)->wait();
    else
      comm.all_gather_v(in, out, counts);
    EXPECT_TRUE(bitwise_equal("all_gather_v " + where, out.to_vector(), gather_reference(counts)));

    Tensor full = tensor_of(rank_input(r, sum_of(counts)));
    Tensor mine = Tensor::full(Shape{counts[r]}, -7.0f);
    if (async)
      comm.reduce_scatter_v_async(full, mine, counts)->wait();
    else
      comm.reduce_scatter_v(full, mine, counts);
    std::vector<double> allowance;
    const std::vector<float> ref = scatter_reference(counts, r, &allowance);
    EXPECT_TRUE(within("reduce_scatter_v " + where, mine.to_vector(), ref, allowance));
    EXPECT_TRUE(bitwise_equal("input unchanged " + where, full.to_vector(), rank_input(r, sum_of(counts))));

    // In place.
    const int64_t off = offsets_of(counts)[r];
    Tensor buf = Tensor::full(Shape{sum_of(counts)}, -7.0f);
    Tensor block = buf.flat_slice(off, counts[r]);
    block.copy_from(in);
    if (async)
      comm.all_gather_v_async(block, buf, counts)->wait();
    else
      comm.all_gather_v(block, buf, counts);
    EXPECT_TRUE(bitwise_equal("in-place all_gather_v " + where, buf.to_vector(), gather_reference(counts)));
    Tensor full2 = tensor_of(rank_input(r, sum_of(counts)));
    Tensor slot = full2.flat_slice(off, counts[r]);
    if (async)
      comm.reduce_scatter_v_async(full2, slot, counts)->wait();
    else
      comm.reduce_scatter_v(full2, slot, counts);
    EXPECT_TRUE(within("in-place reduce_scatter_v " + where, slot.to_vector(), ref, allowance));
  }

  for (int64_t numel : {0, 1, 7, 3000}) {
    Tensor t = tensor_of(rank_input(r, numel, 3));
    if (async)
      comm.all_reduce_sum_async(t)->wait();
    else
      comm.all_reduce_sum(t);
    std::vector<float> ar((size_t)numel, 0.0f);
    std::vector<double> al((size_t)numel, 0.0);
    for (int q = 0; q < n; ++q) {
      const std::vector<float> v = rank_input(q, numel, 3);
      for (int64_t i = 0; i < numel; ++i) {
        ar[(size_t)i] = q == 0 ? v[(size_t)i] : ar[(size_t)i] + v[(size_t)i];
        al[(size_t)i] += std::fabs((double)v[(size_t)i]) * (n - 1) * FLT_EPSILON;
      }
    }
    EXPECT_TRUE(within(str(async ? "async " : "", "all_reduce numel ", numel), t.to_vector(), ar, al));
  }

  for (int root = 0; root < n; ++root) {
    Tensor t = tensor_of(rank_input(r, 37));
    if (async)
      comm.broadcast_async(t, root)->wait();
    else
      comm.broadcast(t, root);
    EXPECT_TRUE(bitwise_equal(str("broadcast root ", root), t.to_vector(), rank_input(root, 37)));
  }
}

TEST(CommMpi, Basics) {
  EXPECT_EQ(g_comm->backend(), "mpi");
  EXPECT_GE(g_comm->size(), 1);
  EXPECT_TRUE(mpi_built());
  EXPECT_TRUE(launched_by_mpi());
}

// Every rank of this test runs on one host: one node, named by MPI_Get_processor_name,
// the same on every rank (a node-split over namespaces is tools/cluster's to show).
TEST(CommMpi, TopologyFromTheLibrary) {
  Comm& c = *g_comm;
  ASSERT_EQ((int)c.node_of_rank().size(), c.size());
  EXPECT_EQ(c.nodes(), 1);
  EXPECT_EQ(c.node(), 0);
  for (int r = 0; r < c.size(); ++r) EXPECT_EQ(c.node_of_rank()[r], 0) << "rank " << r;
  char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  ASSERT_EQ(c.node_names().size(), 1u);
  EXPECT_EQ(c.node_names()[0], std::string(name));
  EXPECT_EQ(c.ranks_of_node(0).size(), (size_t)c.size());
}

TEST(CommMpi, SplitMakesGroups) {
  Comm& c = *g_comm;
  std::unique_ptr<Comm> sub = c.split(c.rank() % 2);
  const int n = c.size(), mine = (n + 1 - c.rank() % 2) / 2;  // ranks of my parity
  EXPECT_EQ(sub->size(), mine);
  EXPECT_EQ(sub->rank(), c.rank() / 2);
  EXPECT_EQ(sub->nodes(), 1);
  double expect = 0;
  for (int r = c.rank() % 2; r < n; r += 2) expect += r;
  EXPECT_EQ(sub->all_reduce_sum((double)c.rank()), expect);
  Tensor t = Tensor::full({2}, (float)c.rank());
  sub->all_reduce_sum(t);
  EXPECT_EQ(t.to_vector()[1], (float)expect);
}

TEST(CommMpi, CollectivesMatchTheReference) { check_collectives(*g_comm, false); }

TEST(CommMpi, AsyncFormsGiveTheSameResults) {
  check_collectives(*g_comm, true);
  // Several in flight at once, waited for in another order than issued.
  Comm& comm = *g_comm;
  const int n = comm.size(), r = comm.rank();
  const std::vector<int64_t> counts = count_patterns(n)[1];
  Tensor gin = tensor_of(rank_input(r, counts[r]));
  Tensor gout = Tensor::zeros(Shape{sum_of(counts)});
  Tensor sin = tensor_of(rank_input(r, sum_of(counts)));
  Tensor sout = Tensor::zeros(Shape{counts[r]});
  Tensor bc = tensor_of(rank_input(r, 9));
  CommRequestPtr a = comm.all_gather_v_async(gin, gout, counts);
  CommRequestPtr b = comm.reduce_scatter_v_async(sin, sout, counts);
  CommRequestPtr c = comm.broadcast_async(bc, n - 1);
  c->wait();
  b->wait();
  a->wait();
  a->wait();
  EXPECT_TRUE(a->done());
  EXPECT_TRUE(bitwise_equal("overlapped all_gather_v", gout.to_vector(), gather_reference(counts)));
  std::vector<double> allowance;
  const std::vector<float> ref = scatter_reference(counts, r, &allowance);
  EXPECT_TRUE(within("overlapped reduce_scatter_v", sout.to_vector(), ref, allowance));
  EXPECT_TRUE(bitwise_equal("overlapped broadcast", bc.to_vector(), rank_input(n - 1, 9)));
}

TEST(CommMpi, SplitPathBeyondMaxCount) {
  // Counts above max_count take the per-root, per-chunk path (as counts > INT_MAX would).
  MpiOptions o;
  o.max_count = 3;
  std::unique_ptr<Comm> small = make_mpi_comm(o);
  check_collectives(*small, false);
  check_collectives(*small, true);
}

TEST(CommMpi, ScalarsAreTheRankOrderSumOnEveryRank) {
  Comm& comm = *g_comm;
  const int n = comm.size();
  auto x = [](int q) { return q % 2 == 0 ? 1e16 + q : 1.0 + q * 0.25; };
  double ref = x(0);
  for (int q = 1; q < n; ++q) ref += x(q);
  EXPECT_EQ(comm.all_reduce_sum(x(comm.rank())), ref);
  EXPECT_EQ(comm.all_reduce_max(comm.rank() * 2.5 - 1), (n - 1) * 2.5 - 1);
}

TEST(CommMpi, BroadcastOtherDtypesAndBf16Gather) {
  Comm& comm = *g_comm;
  const int n = comm.size(), r = comm.rank();
  Tensor ti = Tensor::from_vector(std::vector<int32_t>(5, r * 10 + 1), Shape{5});
  comm.broadcast(ti, n - 1);
  EXPECT_EQ(ti.to_int_vector(), std::vector<int32_t>(5, (n - 1) * 10 + 1));
  const std::vector<int64_t> counts = count_patterns(n)[0];
  Tensor in = tensor_of(rank_input(r, counts[r])).to(DType::bf16);
  Tensor out = Tensor::zeros(Shape{sum_of(counts)}, DType::bf16);
  comm.all_gather_v(in, out, counts);
  const std::vector<float> ref =
      tensor_of(gather_reference(counts)).to(DType::bf16).to_vector();
  EXPECT_TRUE(bitwise_equal("bf16 all_gather_v", out.to_vector(), ref));
}

TEST(CommMpi, MismatchedCountsErrOnEveryRank) {
  Comm& comm = *g_comm;
  const int n = comm.size(), r = comm.rank();
  std::vector<int64_t> counts = count_patterns(n)[0];
  const std::vector<int64_t> good = counts;
  if (r == 1) {
    counts[0] += 1;
    counts[n - 1] -= 1;
  }
  Tensor in = Tensor::zeros(Shape{counts[r]});
  Tensor out = Tensor::zeros(Shape{sum_of(counts)});
  std::vector<int64_t> bad = good;
  bad[0] += 1;
  bad[n - 1] -= 1;
  const std::string r0 = "rank 0 " + counts_str(good);
  const std::string r1 = "rank 1 " + counts_str(bad);
  EXPECT_COMM_ERROR(comm.all_gather_v(in, out, counts), "mpi comm", "all_gather_v(f32) counts",
                    "the ranks disagree", r0.c_str(), r1.c_str());
  Tensor full = Tensor::zeros(Shape{sum_of(counts)});
  Tensor mine = Tensor::zeros(Shape{counts[r]});
  EXPECT_COMM_ERROR(comm.reduce_scatter_v(full, mine, counts), "reduce_scatter_v", r1.c_str());
  EXPECT_COMM_ERROR(comm.all_gather_v_async(in, out, counts), "all_gather_v", r1.c_str());
  comm.barrier();  // still usable
}

TEST(CommMpi, BadSizesOnOneRankErrOnEveryRank) {
  Comm& comm = *g_comm;
  const int n = comm.size(), r = comm.rank();
  const std::vector<int64_t> counts = count_patterns(n)[0];
  Tensor in = Tensor::zeros(Shape{r == 1 ? counts[r] + 2 : counts[r]});
  Tensor out = Tensor::zeros(Shape{sum_of(counts)});
  const std::string piece = str("rank 1: in has ", counts[1] + 2, " elements but counts[1] = ", counts[1]);
  EXPECT_COMM_ERROR(comm.all_gather_v(in, out, counts), piece.c_str());
  Tensor b = Tensor::zeros(Shape{3});
  const std::string root_piece = str("root ", n, " is not a rank");
  EXPECT_COMM_ERROR(comm.broadcast(b, n), root_piece.c_str());
  Tensor t = Tensor::zeros(Shape{r == 0 ? 4 : 5});
  EXPECT_COMM_ERROR(comm.all_reduce_sum(t), "all_reduce(f32) numel", "rank 0 [4]", "rank 1 [5]");
  comm.barrier();
}

TEST(CommMpi, DifferentCollectivesErrOnEveryRank) {
  Comm& comm = *g_comm;
  Tensor t = Tensor::zeros(Shape{4});
  if (comm.rank() == 0)
    EXPECT_COMM_ERROR(comm.broadcast(t, 0), "different collectives", "rank 0 broadcast",
                      "rank 1 all_reduce");
  else
    EXPECT_COMM_ERROR(comm.all_reduce_sum(t), "different collectives");
  comm.barrier();
}

TEST(CommMpi, Agree) {
  Comm& comm = *g_comm;
  comm.agree("shard layout", {3, 1, 4});
  std::vector<int64_t> v = {3, 1, 4};
  if (comm.rank() == 2) v[2] = 5;
  EXPECT_COMM_ERROR(comm.agree("shard layout", v), "shard layout", "rank 0 [3, 1, 4]",
                    "rank 2 [3, 1, 5]");
  EXPECT_COMM_ERROR(comm.agree("plan", {1}, comm.rank() == 1 ? "shares sum to 0.9" : ""),
                    "rank 1: shares sum to 0.9");
}

TEST(CommMpi, ByteCountersCountThePayload) {
  Comm& comm = *g_comm;
  const int n = comm.size(), r = comm.rank();
  comm.reset_stats();
  const std::vector<int64_t> counts = count_patterns(n)[1];
  const int64_t T = sum_of(counts), E = 4;
  Tensor in = Tensor::zeros(Shape{counts[r]});
  Tensor out = Tensor::zeros(Shape{T});
  comm.all_gather_v(in, out, counts);
  comm.all_gather_v_async(in, out, counts)->wait();
  Tensor full = Tensor::zeros(Shape{T});
  Tensor mine = Tensor::zeros(Shape{counts[r]});
  comm.reduce_scatter_v(full, mine, counts);
  Tensor ar = Tensor::zeros(Shape{10});
  comm.all_reduce_sum_async(ar)->wait();
  comm.barrier();
  const CommStats s = comm.stats();
  EXPECT_EQ(s[CommOp::all_gather_v].calls, 2);
  EXPECT_EQ(s[CommOp::all_gather_v].bytes_sent, 2 * counts[r] * E * (n - 1));
  EXPECT_EQ(s[CommOp::all_gather_v].bytes_received, 2 * (T - counts[r]) * E);
  EXPECT_EQ(s[CommOp::reduce_scatter_v].bytes_sent, (T - counts[r]) * E);
  EXPECT_EQ(s[CommOp::reduce_scatter_v].bytes_received, counts[r] * E * (n - 1));
  EXPECT_EQ(s[CommOp::all_reduce].calls, 1);
  EXPECT_EQ(s[CommOp::all_reduce].bytes_sent, 10 * E * (n - 1));
  EXPECT_EQ(s[CommOp::barrier].calls, 1);
  const double sent = comm.all_reduce_sum((double)s.bytes_sent());
  const double received = comm.all_reduce_sum((double)s.bytes_received());
  EXPECT_EQ(sent, received);
}

// Prints only this rank's failures, prefixed with the rank (ranks other than 0).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace gpumix::dist

int main(int argc, char** argv) {
  gpumix::dist::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.world_rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new gpumix::dist::FailurePrinter(mpi.world_rank()));
  }
  int rc = 0;
  {
    std::unique_ptr<gpumix::dist::Comm> comm = gpumix::dist::make_mpi_comm();
    if (comm->size() < 3) {
      if (comm->rank() == 0)
        std::fprintf(stderr, "test_comm_mpi needs at least 3 ranks: mpirun -np 3 %s\n", argv[0]);
      return 1;
    }
    gpumix::dist::g_comm = comm.get();
    rc = RUN_ALL_TESTS();
    // Every rank exits with the worst status of all ranks.
    rc = (int)comm->all_reduce_max((double)rc);
    gpumix::dist::g_comm = nullptr;
  }
  return rc;
}
