#include "dist/engine/sharded_engine.h"

#include "autograd/functions.h"
#include "core/ops.h"
#include "dist/engine/fault.h"
#include "dist/engine/profiler.h"
#include "nn/model_stages.h"

namespace gpumix::dist {

ShardedEngine::ShardedEngine(const GPTConfig& config, const ShardLayout& layout, Comm& comm,
                             Device device, DType compute, uint64_t seed, const AdamWConfig& adam,
                             bool prefetch, int group_size, const CollectiveLinks& links)
    : config_(config), layout_(layout), comm_(comm), shard_(&comm), device_(device), compute_dtype_(compute),
      model_(config, device, compute), adam_(adam), prefetch_(prefetch) {
  if (group_size > 0) {
    GPUMIX_CHECK(group_size < comm.size() && comm.size() % group_size == 0, "hybrid sharding in groups of ",
                 group_size, " needs a group size that divides the ", comm.size(), " ranks into at least 2 groups");
    group_ = comm.split(comm.rank() / group_size);
    replicas_ = comm.split(comm.rank() % group_size);
    shard_ = group_.get();
  }
  if (shard_->nodes() > 1) {
    topology_ = std::make_unique<TopologyComm>(*shard_, links.all_gather, links.reduce_scatter);
    shard_ = topology_.get();
  }
  GPUMIX_CHECK(layout_.num_ranks() == shard_->size(), "the shard layout has ", layout_.num_ranks(),
               " ranks but the engine shards over ", shard_->size(),
               group_size > 0 ? " (a group)" : " (every rank)");
  allocate_state();
  for (int u = 0; u < layout_.num_units(); ++u) {
    Tensor mine = master_slice(u);
    GPT::init_slice(model_.layout(), seed, layout_.unit_offset(u) + layout_.slice(u, shard_rank()).offset, mine);
  }
}

std::vector<Tensor> ShardedEngine::forward_backward(const Tensor& inputs, const Tensor& targets,
                                                    int64_t micro, float scale) {
  const int L = config_.L, head = L + 1;
  const int64_t rows = inputs.size(0);
  std::vector<std::vector<Tensor>> saved = forward_blocks(inputs, micro, offload_.get());  // [l][j]
  fault_point(comm_.rank(), "forward");
  // Head and loss, then backward into the last block's output. A head tied to the
  // embedding (ModelFamily::head_reads_embedding) computes with unit 0 too, so unit 0 stays
  // gathered from the forward's start and its gradient buffer lives from here to the end.
  const bool tied = config_.head_reads_embedding();
  Tensor g0 = tied ? Tensor::zeros({layout_.unit_size(0)}, DType::f32, device_) : Tensor();
  std::vector<Tensor> dx(saved[L].size()), losses;
  {
    TraceSpan unit_span(tracer, nullptr, "unit", head);
    Tensor gh = Tensor::zeros({layout_.unit_size(head)}, DType::f32, device_);
    bind(head, fetch(head, L), gh);
    if (tied) bind(0, embedding_, g0);  // gathered since the forward's start
    for_micro_batches(rows, micro, [&](int64_t j, int64_t r0, int64_t r1) {
      TraceSpan span(tracer, "forward and backward", "compute", head, (int)j);
      Var x(saved[L][j], true);
      Var l = model_.head_loss(x, targets.slice(r0, r1), scale);
      backward(l);
      losses.push_back(l.value());
      dx[j] = x.grad();
    });
    reduce(head, gh);
    release(head);
  }
  // Blocks, last to first: recompute each from its saved input, backward, one
  // reduce-scatter per unit.
  TraceSpan backward_span(tracer, "backward", "pass");
  for (int l = L - 1; l >= 0; --l) {
    TraceSpan unit_span(tracer, nullptr, "unit", l + 1);
    Tensor g = Tensor::zeros({layout_.unit_size(l + 1)}, DType::f32, device_);
    bind(l + 1, fetch(l + 1, l >= 1 ? l : -1), g);
    for (size_t j = 0; j < dx.size(); ++j) {
      TraceSpan span(tracer, "recompute and backward", "compute", l + 1, (int)j);
      Var x(saved_input(saved, l, j), true);
      Var y = model_.block(l, x);
      backward(y, dx[j]);
      dx[j] = x.grad();
    }
    saved[l + 1].clear();
    if (l == L - 1) fault_point(comm_.rank(), "backward");
    reduce(l + 1, g);
    release(l + 1);
  }
  // Embedding backward needs only the tokens and the incoming gradient (the family's,
  // outside the tape).
  TraceSpan unit_span(tracer, nullptr, "unit", 0);
  if (!tied) g0 = Tensor::zeros({layout_.unit_size(0)}, DType::f32, device_);
  const ModelStages& stages = model_stages(config_);
  for_micro_batches(rows, micro, [&](int64_t j, int64_t r0, int64_t r1) {
    TraceSpan span(tracer, "backward", "compute", 0, (int)j);
    stages.embed_backward(config_, g0, dx[j], inputs.slice(r0, r1));
  });
  reduce(0, g0);
  finish_all_reduce();
  release(0);
  embedding_ = Tensor();
  return losses;
}

std::vector<Tensor> ShardedEngine::loss_sums(const Tensor& inputs, const Tensor& targets, int64_t micro) {
  const int L = config_.L, head = L + 1;
  std::vector<std::vector<Tensor>> saved = forward_blocks(inputs, micro, nullptr);
  TraceSpan unit_span(tracer, nullptr, "unit", head);
  bind(head, fetch(head, -1), Tensor());
  NoGradGuard no_grad;
  std::vector<Tensor> sums;
  for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
    TraceSpan span(tracer, "forward", "compute", head, (int)j);
    sums.push_back(model_.head_loss(Var(saved[L][j]), targets.slice(r0, r1), 1.0f).value());
  });
  release(head);
  release(0);
  embedding_ = Tensor();
  return sums;
}

