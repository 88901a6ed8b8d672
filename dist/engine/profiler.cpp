#include "dist/engine/profiler.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "autograd/functions.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/stream.h"
#include "dist/comm/hierarchical.h"
#include "dist/plan/cost_model.h"
#include "nn/data/progress.h"
#include "nn/gpt.h"
#include "nn/model_stages.h"
#include "nn/optim.h"

namespace gpumix::dist {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Seconds that fn's work takes on `device`: the host clock around it on a CPU; on a GPU,
// where fn only enqueues, events on the compute stream around its work, waited for (so
// that a loop of timed runs does not run ahead of the device).
template <class F>
double time_on(Device device, F&& fn) {
  if (!device.is_cuda()) {
    const double t0 = detail::now_seconds();
    fn();
    return detail::seconds_since(t0);
  }
  Event start, end;
  start.record(device, Stream::compute);
  fn();
  end.record(device, Stream::compute);
  end.synchronize();
  return start.elapsed_ms(end) * 1e-3;
}

}  // namespace

double fastest_collective(Comm& comm, Device device, int repeats, const std::function<void()>& fn) {
  time_on(device, fn);
  double fastest = 1e300, spent = 0;
  for (int i = 0;; ++i) {
    comm.barrier();
    const double t = time_on(device, fn);
    fastest = std::min(fastest, t);
    spent += t;
    // Every rank must run as many: they agree (an untimed scalar collective).
    const bool more = i + 1 < repeats || (spent < kCollectiveBudget_s && i + 1 < kMaxCollectiveRuns);
    if (comm.all_reduce_max(more ? 1.0 : 0.0) == 0) break;
  }
  return comm.all_reduce_max(fastest);
}

namespace {

// Emulated devices share this machine's cores, so a rank computes slower while the others
// compute too. In training every rank computes at once for the whole step (the plan
// balances them), so every measurement is made by every rank over one common window: the
// slowest rank's `repeats` runs. A faster rank times more runs in it, and a rank that can
// no longer take part (its memory ran out at a smaller micro-batch) keeps its cores as busy
// as before with `filler`. Otherwise a fast or stopped rank would go idle and leave the
// others the cores that training would not.
class Together {
 public:
  Together(Comm& comm, Device device, int repeats) : comm_(comm), device_(device), repeats_(repeats) {}

  // Median time of fn over the common window, after one warm-up run; -1 on a rank that
  // has stopped, or stops now because fn ran out of memory.
  template <class F>
  double time(F&& fn) {
    double warm_up = 0;
    if (!stopped_) {
      try {
        warm_up = time_on(device_, fn);
      } catch (const OutOfMemory&) {
        stop();
      }
    }
    const double window = comm_.all_reduce_max(stopped_ ? 0.0 : std::max(repeats_ * warm_up, kMinWindow_s));
    const double start = detail::now_seconds();
    std::vector<double> t;
    try {
      while (!stopped_ && (t.empty() || detail::seconds_since(start) < window)) {
        t.push_back(time_on(device_, fn));
      }
    } catch (const OutOfMemory&) {
      stop();
    }
    if (stopped_) {
      try {
        while (filler && detail::seconds_since(start) < window) filler();
      } catch (const OutOfMemory&) {
        clear_tape();
        filler = nullptr;  // not even that fits beside what is still allocated: wait instead
      }
      return -1;
    }
    return median(t);
  }

  // Runs fn (an allocation, untimed); stops this rank if it runs out of memory.
  template <class F>
  void prepare(F&& fn) {
    if (stopped_) return;
    try {
      fn();
    } catch (const OutOfMemory&) {
      stop();
    }
  }

  bool stopped() const { return stopped_; }
  std::function<void()> filler;  // a stopped rank's work: what it last could do

