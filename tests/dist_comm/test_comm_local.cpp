// The local backend of dist/comm: ranks as threads. Every collective against a sequential
// reference, bitwise (the local backend sums in rank order); the asynchronous forms; the
// in-place forms; disagreement between ranks, a failing rank, a rank that never arrives,
// and a rank that leaves: each ends every rank with a clear error quickly, never a hang;
// the byte counters; the NCCL cost model (a pure function, testable without a GPU).
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "tests/dist_comm/comm_test_util.h"

namespace gpumix::dist {
namespace {

using namespace test;  // the shared references and inputs (comm_test_util.h)

LocalOptions quick(double timeout_s = 2.0) {
  LocalOptions o;
  o.timeout_s = timeout_s;
  return o;
}

Tensor tensor_of(const std::vector<float>& v) {
  return Tensor::from_vector(v, Shape{(int64_t)v.size()});
}

// ---- topology --------------------------------------------------------------------------------

TEST(CommLocal, TopologyDefaultsToOneNodeNamedAfterTheHost) {
  run_local(3, [](Comm& c) {
    EXPECT_EQ(c.nodes(), 1);
    EXPECT_EQ(c.node_of_rank(), (std::vector<int>{0, 0, 0}));
    EXPECT_EQ(c.node_names(), (std::vector<std::string>{detail::host_name()}));
    EXPECT_EQ(c.node(), 0);
  });
}

TEST(CommLocal, TopologyFromOptionsIsRenumberedInRankOrder) {
  LocalOptions o = quick();
  o.node_of_rank = {7, 7, 3, 9, 3};  // labels, not indices
  run_local(5, [](Comm& c) {
    EXPECT_EQ(c.node_of_rank(), (std::vector<int>{0, 0, 1, 2, 1}));
    EXPECT_EQ(c.node_names(), (std::vector<std::string>{"node0", "node1", "node2"}));
    EXPECT_EQ(c.nodes(), 3);
    EXPECT_EQ(c.node(), c.node_of_rank()[c.rank()]);
    EXPECT_EQ(c.ranks_of_node(1), (std::vector<int>{2, 4}));
  }, o);
}

TEST(CommLocal, TopologyOfTheWrongLengthIsRefused) {
  LocalOptions o = quick();
  o.node_of_rank = {0, 1};
  try {
    LocalGroup g(3, o);
    FAIL() << "a 2-entry topology for 3 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node of 2 ranks but the group has 3"), std::string::npos) << e.what();
  }
}

TEST(CommLocal, SplitMakesGroupsWithTheirNodes) {
  LocalOptions o = quick();
  o.node_of_rank = {0, 0, 1, 1, 2};
  run_local(5, [](Comm& c) {
    // By parity: {0, 2, 4} and {1, 3}; twice, so that successive splits do not mix.
    for (int round = 0; round < 2; ++round) {
      std::unique_ptr<Comm> sub = c.split(c.rank() % 2);
      const bool even = c.rank() % 2 == 0;
      EXPECT_EQ(sub->size(), even ? 3 : 2);
      EXPECT_EQ(sub->rank(), c.rank() / 2);
      EXPECT_EQ(sub->backend(), "local");
      // The parent's nodes and names, renumbered in the group.
      EXPECT_EQ(sub->node_of_rank(), even ? (std::vector<int>{0, 1, 2}) : (std::vector<int>{0, 1}));
      EXPECT_EQ(sub->node_names(), even ? (std::vector<std::string>{"node0", "node1", "node2"})
                                        : (std::vector<std::string>{"node0", "node1"}));
      // Collectives stay inside the group: the sum of the group's ranks.
      Tensor t = Tensor::full({3}, (float)c.rank());
      sub->all_reduce_sum(t);
      EXPECT_EQ(t.to_vector()[0], even ? 0.0f + 2 + 4 : 1.0f + 3) << "rank " << c.rank();
      EXPECT_EQ(sub->all_reduce_sum(1.0), even ? 3.0 : 2.0);
    }
  }, o);
}

// ---- correctness against the sequential reference -------------------------------------------