std::vector<Tensor> ShardedEngine::unit_grads() {
  std::vector<Tensor> out;
  for (int u = 0; u < layout_.num_units(); ++u) out.push_back(grad_slice(u));
  return out;
}

void ShardedEngine::scale_grads(float f) { ops::scale(grads_, grads_, f); }

void ShardedEngine::optimizer_step(float lr, int step) {
  for (int u = 0; u < layout_.num_units(); ++u) {
    Tensor p = master_slice(u), g = grad_slice(u);
    opts_[u]->step(p, g, lr, step);
  }
}

std::vector<OwnedSlice> ShardedEngine::slices() {
  std::vector<OwnedSlice> out;
  for (int u = 0; u < layout_.num_units(); ++u)
    out.push_back({layout_.unit_offset(u) + layout_.slice(u, shard_rank()).offset, master_slice(u),
                   opts_[u].get()});
  return out;
}

// The old slices go to host memory first, so that the device never holds the old and
// the new shard at once (a device planned near its capacity would not have room); then
// each unit's arrays are all-gathered there, one unit at a time, and the new slices
// copied to the device.
void ShardedEngine::reshard(const ShardLayout& next) {
  GPUMIX_CHECK(next.num_ranks() == layout_.num_ranks(), "re-sharding moves state between layouts of one group "
               "size: the new layout has ", next.num_ranks(), " ranks, the running one ", layout_.num_ranks());
  const int rank = shard_rank();
  const ShardLayout old = layout_;
  std::vector<std::vector<float>> staged(3, std::vector<float>((size_t)old.rank_total(rank)));
  const std::vector<OwnedSlice> mine = slices();
  for (int u = 0; u < old.num_units(); ++u) {
    const int64_t at = old.rank_unit_offset(u, rank), n = old.slice(u, rank).count;
    const Tensor* arrays[3] = {&mine[u].master, &mine[u].opt->m(), &mine[u].opt->v()};
    for (int a = 0; a < 3; ++a) {
      Tensor host = Tensor::borrow(staged[a].data() + at, {n}, DType::f32);
      ops::copy(host, *arrays[a]);
    }
  }
  opts_.clear();
  master_ = grads_ = Tensor();
  layout_ = next;
  allocate_state();
  for (int u = 0; u < old.num_units(); ++u) {
    std::vector<float> full((size_t)old.unit_size(u));
    const Slice& s = layout_.slice(u, rank);
    Tensor arrays[3] = {master_slice(u), opts_[u]->m(), opts_[u]->v()};
    for (int a = 0; a < 3; ++a) {
      Tensor from = Tensor::borrow(staged[a].data() + old.rank_unit_offset(u, rank),
                                   {old.slice(u, rank).count}, DType::f32);
      Tensor gathered = Tensor::borrow(full.data(), {old.unit_size(u)}, DType::f32);
      shard_->all_gather_v(from, gathered, old.counts(u));
      ops::copy(arrays[a], gathered.flat_slice(s.offset, s.count));
    }
  }
}