 private:
  // On a loaded machine a rank waits milliseconds at a time for a core. A window of a few
  // short runs (a micro-batch of 1: 5 x 0.3 ms) could lie inside one such wait, and the
  // smoothing's running maximum then carried that one slow size to every larger one (a
  // head of 4.9 ms from m = 1 to 8 where 0.4-2.6 ms was measured otherwise): the planner
  // took every row from a device only 3x slower. Over 50 ms most runs are clear of them.
  static constexpr double kMinWindow_s = 0.05;
  void stop() {
    clear_tape();
    stopped_ = true;
  }
  Comm& comm_;
  Device device_;
  int repeats_;
  bool stopped_ = false;
};

}  // namespace

Tensor random_tensor(const Shape& shape, Device device, const char* name, DType dtype) {
  return named_random_tensor(shape, device, name, dtype);
}

Tensor random_tokens(int64_t m, int64_t T, int V, Device device) { return hashed_random_tokens(m, T, V, device); }

GemmPeak measure_gemm_peak(Device device, DType dtype, Comm& comm, int repeats) {
  Allocator& alloc = allocator(device);
  const int64_t free_bytes = alloc.stats().capacity - alloc.stats().in_use;
  int64_t k = 512;
  while (k > 32 && 3 * k * k * 4 > free_bytes / 2) k /= 2;
  Tensor a = random_tensor({k, k}, device, "profile.a", dtype), b = random_tensor({k, k}, device, "profile.b", dtype),
         c = Tensor::empty({k, k}, dtype, device);
  GemmPeak peak;
  peak.flops = 2.0 * k * k * k / Together(comm, device, repeats).time([&] { ops::gemm(c, a, b, false, false); });
  peak.shape = str(k, "^3 ", dtype_name(dtype));
  return peak;
}