TEST(CommLocal, AllGatherVMatchesReferenceBitwise) {
  for (int n = 1; n <= 4; ++n) {
    for (const std::vector<int64_t>& counts : count_patterns(n)) {
      const std::vector<float> ref = gather_reference(counts);
      run_local(n, [&](Comm& comm) {
        EXPECT_EQ(comm.size(), n);
        EXPECT_EQ(comm.backend(), "local");
        Tensor in = tensor_of(rank_input(comm.rank(), counts[comm.rank()]));
        Tensor out = Tensor::full(Shape{sum_of(counts)}, -7.0f);
        comm.all_gather_v(in, out, counts);
        EXPECT_TRUE(bitwise_equal(str("n ", n, " counts ", counts_str(counts), " rank ", comm.rank()),
                                  out.to_vector(), ref));
      }, quick());
    }
  }
}

TEST(CommLocal, ReduceScatterVMatchesRankOrderSumBitwise) {
  for (int n = 1; n <= 4; ++n) {
    for (const std::vector<int64_t>& counts : count_patterns(n)) {
      run_local(n, [&](Comm& comm) {
        const int r = comm.rank();
        Tensor in = tensor_of(rank_input(r, sum_of(counts)));
        Tensor out = Tensor::full(Shape{counts[r]}, -7.0f);
        comm.reduce_scatter_v(in, out, counts);
        EXPECT_TRUE(bitwise_equal(str("n ", n, " counts ", counts_str(counts), " rank ", r),
                                  out.to_vector(), scatter_reference(counts, r)));
        // The input is left alone.
        EXPECT_TRUE(bitwise_equal("input", in.to_vector(), rank_input(r, sum_of(counts))));
      }, quick());
    }
  }
}

TEST(CommLocal, InPlaceForms) {
  for (int n = 1; n <= 4; ++n) {
    for (const std::vector<int64_t>& counts : count_patterns(n)) {
      run_local(n, [&](Comm& comm) {
        const int r = comm.rank();
        const int64_t off = offsets_of(counts)[r];
        // all-gather: in is out's block of this rank.
        Tensor buf = Tensor::full(Shape{sum_of(counts)}, -7.0f);
        Tensor mine = buf.flat_slice(off, counts[r]);
        mine.copy_from(tensor_of(rank_input(r, counts[r])));
        comm.all_gather_v(mine, buf, counts);
        EXPECT_TRUE(bitwise_equal("in-place all_gather_v", buf.to_vector(), gather_reference(counts)));
        // reduce-scatter: out is in's block of this rank.
        Tensor full = tensor_of(rank_input(r, sum_of(counts)));
        Tensor slot = full.flat_slice(off, counts[r]);
        comm.reduce_scatter_v(full, slot, counts);
        EXPECT_TRUE(bitwise_equal("in-place reduce_scatter_v", slot.to_vector(),
                                  scatter_reference(counts, r)));
      }, quick());
    }
  }
}

TEST(CommLocal, AllReduceIsTheRankOrderSumOnEveryRank) {
  for (int n = 1; n <= 4; ++n) {
    for (int64_t numel : {0, 1, 5, 3000}) {
      run_local(n, [&](Comm& comm) {
        Tensor t = tensor_of(rank_input(comm.rank(), numel, 3));
        comm.all_reduce_sum(t);
        std::vector<float> ref((size_t)numel, 0.0f);
        for (int q = 0; q < n; ++q) {
          const std::vector<float> v = rank_input(q, numel, 3);
          for (int64_t i = 0; i < numel; ++i)
            ref[(size_t)i] = q == 0 ? v[(size_t)i] : ref[(size_t)i] + v[(size_t)i];
        }
        EXPECT_TRUE(bitwise_equal(str("all_reduce n ", n, " numel ", numel), t.to_vector(), ref));
      }, quick());
    }
  }
}