Tensor ShardedEngine::saved_input(std::vector<std::vector<Tensor>>& saved, int l, size_t j) {
  if (!offload_ || !offload_->holds(l, (int)j)) return saved[l][j];
  Tensor x = offload_->take(l, (int)j);
  if (j + 1 < saved[l].size())
    offload_->prefetch(l, (int)j + 1);
  else if (l > 0)
    offload_->prefetch(l - 1, 0);
  return x;
}

void ShardedEngine::set_offload(bool on) {
  if (on && !offload_) offload_ = std::make_unique<InputOffload>(device_);
  if (!on) offload_.reset();
}

// This rank's master weights and gradient slices (zeros) and an AdamW per unit slice.
void ShardedEngine::allocate_state() {
  const int rank = shard_rank();
  master_ = Tensor::empty({layout_.rank_total(rank)}, DType::f32, device_);
  grads_ = Tensor::zeros({layout_.rank_total(rank)}, DType::f32, device_);
  for (int u = 0; u < layout_.num_units(); ++u) {
    const Slice& s = layout_.slice(u, rank);
    opts_.push_back(std::make_unique<AdamW>(model_.layout(), layout_.unit_offset(u) + s.offset, s.count,
                                            device_, adam_));
  }
}

Tensor ShardedEngine::unit_slice(const Tensor& flat, int u) const {
  return flat.flat_slice(layout_.rank_unit_offset(u, shard_rank()), layout_.slice(u, shard_rank()).count);
}

Tensor ShardedEngine::own_part_of_full(int u, Tensor* mine) {
  Tensor full = Tensor::empty({layout_.unit_size(u)}, compute_dtype_, device_);
  const Slice& s = layout_.slice(u, shard_rank());
  *mine = full.flat_slice(s.offset, s.count);
  if (compute_dtype_ == DType::f32)
    ops::copy(*mine, master_slice(u));
  else
    ops::convert(*mine, master_slice(u));
  return full;
}

// Forward through the embedding and every block without recording, keeping each block's
// input per micro-batch: saved[l][j] is block l's input (saved[L][j] the head's).
std::vector<std::vector<Tensor>> ShardedEngine::forward_blocks(const Tensor& inputs, int64_t micro,
                                                               InputOffload* offload) {
  TraceSpan forward_span(tracer, "forward", "pass");
  NoGradGuard no_grad;
  const int L = config_.L;
  std::vector<std::vector<Tensor>> saved(L + 1);
  {
    TraceSpan unit_span(tracer, nullptr, "unit", 0);
    embedding_ = fetch(0, 1);
    bind(0, embedding_, Tensor());
    for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
      TraceSpan span(tracer, "forward", "compute", 0, (int)j);
      saved[0].push_back(model_.embed(inputs.slice(r0, r1)).value());
    });
    if (!config_.head_reads_embedding()) {  // nothing reads it again in this step
      release(0);
      embedding_ = Tensor();
    }
  }
  for (int l = 0; l < L; ++l) {
    TraceSpan unit_span(tracer, nullptr, "unit", l + 1);
    bind(l + 1, fetch(l + 1, l + 2 <= L ? l + 2 : L + 1), Tensor());
    for (size_t j = 0; j < saved[l].size(); ++j) {
      TraceSpan span(tracer, "forward", "compute", l + 1, (int)j);
      saved[l + 1].push_back(model_.block(l, Var(saved[l][j])).value());
      if (offload) {  // its copy out overlaps the next micro-batch's compute
        offload->put(l, (int)j, saved[l][j]);
        saved[l][j] = Tensor();
      }
    }
    release(l + 1);
  }
  return saved;
}

