// Uneven vs even all-gather-v and reduce-scatter-v (dist/comm) on the CPU backends.
//
//   build/bench/dist_comm/bench_collectives                               local backend
//   mpirun -np 3 --oversubscribe build/bench/dist_comm/bench_collectives  MPI backend
//
// (as root in a container: add --allow-run-as-root, or set OMPI_ALLOW_RUN_AS_ROOT=1 and
// OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1). The local backend runs GPUMIX_BENCH_RANKS thread ranks
// (default 3); under mpirun every process is a rank. Rank 0 runs Google Benchmark; before
// each benchmark it broadcasts a command (op, skew, size, iterations) and the other ranks
// run the same collectives the same number of times, so each timed iteration is one real
// collective of all ranks.
//
// Sizes are the gathered (full) buffer in fp32: 64 KiB, 1 MiB, 8 MiB, 64 MiB. Skews (shares
// of the ranks, stretched to N ranks by repeating the pattern and normalising): even;
// 0.2/0.5/0.3; one rank with nothing (0/0.5/0.5). bytes_per_second is the full buffer's
// bytes per collective per second (algorithm bandwidth).
//
// Flat vs hierarchical (dist/comm/hierarchical.h): when the ranks span several nodes (MPI
// across emulated or real nodes: bench/dist_comm/flat_vs_hierarchical.sh; or thread ranks
// on simulated nodes, GPUMIX_BENCH_NODES=0,0,1,1), every benchmark runs in three forms side
// by side: flat (the backend's own collective), hierarchical (forced), auto (TopologyComm's
// cost-model choice, with the links measured first as the profiler measures them, at 1 and
// 8 MiB: what a planned run gives the engine; printed). Leave GPUMIX_COLLECTIVES unset: it
// would override the forced forms.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm/comm.h"
#include "dist/comm/hierarchical.h"
#include "dist/engine/profiler.h"
#include "dist/plan/cost_model.h"

using namespace gpumix;
using namespace gpumix::dist;