TEST(CommLocal, ScalarsSumInRankOrderAndMax) {
  run_local(4, [&](Comm& comm) {
    const double x[4] = {1e16, 1.0, -1e16, 3.5};
    // (((1e16 + 1) - 1e16) + 3.5) in double: 1e16 + 1 rounds to 1e16, so 3.5 exactly.
    EXPECT_EQ(comm.all_reduce_sum(x[comm.rank()]), ((x[0] + x[1]) + x[2]) + x[3]);
    EXPECT_EQ(comm.all_reduce_max((double)comm.rank() * 2.5 - 1), 6.5);
  }, quick());
}

TEST(CommLocal, BroadcastFromEveryRootAndDtypes) {
  for (int n = 1; n <= 4; ++n) {
    for (int root = 0; root < n; ++root) {
      run_local(n, [&](Comm& comm) {
        Tensor t = tensor_of(rank_input(comm.rank(), 37));
        comm.broadcast(t, root);
        EXPECT_TRUE(bitwise_equal("broadcast", t.to_vector(), rank_input(root, 37)));
        Tensor ti = Tensor::from_vector(std::vector<int32_t>(5, comm.rank() * 10 + 1), Shape{5});
        comm.broadcast(ti, root);
        EXPECT_EQ(ti.to_int_vector(), std::vector<int32_t>(5, root * 10 + 1));
      }, quick());
    }
  }
}

TEST(CommLocal, AllGatherVMovesBf16AndI32) {
  const std::vector<int64_t> counts = {1, 0, 4};
  run_local(3, [&](Comm& comm) {
    const int r = comm.rank();
    Tensor in = tensor_of(rank_input(r, counts[r])).to(DType::bf16);
    Tensor out = Tensor::zeros(Shape{5}, DType::bf16);
    comm.all_gather_v(in, out, counts);
    const std::vector<float> ref = Tensor::from_vector(gather_reference(counts), Shape{5})
                                       .to(DType::bf16)
                                       .to_vector();
    EXPECT_TRUE(bitwise_equal("bf16", out.to_vector(), ref));

    std::vector<int32_t> mine((size_t)counts[r], 100 + r);
    Tensor iin = Tensor::from_vector(mine, Shape{counts[r]});
    Tensor iout = Tensor::from_vector(std::vector<int32_t>(5, -1), Shape{5});
    comm.all_gather_v(iin, iout, counts);
    EXPECT_EQ(iout.to_int_vector(), (std::vector<int32_t>{100, 102, 102, 102, 102}));
  }, quick());
}