namespace {

std::string cache_folder(const ProfilerOptions& o) {
  if (o.cache_dir == "-") return "";
  if (!o.cache_dir.empty()) return o.cache_dir;
  if (const char* c = std::getenv("GPUMIX_CACHE")) return std::string(c) == "-" ? "" : c;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/gpumix";
  return "";
}

// The key: the device, the model's shape, the sequence length, the compute dtype, the
// micro-batch sizes tried, the repeats per measurement and the OpenMP threads per rank; for
// CPU devices also every rank's device: ranks that share a machine's cores slow each other
// down, so a CPU device's speed depends on the devices beside it. v2: measured over common
// windows (Together); v3: windows of 50 ms at least; v4: in the run's compute dtype (f32 or
// bf16); v5: the repeats too (a quick profile of 1 repeat never stands for one of 5).
std::string cache_path(const ProfilerOptions& o, const std::string& label, const std::vector<std::string>& cluster,
                       const GPTConfig& model, int seq, DType dtype) {
  const std::string folder = cache_folder(o);
  if (folder.empty()) return "";
  std::string neighbours;
  for (const std::string& l : cluster) neighbours += l + ",";
  const std::string key = str("v5|", label, "|cluster=", neighbours, "|", config_to_json(model).dump(), "|T=", seq,
                              "|", dtype_name(dtype), "|m<=", o.max_micro_batch, "|repeats=", o.repeats,
                              "|threads=", omp_get_max_threads());
  return folder + "/device-" + str(std::hex, rng_key(0, key)) + ".json";
}

// Timings of neighbouring micro-batch sizes on a shared machine are noisy (a 2x swing in the
// per-sequence time between m = 4 and m = 8 is common on two busy cores), and the planner
// would chase that noise. Two facts about any device hold them in line: a larger
// micro-batch costs no more per sequence (isotonic regression, pool-adjacent-violators, on
// the per-sequence time), and no less in total (a running maximum).
void smooth_samples(std::vector<MicroBatchSample>& samples) {
  for (double MicroBatchSample::*field :
       {&MicroBatchSample::block_fwd_s, &MicroBatchSample::block_bwd_s, &MicroBatchSample::head_s}) {
    struct Block {
      double sum;
      int count;
    };
    std::vector<Block> blocks;  // per-sequence times, pooled until non-increasing
    for (const MicroBatchSample& s : samples) {
      blocks.push_back({s.*field / s.m, 1});
      while (blocks.size() > 1 && blocks[blocks.size() - 2].sum / blocks[blocks.size() - 2].count <
                                      blocks.back().sum / blocks.back().count) {
        blocks[blocks.size() - 2].sum += blocks.back().sum;
        blocks[blocks.size() - 2].count += blocks.back().count;
        blocks.pop_back();
      }
    }
    size_t k = 0;
    double total = 0;
    for (const Block& b : blocks)
      for (int i = 0; i < b.count; ++i, ++k) {
        total = std::max(total, b.sum / b.count * samples[k].m);
        samples[k].*field = total;
      }
  }
}

// Measures this rank's device computing in `dtype`, as the engines do: parameters and
// activations in it, parameter gradients in fp32.
DeviceProfile measure_device(const GPTConfig& model, int seq, DType dtype, const std::string& label,
                             Device device, Comm& comm, const ProfilerOptions& o, data::Progress* progress) {
  DeviceProfile d;
  d.name = label;
  d.kind = device.is_cuda() ? "gpu" : "cpu";
  d.memory_bytes = (double)device_props(device).capacity;
  Allocator& alloc = allocator(device);

  // One block, the embedding and the head, bound to parameters of their own in the compute
  // dtype and fp32 gradients (the fp32 initial values freed before the gradients are made,
  // so that a device with little memory holds no more than in training).
  GPT gpt(model, device, dtype);
  const ModelStages& stages = model_stages(model);
  auto bind = [&](int unit) {
    const int64_t n = model.unit_params(unit);
    Tensor p = Tensor::empty({n}, DType::f32, device);
    GPT::init_slice(gpt.layout(), 0, gpt.unit_range(unit).first, p);
    if (dtype != DType::f32) p = p.to(dtype);
    gpt.bind_unit(unit, p, Tensor::zeros({n}, DType::f32, device));
  };
  bind(0);
  bind(1);
  bind(model.L + 1);

  const int64_t T = seq, C = model.C;
  Together together(comm, device, o.repeats);
  for (int m = 1; m <= o.max_micro_batch; m *= 2) {
    MicroBatchSample s;
    s.m = m;
    Tensor x, dy, tokens, g0;
    auto free_if_stopped = [&] {  // the filler needs the room
      if (together.stopped()) x = dy = tokens = g0 = Tensor();
    };
    together.prepare([&] {
      x = random_tensor({m, T, C}, device, "profile.x", dtype);
      dy = random_tensor({m, T, C}, device, "profile.dy", dtype);
    });
    free_if_stopped();
    s.block_fwd_s = together.time([&] {
      NoGradGuard no_grad;
      gpt.block(0, Var(x));
    });
    free_if_stopped();
    const int64_t base = alloc.stats().in_use;
    alloc.reset_peak();
    s.block_bwd_s = together.time([&] {
      Var in(x, true);
      backward(gpt.block(0, in), dy);
    });
    s.block_act_bytes = (double)(alloc.stats().peak - base);
    free_if_stopped();
    // The embedding's gradient lives in the engine's gathered buffers (the memory model's
    // `gathered` term), not in the head's working memory.
    together.prepare([&] {
      tokens = random_tokens(m, T, model.V, device);
      g0 = Tensor::zeros({model.embed_params()}, DType::f32, device);
    });
    free_if_stopped();
    const int64_t head_base = alloc.stats().in_use;
    alloc.reset_peak();
    s.head_s = together.time([&] {
      Var h;
      {
        NoGradGuard no_grad;
        h = Var(gpt.embed(tokens).value(), true);
      }
      backward(gpt.head_loss(h, tokens, 1.0f / (float)(m * T)));
      stages.embed_backward(model, g0, h.grad(), tokens);
    });
    s.head_bytes = (double)(alloc.stats().peak - head_base);
    if (!together.stopped()) {
      d.samples.push_back(s);
      // Once this rank's memory runs out, it keeps computing at its largest micro-batch.
      together.filler = [&gpt, m, T, C, device, dtype] {
        Var in(Tensor::zeros({m, T, C}, dtype, device), true);
        backward(gpt.block(0, in), Tensor::zeros({m, T, C}, dtype, device));
      };
    }
    if (comm.all_reduce_max(together.stopped() ? 0.0 : 1.0) == 0) break;
    if (progress) progress->update(m);
  }
  GPUMIX_CHECK_INPUT(!d.samples.empty(), "profiling ", label, ": not even a micro-batch of 1 sequence (T = ", seq,
                     ") fits its ", format_bytes((int64_t)d.memory_bytes), "; give the device more memory or "
                     "use a smaller model or --seq");
  smooth_samples(d.samples);

  for (int unit : {0, 1, model.L + 1}) gpt.unbind_unit(unit);  // frees their buffers
  auto free_bytes = [&] { return alloc.stats().capacity - alloc.stats().in_use; };

  // AdamW per parameter, on a buffer of up to 1M parameters (parameters, gradients and two
  // moments: 16 bytes each, fp32 in every compute dtype) that takes at most half of what the
  // device has free.
  {
    const int64_t n = std::max<int64_t>(1024, std::min<int64_t>({model.total_params(), 1 << 20, free_bytes() / 32}));
    Tensor p = random_tensor({n}, device, "profile.p"), g = random_tensor({n}, device, "profile.g");
    AdamW opt(gpt.layout(), 0, n, device, AdamWConfig{});
    int step = 0;
    d.optimizer_s_per_param = Together(comm, device, o.repeats).time([&] { opt.step(p, g, 1e-3f, ++step); }) / (double)n;
  }

  // Fixed working memory: on a CPU device the engine keeps nothing besides the modelled
  // terms but token buffers and small scratch tensors.
  d.work_bytes = (double)(4 * 2 * T * (int64_t)sizeof(int32_t) * o.max_micro_batch) + (256 << 10);

  d.peak_flops = measure_gemm_peak(device, dtype, comm, o.repeats).flops;

  // Device -> host bandwidth, what offloading saved block inputs costs (the planner offloads
  // only on GPUs: on a CPU the device memory is host memory). Where some rank is a GPU every
  // rank times together; a CPU rank's run copies nothing.
  if (comm.all_reduce_max(device.is_cuda() ? 1.0 : 0.0) == 0) return d;
  const int64_t copy_bytes = std::min<int64_t>(64 << 20, free_bytes() / 4) / 4 * 4;
  Tensor on_device, on_host;
  if (device.is_cuda() && copy_bytes > 0) {
    on_device = Tensor::zeros({copy_bytes / 4}, DType::f32, device);
    on_host = Tensor::empty({copy_bytes / 4}, DType::f32, Device::cpu());
  }
  const double copy_s = Together(comm, device, o.repeats).time([&] {
    if (on_device.defined()) on_host.copy_from(on_device);
  });
  if (on_device.defined() && copy_s > 0) d.host_bandwidth_Bps = (double)copy_bytes / copy_s;
  return d;
}

// Each rank's counts of `total` elements: even, or skewed (rank r holds in proportion to r + 1).
std::vector<int64_t> counts_for(int n, int64_t total, bool even) {
  std::vector<int64_t> c(n);
  int64_t used = 0;
  for (int r = 0; r < n; ++r) {
    c[r] = even ? total / n : total * (r + 1) * 2 / (int64_t)(n * (n + 1));
    used += c[r];
  }
  c[n - 1] += total - used;
  return c;
}

// Times of all_gather_v and reduce_scatter_v over `comm` at a small size (latency), at a
// block's size and at the embedding unit's (the sizes the engine moves), even, and at the
// block's size uneven; fits the ring model: the latency from the small size, the bandwidth
// the line through the two large ones with the least relative error at each (a line through
// 4 KiB and a block extrapolated to the embedding's 2.7x wrongly where the link's time is not
// quite linear in the bytes), and the uneven factor at the block's size. `free_bytes`: the
// smallest free memory of the ranks that measure with it (a buffer takes at most a quarter
// of it).
CollectiveProfile fit_collective(Comm& comm, Device device, int repeats, double free_bytes, bool gather,
                                 const CommSizes& sizes) {
  const int n = comm.size();
  CollectiveProfile result;
  if (n == 1) {
    result.intra_node = {0, 1e12};
    return result;
  }
  const DType dtype = gather ? sizes.gather_dtype : DType::f32;
  const double elem = (double)dtype_size(dtype);
  auto time_op = [&](int64_t total, bool even) {
    const std::vector<int64_t> counts = counts_for(n, total, even);
    Tensor full = Tensor::zeros({total}, dtype, device);
    Tensor mine = Tensor::zeros({counts[comm.rank()]}, dtype, device);
    return fastest_collective(comm, device, repeats, [&] {
      if (gather)
        comm.all_gather_v(mine, full, counts);
      else
        comm.reduce_scatter_v(full, mine, counts);
    });
  };
  const int64_t small = 1 << 10, cap = (int64_t)(free_bytes / 4 / elem);
  const int64_t block = std::max<int64_t>(8 * small, std::min<int64_t>(sizes.block, cap));
  const int64_t embedding = std::min<int64_t>(std::max(sizes.embedding, block), cap);
  const double t_small = time_op(small, true), t_block = time_op(block, true);
  const double t_embedding = embedding > block ? time_op(embedding, true) : t_block;
  const double t_uneven = time_op(block, false);
  const double ring = (n - 1.0) / n;
  // t = (n-1) lat + (n-1)/n bytes / bw: the latency part from the small size (its bytes
  // term taken at the line found), the slope by least relative squares at the large sizes.
  const double lat_part = t_small;
  double num = 0, den = 0;
  for (auto [x, t] : {std::pair{(double)block, t_block}, {(double)embedding, t_embedding}}) {
    const double bytes = ring * elem * x;
    num += std::max(0.0, t - lat_part) * bytes / (t * t);
    den += bytes * bytes / (t * t);
  }
  const double per_byte = std::max(1e-15, num / den);
  result.intra_node.bandwidth_Bps = 1.0 / per_byte;
  result.intra_node.latency_s = std::max(0.0, (t_small - ring * elem * (double)small * per_byte) / (n - 1));
  result.uneven_factor = std::max(1.0, t_uneven / t_block);
  return result;
}

CommProfile fit_collectives(Comm& comm, Device device, int repeats, double free_bytes, const CommSizes& sizes) {
  CommProfile p;
  p.all_gather = fit_collective(comm, device, repeats, free_bytes, true, sizes);
  p.reduce_scatter = fit_collective(comm, device, repeats, free_bytes, false, sizes);
  return p;
}

// How much of a prefetched gather the compute issued after it hides: a block's gather
// started asynchronously, as the engine prefetches it, then as long a stretch of compute (a
// spin on the rank's thread), then the wait. The exposed part is what the issue and the
// wait took; overlap = 1 − exposed / the gather alone, the median of `repeats` runs. Over
// `comm` as the engine's collectives run (through TopologyComm across nodes). On a GPU the
// gather runs on its own stream: 1 (not measured).
double measure_overlap(Comm& comm, Device device, int repeats, double free_bytes, const CommSizes& sizes) {
  if (comm.size() == 1 || !device.is_cpu()) return 1.0;
  const int64_t total = std::max<int64_t>(
      1 << 13, std::min<int64_t>(sizes.block, (int64_t)(free_bytes / 4 / (double)dtype_size(sizes.gather_dtype))));
  const std::vector<int64_t> counts = counts_for(comm.size(), total, true);
  Tensor full = Tensor::zeros({total}, sizes.gather_dtype, device);
  Tensor mine = full.flat_slice(std::accumulate(counts.begin(), counts.begin() + comm.rank(), int64_t(0)),
                                counts[comm.rank()]);
  const double alone = fastest_collective(comm, device, repeats, [&] {
    comm.all_gather_v_async(mine, full, counts)->wait();
  });
  std::vector<double> overlap;
  for (int i = 0; i < std::max(3, repeats); ++i) {
    comm.barrier();
    const double t0 = detail::now_seconds();
    CommRequestPtr req = comm.all_gather_v_async(mine, full, counts);
    const double issued = detail::now_seconds();
    while (detail::now_seconds() < issued + alone) {
    }
    const double t1 = detail::now_seconds();
    req->wait();
    const double exposed = comm.all_reduce_max((issued - t0) + detail::seconds_since(t1));
    overlap.push_back(std::clamp(1.0 - exposed / alone, 0.0, 1.0));
  }
  return median(overlap);
}

}  // namespace