namespace {

enum Op : int32_t { kQuit = -1, kAllGather = 0, kReduceScatter = 1 };
const char* kOpNames[] = {"all_gather_v", "reduce_scatter_v"};
const char* kFormNames[] = {"flat", "hierarchical", "auto"};

// The forms of the collectives on a rank: [0] the backend itself; on several nodes also
// [1] hierarchical and [2] automatic TopologyComms over it, the latter with the links
// measured over `base` (collective: every rank makes them, in this order).
struct Forms {
  std::vector<Comm*> forms;
  std::vector<std::unique_ptr<Comm>> owned;
};
Forms make_forms(Comm& base) {
  Forms f;
  f.forms = {&base};
  if (base.nodes() < 2) return f;
  CommSizes sizes;
  sizes.block = (1 << 20) / 4;
  sizes.embedding = (8 << 20) / 4;
  const CommProfile links = measure_comm(base, Device::cpu(), 5, sizes);
  if (base.rank() == 0) {
    auto say = [](const char* kind, const CollectiveProfile& c) {
      std::fprintf(stderr, "links measured for auto, %s: intra-node %.1f us + %.0f MB/s, inter-node %.1f us + %.0f MB/s, leaders %.1f us + %.0f MB/s\n",
                   kind, c.intra_node.latency_s * 1e6, c.intra_node.bandwidth_Bps / 1e6, c.inter_node.latency_s * 1e6,
                   c.inter_node.bandwidth_Bps / 1e6, c.leaders.latency_s * 1e6, c.leaders.bandwidth_Bps / 1e6);
    };
    say("all-gather", links.all_gather);
    say("reduce-scatter", links.reduce_scatter);
  }
  f.owned.push_back(std::make_unique<TopologyComm>(base, TopologyLinks{}, TopologyComm::Mode::hierarchical));
  f.owned.push_back(std::make_unique<TopologyComm>(base, topology_links(links.all_gather),
                                                   topology_links(links.reduce_scatter), TopologyComm::Mode::automatic));
  for (auto& c : f.owned) f.forms.push_back(c.get());
  return f;
}
std::vector<Comm*> g_forms;  // rank 0's, for the benchmarks

struct Skew {
  const char* name;
  std::vector<double> shares;  // for 3 ranks; repeated for others
};
const std::vector<Skew> kSkews = {
    {"even", {1, 1, 1}},
    {"0.2/0.5/0.3", {0.2, 0.5, 0.3}},
    {"0/0.5/0.5", {0, 0.5, 0.5}},
};
const int64_t kSizes[] = {64 << 10, 1 << 20, 8 << 20, 64 << 20};  // bytes, fp32

std::vector<int64_t> make_counts(int n, int skew, int64_t total) {
  std::vector<double> s(n);
  double sum = 0;
  for (int r = 0; r < n; ++r) {
    s[r] = kSkews[skew].shares[r % kSkews[skew].shares.size()];
    sum += s[r];
  }
  std::vector<int64_t> c(n);
  int64_t given = 0;
  for (int r = 0; r < n; ++r) {
    c[r] = (int64_t)(total * (s[r] / sum));
    given += c[r];
  }
  for (int r = n - 1; r >= 0; --r)  // the remainder to the last non-empty rank
    if (s[r] > 0) {
      c[r] += total - given;
      break;
    }
  return c;
}

struct Buffers {
  Tensor in, out;
  std::vector<int64_t> counts;
};

Buffers make_buffers(const Comm& comm, int op, int skew, int64_t total) {
  Buffers b;
  b.counts = make_counts(comm.size(), skew, total);
  const int64_t mine = b.counts[comm.rank()];
  if (op == kAllGather) {
    b.in = Tensor::full(Shape{mine}, 1.0f);
    b.out = Tensor::zeros(Shape{total});
  } else {
    b.in = Tensor::full(Shape{total}, 1.0f);
    b.out = Tensor::zeros(Shape{mine});
  }
  return b;
}

void run_once(Comm& comm, int op, Buffers& b) {
  if (op == kAllGather)
    comm.all_gather_v(b.in, b.out, b.counts);
  else
    comm.reduce_scatter_v(b.in, b.out, b.counts);
}

// Rank 0 -> all: {op, skew, total (2 x i32), iterations (2 x i32), form}.
void send_command(Comm& comm, int32_t op, int32_t skew, int64_t total, int64_t iters, int32_t form = 0) {
  std::vector<int32_t> v = {op, skew, (int32_t)(total & 0x7fffffff), (int32_t)(total >> 31),
                            (int32_t)(iters & 0x7fffffff), (int32_t)(iters >> 31), form};
  Tensor t = Tensor::from_vector(v, Shape{7});
  comm.broadcast(t, 0);
}

// Ranks other than 0: follow rank 0's commands until it says quit.
void follow(Comm& comm, const std::vector<Comm*>& forms) {
  for (;;) {
    Tensor t = Tensor::zeros(Shape{7}, DType::i32);
    comm.broadcast(t, 0);
    const std::vector<int32_t> v = t.to_int_vector();
    if (v[0] == kQuit) return;
    const int64_t total = (int64_t)v[2] | ((int64_t)v[3] << 31);
    const int64_t iters = (int64_t)v[4] | ((int64_t)v[5] << 31);
    Comm& form = *forms[(size_t)v[6]];
    Buffers b = make_buffers(comm, v[0], v[1], total);
    comm.barrier();
    for (int64_t i = 0; i < iters; ++i) run_once(form, v[0], b);
  }
}

void register_all(Comm* comm, const std::string& backend) {
  for (int op : {kAllGather, kReduceScatter}) {
    for (int skew = 0; skew < (int)kSkews.size(); ++skew) {
      for (int64_t bytes : kSizes) {
        for (int f = 0; f < (int)g_forms.size(); ++f) {
          const int64_t total = bytes / 4;
          // One node: the backend only, named as before; several: the form too.
          const std::string form = g_forms.size() > 1 ? std::string(kFormNames[f]) + "/" : "";
          const std::string name = std::string(kOpNames[op]) + "/" + backend + "/" + form +
                                   kSkews[skew].name + "/" + std::to_string(bytes >> 10) + "KiB";
          benchmark::RegisterBenchmark(name.c_str(), [comm, op, skew, total, bytes, f](benchmark::State& st) {
            Comm& c = *g_forms[(size_t)f];
            Buffers b = make_buffers(*comm, op, skew, total);
            send_command(*comm, op, skew, total, (int64_t)st.max_iterations, f);
            comm->barrier();
            for (auto _ : st) run_once(c, op, b);
            st.SetBytesProcessed(bytes * (int64_t)st.iterations());
            std::string label = std::to_string(comm->size()) + " ranks on " + std::to_string(comm->nodes()) +
                                " nodes, counts " + gpumix::dist::detail::format_counts(b.counts);
            if (auto* t = dynamic_cast<TopologyComm*>(&c))
              label += std::string(", ran ") + topology_algo_name(t->last_choice().algo);
            st.SetLabel(label);
          })->UseRealTime()->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (launched_by_mpi() && mpi_built()) {
    MpiSession mpi(&argc, &argv);
    std::unique_ptr<Comm> comm = make_mpi_comm();
    Forms forms = make_forms(*comm);
    g_forms = forms.forms;
    if (comm->rank() != 0) {
      follow(*comm, g_forms);
      return 0;
    }
    register_all(comm.get(), "mpi");
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    send_command(*comm, kQuit, 0, 0, 0);
    benchmark::Shutdown();
    return 0;
  }

  int n = 3;
  if (const char* env = std::getenv("GPUMIX_BENCH_RANKS")) n = std::max(1, std::atoi(env));
  LocalOptions options;  // GPUMIX_BENCH_NODES=0,0,1,1: the node of each thread rank
  if (const char* env = std::getenv("GPUMIX_BENCH_NODES")) {
    for (const char* p = env; *p;) {
      options.node_of_rank.push_back(std::atoi(p));
      while (*p && *p != ',') ++p;
      if (*p == ',') ++p;
    }
    n = (int)options.node_of_rank.size();
  }
  LocalGroup group(n, options);
  // The forms are collective to make, on every rank before rank 0 starts the benchmarks;
  // the forms of thread ranks are per thread, so each thread keeps its own.
  std::vector<std::thread> helpers;
  for (int r = 1; r < n; ++r)
    helpers.emplace_back([&group, r] {
      std::unique_ptr<Comm> comm = group.comm(r);
      const Forms forms = make_forms(*comm);
      follow(*comm, forms.forms);
    });
  {
    std::unique_ptr<Comm> comm = group.comm(0);
    Forms forms = make_forms(*comm);
    g_forms = forms.forms;
    register_all(comm.get(), "local");
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    send_command(*comm, kQuit, 0, 0, 0);
    for (std::thread& t : helpers) t.join();
  }
  benchmark::Shutdown();
  return 0;
}