TEST(CommLocal, BarrierOrdersTheRanks) {
  std::atomic<int> before{0};
  run_local(4, [&](Comm& comm) {
    if (comm.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    before.fetch_add(1);
    comm.barrier();
    EXPECT_EQ(before.load(), 4);
  }, quick());
}

TEST(CommLocal, AgreeAcceptsEqualValuesAndNamesTheDisagreement) {
  run_local(3, [&](Comm& comm) {
    comm.agree("shard layout", {3, 1, 4});
    std::vector<int64_t> v = {3, 1, 4};
    if (comm.rank() == 2) v[2] = 5;
    EXPECT_COMM_ERROR(comm.agree("shard layout", v), "shard layout", "rank 0 [3, 1, 4]",
                      "rank 2 [3, 1, 5]");
    EXPECT_COMM_ERROR(comm.agree("plan", {1}, comm.rank() == 1 ? "shares sum to 0.9" : ""),
                      "plan", "rank 1: shares sum to 0.9");
    comm.barrier();  // still usable
  }, quick());
}

// A user's mistake is the run's when every rank found it or one rank checked for all: the
// message alone, naming no rank and no backend. Found by some ranks in their own part, or a
// rank's own failure (not an InputError), it names the ranks.
TEST(CommLocal, AUsersMistakeIsSaidOnceAndARanksOwnFailureNamesTheRank) {
  const std::string mistake = "run folder runs/a already holds a run; pass another --out";
  const auto what_of = [](Comm& comm, const std::string& local_error) -> std::string {
    try {
      comm.agree("run folder", {}, local_error);
    } catch (const CollectiveError& e) {
      return e.what();
    }
    return "(no throw)";
  };
  const InputError input(mistake);
  const Error bug("a tensor of 3 elements where 4 were expected [x.cpp:1]");
  run_local(3, [&](Comm& comm) {
    const int r = comm.rank();
    // Rank 0 checked for all.
    EXPECT_EQ(what_of(comm, r == 0 ? local_error_of(input, true) : ""), mistake);
    // Every rank found the same in its own part.
    EXPECT_EQ(what_of(comm, local_error_of(input)), mistake);
    // One rank found it in its own part (say, its device): the rank is named.
    const std::string one = what_of(comm, r == 1 ? local_error_of(input) : "");
    EXPECT_EQ(one, "local comm: run folder failed on 1 of 3 ranks: rank 1: " + mistake);
    // The ranks found different mistakes: each is named.
    const std::string differ = what_of(comm, local_error_of(InputError(str("rank-specific ", r)), true));
    EXPECT_NE(differ.find("rank 0: rank-specific 0; rank 1: rank-specific 1; rank 2: rank-specific 2"),
              std::string::npos) << differ;
    // Not a user's mistake: named even when only rank 0 checked.
    const std::string own = what_of(comm, r == 0 ? local_error_of(bug, true) : "");
    EXPECT_EQ(own, std::string("local comm: run folder failed on 1 of 3 ranks: rank 0: ") + bug.what());
    comm.barrier();
  }, quick());
  // One rank: the message as it is, unmarked.
  run_local(1, [&](Comm& comm) { EXPECT_EQ(what_of(comm, local_error_of(input, true)), mistake); }, quick());
}

TEST(CommLocal, AgreeOnOneRankThrowsTheLocalErrorAsItIs) {
  run_local(1, [&](Comm& comm) {
    comm.agree("run folder", {7});
    try {
      comm.agree("run folder", {}, "run folder runs/a already holds a run");
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "run folder runs/a already holds a run");
    }
    comm.barrier();
  }, quick());
}

// ---- asynchronous forms ----------------------------------------------------------------------

TEST(CommLocal, AsyncFormsGiveTheSameResults) {
  for (int n = 1; n <= 4; ++n) {
    for (const std::vector<int64_t>& counts : count_patterns(n)) {
      run_local(n, [&](Comm& comm) {
        const int r = comm.rank();
        Tensor gin = tensor_of(rank_input(r, counts[r]));
        Tensor gout = Tensor::zeros(Shape{sum_of(counts)});
        Tensor sin = tensor_of(rank_input(r, sum_of(counts)));
        Tensor sout = Tensor::zeros(Shape{counts[r]});
        Tensor ar = tensor_of(rank_input(r, 11, 3));
        Tensor bc = tensor_of(rank_input(r, 6));
        // Several in flight, waited for in another order than issued.
        CommRequestPtr a = comm.all_gather_v_async(gin, gout, counts);
        CommRequestPtr b = comm.reduce_scatter_v_async(sin, sout, counts);
        CommRequestPtr c = comm.all_reduce_sum_async(ar);
        CommRequestPtr d = comm.broadcast_async(bc, n - 1);
        // A synchronous call after them runs after them.
        const double s = comm.all_reduce_sum(1.0);
        EXPECT_EQ(s, (double)n);
        d->wait();
        b->wait();
        c->wait();
        a->wait();
        a->wait();  // again: nothing
        EXPECT_TRUE(a->done());
        EXPECT_TRUE(bitwise_equal("async all_gather_v", gout.to_vector(), gather_reference(counts)));
        EXPECT_TRUE(bitwise_equal("async reduce_scatter_v", sout.to_vector(),
                                  scatter_reference(counts, r)));
        Tensor ar_sync = tensor_of(rank_input(r, 11, 3));
        comm.all_reduce_sum(ar_sync);
        EXPECT_TRUE(bitwise_equal("async all_reduce", ar.to_vector(), ar_sync.to_vector()));
        EXPECT_TRUE(bitwise_equal("async broadcast", bc.to_vector(), rank_input(n - 1, 6)));
      }, quick());
    }
  }
}