// The collectives of the run's communicator. On one node: its fit is the intra-node link.
// Across nodes: the whole communicator's fit is the inter-node link (a flat collective that
// spans the nodes, bottlenecked by the link between them); each node's ranks, split off,
// measure their own collectives at the same time (as the nodes of a hierarchical
// collective run them): the slowest node's fit is the intra-node link; the nodes' first
// ranks alone measure the link between the nodes itself (the hierarchical form's middle
// stage, the replicas' all-reduce of hybrid sharding). Then the overlap of a prefetched
// gather, through the form the engine will run (TopologyComm with these links).
CommProfile measure_comm(Comm& comm, Device device, int repeats, const CommSizes& sizes) {
  const AllocatorStats mem = allocator(device).stats();
  const double smallest_free = -comm.all_reduce_max(-(double)(mem.capacity - mem.in_use));
  const CommProfile whole = fit_collectives(comm, device, repeats, smallest_free, sizes);
  if (comm.nodes() == 1) {
    CommProfile result = whole;
    result.overlap = measure_overlap(comm, device, repeats, smallest_free, sizes);
    return result;
  }
  CommProfile result = whole;
  result.all_gather.inter_node = whole.all_gather.intra_node;
  result.reduce_scatter.inter_node = whole.reduce_scatter.intra_node;
  const std::unique_ptr<Comm> node = comm.split(comm.node());
  const bool measured = node->size() > 1;  // a node of one rank has no intra-node collective
  const CommProfile local = fit_collectives(*node, device, repeats, smallest_free, sizes);
  const bool leader = node->rank() == 0;
  const std::unique_ptr<Comm> leaders = comm.split(leader ? 0 : 1);
  if (leader) {
    const CommProfile between = fit_collectives(*leaders, device, repeats, smallest_free, sizes);
    result.all_gather.leaders = between.all_gather.intra_node;
    result.reduce_scatter.leaders = between.reduce_scatter.intra_node;
  }
  // Every rank takes the first rank's (a leader's) figures.
  auto from_leader = [&](LinkProfile& l) {
    l.latency_s = comm.all_reduce_max(comm.rank() == 0 ? l.latency_s : -1.0);
    l.bandwidth_Bps = comm.all_reduce_max(comm.rank() == 0 ? l.bandwidth_Bps : -1.0);
  };
  from_leader(result.all_gather.leaders);
  from_leader(result.reduce_scatter.leaders);
  if (comm.all_reduce_max(measured ? 1.0 : 0.0) > 0) {  // one rank per node: intra never priced
    auto slowest = [&](const LinkProfile& mine) {
      LinkProfile l;
      l.latency_s = comm.all_reduce_max(measured ? mine.latency_s : 0.0);
      l.bandwidth_Bps = -comm.all_reduce_max(measured ? -mine.bandwidth_Bps : -1e300);
      return l;
    };
    result.all_gather.intra_node = slowest(local.all_gather.intra_node);
    result.reduce_scatter.intra_node = slowest(local.reduce_scatter.intra_node);
  }
  TopologyComm engine_form(comm, topology_links(result.all_gather), topology_links(result.reduce_scatter));
  result.overlap = measure_overlap(engine_form, device, repeats, smallest_free, sizes);
  return result;
}