// The full parameters of `unit`, gathered (or taken from the prefetch started earlier);
// then starts gathering `next` (if >= 0) in the background. Every rank walks the units in
// the same order, so their collectives match.
Tensor ShardedEngine::fetch(int unit, int next) {
  Tensor full;
  const double t0 = detail::now_seconds();
  if (pending_ && pending_unit_ == unit) {
    {
      TraceSpan span(tracer, "wait for gather", "wait", unit);
      pending_->wait();
    }
    if (tracer) tracer->add("gather", "collective", pending_issued_, detail::now_seconds(), Tracer::kCollectives, unit);
    full = pending_full_;
    pending_.reset();
  } else {
    GPUMIX_CHECK(!pending_, "internal: prefetched unit ", pending_unit_, " but unit ", unit, " is needed");
    TraceSpan span(tracer, "gather", "collective", unit);
    Tensor mine;
    full = own_part_of_full(unit, &mine);
    shard_->all_gather_v(mine, full, layout_.counts(unit));  // in place, around this rank's slice
  }
  if (prefetch_ && next >= 0) {
    TraceSpan span(tracer, "issue gather", "collective", next);
    Tensor mine;
    pending_full_ = own_part_of_full(next, &mine);
    pending_issued_ = detail::now_seconds();
    pending_ = shard_->all_gather_v_async(mine, pending_full_, layout_.counts(next));
    pending_unit_ = next;
  }
  // Issuing waits too: the ranks agree on the counts first (MpiOptions::validate), and a
  // gather that cannot run in the background runs here.
  wait_s += detail::seconds_since(t0);
  return full;
}

Engine::CollectiveTimes ShardedEngine::time_collectives(int unit, int repeats) {
  GPUMIX_CHECK(!pending_, "time_collectives: a prefetched gather of unit ", pending_unit_, " is in flight");
  GPUMIX_CHECK(!pending_ar_, "time_collectives: the all-reduce of unit ", pending_ar_unit_, " is in flight");
  auto fastest = [&](const std::function<void()>& op) { return fastest_collective(comm_, device_, repeats, op); };
  const std::vector<int64_t> counts = layout_.counts(unit);
  Tensor mine;
  Tensor full = own_part_of_full(unit, &mine);
  Tensor grads = Tensor::zeros({layout_.unit_size(unit)}, DType::f32, device_);
  Tensor slice = Tensor::zeros({counts[shard_rank()]}, DType::f32, device_);
  CollectiveTimes t;
  auto form = [&] {
    return topology_ ? std::string(topology_algo_name(static_cast<TopologyComm*>(topology_.get())->last_choice().algo))
                     : std::string("flat");
  };
  t.all_gather_s = fastest([&] { shard_->all_gather_v(mine, full, counts); });
  t.all_gather_form = form();
  t.reduce_scatter_s = fastest([&] { shard_->reduce_scatter_v(grads, slice, counts); });
  t.reduce_scatter_form = form();
  if (replicas_) t.all_reduce_s = fastest([&] { if (slice.numel() > 0) replicas_->all_reduce_sum(slice); });
  return t;
}

// The unit's gradient reduce-scattered within the group (waited for), then, under hybrid
// sharding, its slice all-reduced across the groups: with prefetch, issued and left in
// flight behind the next unit's backward (nothing reads the slice before the optimizer),
// waited for at the next reduce or at the end of the backward (finish_all_reduce).
void ShardedEngine::reduce(int unit, const Tensor& full_grad) {
  fault_point(comm_.rank(), "collective");
  finish_all_reduce();
  const double t0 = detail::now_seconds();
  Tensor mine = grad_slice(unit);
  {
    TraceSpan span(tracer, "reduce-scatter", "collective", unit);
    shard_->reduce_scatter_v(full_grad, mine, layout_.counts(unit));
  }
  if (replicas_ && mine.numel() > 0) {  // every replica of the slice gets the sum over the groups
    if (prefetch_) {
      TraceSpan span(tracer, "issue all-reduce across groups", "collective", unit);
      pending_ar_issued_ = detail::now_seconds();
      pending_ar_ = replicas_->all_reduce_sum_async(mine);
      pending_ar_unit_ = unit;
    } else {
      TraceSpan span(tracer, "all-reduce across groups", "collective", unit);
      replicas_->all_reduce_sum(mine);
    }
  }
  wait_s += detail::seconds_since(t0);
}

void ShardedEngine::finish_all_reduce() {
  if (!pending_ar_) return;
  const double t0 = detail::now_seconds();
  {
    TraceSpan span(tracer, "wait for all-reduce across groups", "wait", pending_ar_unit_);
    pending_ar_->wait();
  }
  if (tracer)
    tracer->add("all-reduce across groups", "collective", pending_ar_issued_, detail::now_seconds(),
                Tracer::kCollectives, pending_ar_unit_);
  pending_ar_.reset();
  wait_s += detail::seconds_since(t0);
}

}  // namespace gpumix::dist