TEST(CommLocal, AsyncOverlapsWithComputeOnTheCallingThread) {
  // The gather completes while the calling thread is busy elsewhere (here: sleeping).
  run_local(3, [&](Comm& comm) {
    const std::vector<int64_t> counts = {2, 3, 4};
    Tensor in = tensor_of(rank_input(comm.rank(), counts[comm.rank()]));
    Tensor out = Tensor::zeros(Shape{9});
    CommRequestPtr req = comm.all_gather_v_async(in, out, counts);
    bool finished = false;
    for (int i = 0; i < 200 && !finished; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      finished = req->done();
    }
    EXPECT_TRUE(finished);
    req->wait();
    EXPECT_TRUE(bitwise_equal("overlapped", out.to_vector(), gather_reference(counts)));
  }, quick());
}

TEST(CommLocal, AsyncErrorsSurfaceInWait) {
  run_local(2, [&](Comm& comm) {
    std::vector<int64_t> counts = {1, 2};
    if (comm.rank() == 1) counts = {2, 1};
    Tensor in = Tensor::zeros(Shape{counts[comm.rank()]});
    Tensor out = Tensor::zeros(Shape{3});
    CommRequestPtr req = comm.all_gather_v_async(in, out, counts);
    EXPECT_COMM_ERROR(req->wait(), "all_gather_v", "rank 0 [1, 2]", "rank 1 [2, 1]");
    comm.barrier();
  }, quick());
}

// ---- disagreement and failures: a clear error on every rank, quickly ---------------------------

TEST(CommLocal, MismatchedCountsErrOnEveryRankWithoutHanging) {
  std::atomic<int> errors{0};
  run_local(3, [&](Comm& comm) {
    std::vector<int64_t> counts = {1, 2, 5};
    if (comm.rank() == 2) counts = {1, 3, 4};
    Tensor in = Tensor::zeros(Shape{counts[comm.rank()]});
    Tensor out = Tensor::zeros(Shape{8});
    EXPECT_COMM_ERROR(comm.all_gather_v(in, out, counts), "all_gather_v(f32) counts",
                      "the ranks disagree", "rank 0 [1, 2, 5]", "rank 1 [1, 2, 5]",
                      "rank 2 [1, 3, 4]");
    errors.fetch_add(1);
    Tensor gin = Tensor::zeros(Shape{8});
    Tensor gout = Tensor::zeros(Shape{counts[comm.rank()]});
    EXPECT_COMM_ERROR(comm.reduce_scatter_v(gin, gout, counts), "reduce_scatter_v", "rank 2 [1, 3, 4]");
    errors.fetch_add(1);
    comm.barrier();  // the group is still usable after an agreed error
  }, quick(30));
  // Each rank's error is the disagreement, told at once: a rank left waiting would have
  // ended in the 30 s timeout's error instead (no time is asserted: a loaded machine's).
  EXPECT_EQ(errors.load(), 6);
}

TEST(CommLocal, BadSizesOnOneRankErrOnEveryRank) {
  run_local(3, [&](Comm& comm) {
    const std::vector<int64_t> counts = {1, 2, 5};
    const int r = comm.rank();
    Tensor in = Tensor::zeros(Shape{r == 1 ? 4 : counts[r]});
    Tensor out = Tensor::zeros(Shape{8});
    EXPECT_COMM_ERROR(comm.all_gather_v(in, out, counts), "all_gather_v",
                      "rank 1: in has 4 elements but counts[1] = 2");
    // Counts that do not sum to the buffer.
    Tensor sin = Tensor::zeros(Shape{r == 0 ? 9 : 8});
    Tensor sout = Tensor::zeros(Shape{counts[r]});
    EXPECT_COMM_ERROR(comm.reduce_scatter_v(sin, sout, counts),
                      "rank 0: in has 9 elements but the counts [1, 2, 5] sum to 8");
    // Wrong number of counts, negative counts, a bad root, a non-f32 reduction.
    std::vector<int64_t> bad = counts;
    if (r == 2) bad = {1, 7};
    Tensor o2 = Tensor::zeros(Shape{8});
    EXPECT_COMM_ERROR(comm.all_gather_v(Tensor::zeros(Shape{bad[std::min(r, 1)]}), o2, bad),
                      "counts has 2 entries [1, 7] but there are 3 ranks");
    Tensor b = Tensor::zeros(Shape{3});
    EXPECT_COMM_ERROR(comm.broadcast(b, 3), "root 3 is not a rank (0..2)");
    Tensor i32 = Tensor::from_vector(std::vector<int32_t>(3, 1), Shape{3});
    EXPECT_COMM_ERROR(comm.all_reduce_sum(i32), "reductions take f32");
    comm.barrier();
  }, quick(30));
}