namespace {

// Every rank's JSON text, gathered to every rank.
std::vector<std::string> all_gather_strings(Comm& comm, const std::string& mine, Device device) {
  const int n = comm.size();
  Tensor len_one = Tensor::full({1}, (float)mine.size(), DType::f32, device);
  Tensor lens = Tensor::empty({n}, DType::f32, device);
  comm.all_gather_v(len_one, lens, std::vector<int64_t>(n, 1));
  std::vector<int64_t> counts;
  for (float l : lens.to_vector()) counts.push_back((int64_t)l);
  std::vector<int32_t> chars(mine.begin(), mine.end());
  Tensor in = Tensor::from_vector(chars, {(int64_t)chars.size()}, device);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor out = Tensor::empty({total}, DType::i32, device);
  comm.all_gather_v(in, out, counts);
  const std::vector<int32_t> all = out.to_int_vector();
  std::vector<std::string> result;
  int64_t at = 0;
  for (int64_t c : counts) {
    result.emplace_back(all.begin() + at, all.begin() + at + c);
    at += c;
  }
  return result;
}

}  // namespace

Profile profile_cluster(const GPTConfig& model, int seq_len, DType dtype, const std::string& device_label,
                        Device device, Comm& comm, const ProfilerOptions& o) {
  check_compute_dtype(dtype, "profile");
  GPUMIX_CHECK_INPUT(o.repeats >= 1 && o.max_micro_batch >= 1, "profiling needs at least 1 repeat and a largest "
                     "micro-batch of at least 1, got ", o.repeats, " repeats and ", o.max_micro_batch);
  const std::vector<std::string> labels = all_gather_strings(comm, device_label, device);
  const std::string cache =
      cache_path(o, device_label, device.is_cpu() ? labels : std::vector<std::string>{}, model, seq_len, dtype);
  std::string error;
  json mine;
  // Measured together or not at all (see measure_device): one rank without a cached
  // profile makes every rank measure again.
  const bool cached = comm.all_reduce_max(!cache.empty() && fs::exists(cache) ? 0.0 : 1.0) == 0;
  try {
    if (cached) {
      std::ifstream in(cache);
      mine = json::parse(in);
    } else {
      std::unique_ptr<data::Progress> progress;
      if (comm.rank() == 0 && o.show_progress)
        progress = std::make_unique<data::Progress>("profiling " + device_label, o.max_micro_batch, "m", true);
      Profile one;
      one.model = model;
      one.seq_len = seq_len;
      one.dtype = dtype;
      one.devices.push_back(measure_device(model, seq_len, dtype, device_label, device, comm, o, progress.get()));
      one.ranks.push_back({device_label, 0, ""});  // a cached device entry: no node
      mine = profile_to_json(one).at("devices").at(0);
      if (progress) progress->finish();
      if (!cache.empty()) {
        fs::create_directories(fs::path(cache).parent_path());
        const std::string tmp = cache + ".tmp" + std::to_string(comm.rank());
        std::ofstream(tmp) << mine.dump(1);
        fs::rename(tmp, cache);
      }
    }
  } catch (const std::exception& e) {
    error = local_error_of(e);
  }
  comm.agree("profiling", {}, error);

  const std::vector<std::string> texts = all_gather_strings(comm, mine.dump(), device);
  Profile p;
  p.model = model;
  p.seq_len = seq_len;
  p.dtype = dtype;
  for (int r = 0; r < comm.size(); ++r) {
    // Each rank's entry is validated as the one device of a one-rank profile.
    const json d = json::parse(texts[r]);
    const json one = {{"model", config_to_json(model)}, {"seq_len", seq_len}, {"dtype", dtype_name(dtype)},
                      {"devices", json::array({d})}, {"ranks", json::array({d.at("name")})}};
    const DeviceProfile device_profile = profile_from_json(one).devices[0];
    bool known = false;
    for (const DeviceProfile& e : p.devices) known = known || e.name == device_profile.name;
    if (!known) p.devices.push_back(device_profile);
    // The node of each rank as the communicator learnt it (MPI: who shares memory, named by
    // the processor name), so that the cost model prices collectives across the node boundary.
    const int node = comm.node_of_rank().at(r);
    p.ranks.push_back({device_profile.name, node, comm.node_names().at(node)});
  }
  CommSizes sizes;
  sizes.block = model.block_params();
  sizes.embedding = model.embed_params();
  sizes.gather_dtype = dtype;
  p.comm = measure_comm(comm, device, o.repeats, sizes);
  p.validate();
  return p;
}

}  // namespace gpumix::dist