TEST(CommLocal, DifferentCollectivesErrOnEveryRank) {
  run_local(2, [&](Comm& comm) {
    Tensor t = Tensor::zeros(Shape{4});
    if (comm.rank() == 0)
      EXPECT_COMM_ERROR(comm.broadcast(t, 0), "different collectives", "rank 0 broadcast",
                        "rank 1 all_reduce");
    else
      EXPECT_COMM_ERROR(comm.all_reduce_sum(t), "different collectives");
  }, quick(30));
}

TEST(CommLocal, OneRankThrowingFailsTheOthersQuickly) {
  std::mutex mu;
  std::vector<std::string> messages;
  bool caught = false;
  try {
    run_local(4, [&](Comm& comm) {
      if (comm.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        throw Error("boom: out of batches");
      }
      const std::vector<int64_t> counts = {1, 1, 1, 1};
      Tensor in = Tensor::zeros(Shape{1});
      Tensor out = Tensor::zeros(Shape{4});
      try {
        comm.all_gather_v(in, out, counts);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        messages.push_back(e.what());
        throw;
      }
    }, quick(60));
  } catch (const Error& e) {
    caught = true;
    // run_local rethrows the cause, not an echo.
    EXPECT_NE(std::string(e.what()).find("boom: out of batches"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(caught);
  // The waiters were aborted by the failure, not by the 60 s timeout (whose error says
  // "timed out"): how they end, not how soon, which a loaded machine decides.
  ASSERT_EQ(messages.size(), 3u);
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_NE(messages[i].find("all_gather_v aborted because rank 2 failed: boom: out of batches"),
              std::string::npos)
        << messages[i];
    EXPECT_EQ(messages[i].find("timed out"), std::string::npos) << messages[i];
  }
}

TEST(CommLocal, AFailedGroupRejectsLaterCollectives) {
  EXPECT_THROW(run_local(3, [&](Comm& comm) {
    if (comm.rank() == 0) throw std::runtime_error("rank zero broke");
    // Wait until the failure is known, then try: must throw at once, not wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_COMM_ERROR(comm.barrier(), "barrier aborted because rank 0 failed: rank zero broke");
  }, quick(60)), std::runtime_error);
}

TEST(CommLocal, ARankThatNeverArrivesTimesOutNamingIt) {
  std::vector<std::string> messages(3);
  EXPECT_THROW(run_local(3, [&](Comm& comm) {
    if (comm.rank() == 1) {
      // Stuck in "compute" for longer than the timeout, then tries to join.
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    }
    try {
      comm.barrier();
    } catch (const Error& e) {
      messages[comm.rank()] = e.what();
      throw;
    }
  }, quick(0.5)), Error);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(messages[r].find("barrier timed out on rank"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("rank(s) 1 did not arrive"), std::string::npos) << messages[r];
  }
}

TEST(CommLocal, ARankWhoseCommIsDestroyedFailsTheWaiters) {
  LocalGroup group(2, quick(60));
  std::string message;
  std::thread t0([&] {
    std::unique_ptr<Comm> c = group.comm(0);
    try {
      c->barrier();
    } catch (const Error& e) {
      message = e.what();
    }
  });
  std::thread t1([&] {
    std::unique_ptr<Comm> c = group.comm(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.reset();  // leaves without joining the barrier
  });
  t0.join();
  t1.join();
  EXPECT_NE(message.find("rank 1 failed: it left the group"), std::string::npos) << message;
  EXPECT_EQ(group.failed_rank(), 1);  // told by the leaving rank, not by the 60 s timeout
}

TEST(CommLocal, ExplicitAbortFailsTheOthers) {
  EXPECT_THROW(run_local(3, [&](Comm& comm) {
    if (comm.rank() == 1) comm.abort("the plan does not fit");
    EXPECT_COMM_ERROR(comm.barrier(), "rank 1 failed: the plan does not fit");
  }, quick(60)), Error);
}

TEST(CommLocal, RunLocalRethrowsTheCauseWithItsType) {
  struct Custom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  EXPECT_THROW(run_local(3, [&](Comm& comm) {
    if (comm.rank() == 2) throw Custom("custom");
    comm.barrier();
  }, quick(60)), Custom);
}

TEST(CommLocal, GroupMisuse) {
  LocalGroup group(2);
  std::unique_ptr<Comm> c0 = group.comm(0);
  EXPECT_COMM_ERROR(group.comm(0), "rank 0 was already made");
  EXPECT_COMM_ERROR(group.comm(2), "rank 2 is not in the local group of 2 ranks");
  EXPECT_COMM_ERROR(LocalGroup(0), "at least 1 rank");
  // c0 leaves without anyone waiting: no failure.
  c0.reset();
  EXPECT_EQ(group.failed_rank(), -1);
}

// ---- byte counters ------------------------------------------------------------------------

TEST(CommLocal, ByteCountersCountThePayload) {
  const std::vector<int64_t> counts = {1, 2, 5};  // T = 8
  run_local(3, [&](Comm& comm) {
    const int r = comm.rank();
    Tensor in = Tensor::zeros(Shape{counts[r]});
    Tensor out = Tensor::zeros(Shape{8});
    comm.all_gather_v(in, out, counts);
    comm.all_gather_v_async(in, out, counts)->wait();
    Tensor full = Tensor::zeros(Shape{8});
    Tensor mine = Tensor::zeros(Shape{counts[r]});
    comm.reduce_scatter_v(full, mine, counts);
    Tensor ar = Tensor::zeros(Shape{10});
    comm.all_reduce_sum(ar);
    comm.all_reduce_sum(1.0);
    Tensor b = Tensor::zeros(Shape{6}, DType::bf16);
    comm.broadcast(b, 0);
    comm.barrier();

    const CommStats s = comm.stats();
    const int64_t E = 4;
    EXPECT_EQ(s[CommOp::all_gather_v].calls, 2);
    EXPECT_EQ(s[CommOp::all_gather_v].bytes_sent, 2 * counts[r] * E * 2);
    EXPECT_EQ(s[CommOp::all_gather_v].bytes_received, 2 * (8 - counts[r]) * E);
    EXPECT_EQ(s[CommOp::reduce_scatter_v].calls, 1);
    EXPECT_EQ(s[CommOp::reduce_scatter_v].bytes_sent, (8 - counts[r]) * E);
    EXPECT_EQ(s[CommOp::reduce_scatter_v].bytes_received, counts[r] * E * 2);
    EXPECT_EQ(s[CommOp::all_reduce].calls, 2);
    EXPECT_EQ(s[CommOp::all_reduce].bytes_sent, 10 * E * 2 + 8 * 2);
    EXPECT_EQ(s[CommOp::broadcast].bytes_sent, r == 0 ? 6 * 2 * 2 : 0);
    EXPECT_EQ(s[CommOp::broadcast].bytes_received, r == 0 ? 0 : 6 * 2);
    EXPECT_EQ(s[CommOp::barrier].calls, 1);
    EXPECT_EQ(s[CommOp::barrier].bytes_sent, 0);
    EXPECT_EQ(s.calls(), 7);
    EXPECT_GE(s.seconds(), 0.0);
    // Summed over the ranks, bytes sent = bytes received (every byte has a sender and a receiver).
    const double sent = comm.all_reduce_sum((double)s.bytes_sent());
    const double received = comm.all_reduce_sum((double)s.bytes_received());
    EXPECT_EQ(sent, received);
    comm.reset_stats();
    EXPECT_EQ(comm.stats().calls(), 0);
    // A failed collective counts no bytes.
    std::vector<int64_t> bad = counts;
    if (r == 0) bad[0] = 2;
    Tensor bin = Tensor::zeros(Shape{bad[r]});
    Tensor bout = Tensor::zeros(Shape{sum_of(bad)});
    EXPECT_THROW(comm.all_gather_v(bin, bout, bad), Error);
    EXPECT_EQ(comm.stats().bytes_sent(), 0);
  }, quick());
}

TEST(CommLocal, PayloadFormula) {
  const std::vector<int64_t> counts = {0, 3, 7};
  EXPECT_EQ(comm_payload_bytes(CommOp::all_gather_v, counts, 0, 2).sent, 0);
  EXPECT_EQ(comm_payload_bytes(CommOp::all_gather_v, counts, 0, 2).received, 20);
  EXPECT_EQ(comm_payload_bytes(CommOp::all_gather_v, counts, 2, 4).sent, 56);
  EXPECT_EQ(comm_payload_bytes(CommOp::reduce_scatter_v, counts, 1, 4).sent, 28);
  EXPECT_EQ(comm_payload_bytes(CommOp::reduce_scatter_v, counts, 1, 4).received, 24);
  EXPECT_EQ(comm_payload_bytes(CommOp::all_gather_v, {5}, 0, 4).sent, 0);  // one rank: nothing
  // Counts too short for the rank (a bad call the collective reports): nothing, no read past.
  EXPECT_EQ(comm_payload_bytes(CommOp::all_gather_v, counts, 3, 4).sent, 0);
  EXPECT_EQ(comm_payload_bytes(CommOp::reduce_scatter_v, counts, -1, 4).received, 0);
}

// ---- the NCCL uneven-algorithm cost model ---------------------------------------------------

TEST(UnevenCostModel, EvenIsPaddedSkewedLargeIsGroupedSmallIsPadded) {
  // Equal counts: one plain collective.
  EXPECT_EQ(choose_uneven_algo({1 << 20, 1 << 20, 1 << 20}, 4).algo, UnevenAlgo::padded);
  // Strong skew, large: padding would move N*M = 4 x 16M against T = 16M + 3: grouped.
  const UnevenChoice skew = choose_uneven_algo({0, 0, 1, 16 << 20}, 4);
  EXPECT_EQ(skew.algo, UnevenAlgo::grouped);
  EXPECT_GT(skew.padded_s, skew.grouped_s);
  // Nearly even (ceil-division shards): padded, the waste is tiny.
  EXPECT_EQ(choose_uneven_algo({1000001, 1000000, 1000000, 1000000}, 4).algo, UnevenAlgo::padded);
  // All zero: nothing to do, zero cost.
  const UnevenChoice zero = choose_uneven_algo({0, 0, 0}, 4);
  EXPECT_EQ(zero.padded_s, 0.0);
  EXPECT_EQ(zero.grouped_s, 0.0);
  // The formulas of comm.h, with the defaults.
  const UnevenCostParams p;
  const UnevenChoice c = choose_uneven_algo({100, 200, 700}, 4, p);
  EXPECT_DOUBLE_EQ(c.padded_s, p.latency_s + 2 * 700 * 4 / p.bandwidth_Bps + 2.0 * 1000 * 4 / p.copy_Bps);
  EXPECT_DOUBLE_EQ(c.grouped_s, p.latency_s + 3 * p.root_latency_s + 1000 * 4 * p.grouped_factor / p.bandwidth_Bps);
  EXPECT_STREQ(uneven_algo_name(UnevenAlgo::grouped), "grouped");
}

TEST(CommBuild, FactoriesSayWhatIsMissing) {
  if (!nccl_built()) EXPECT_COMM_ERROR(make_nccl_comm(), "NCCL backend is not available");
  if (!mpi_built()) EXPECT_COMM_ERROR(make_mpi_comm(), "built without MPI");
}

}  // namespace
}  // namespace gpumix::dist
