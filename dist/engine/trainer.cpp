#include "dist/engine/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "autograd/functions.h"
#include "core/ops.h"
#include "dist/engine/drift.h"
#include "dist/engine/fault.h"
#include "dist/plan/planner.h"
#include "dist/plan/simulator.h"
#include "dist/engine/shard_layout.h"
#include "nn/data/loader.h"
#include "nn/gpt.h"
#include "nn/optim.h"

namespace gpumix::dist {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Rows [begin, end) of a (rows, T) tensor, in micro-batches of at most `micro` rows.
template <class F>
void for_micro_batches(int64_t rows, int64_t micro, F&& fn) {
  for (int64_t begin = 0, j = 0; begin < rows; begin += micro, ++j) fn(j, begin, std::min(rows, begin + micro));
}

// A rank's share of the training state, for checkpoints: elements [flat_offset, +count) of
// the flat layout, with their master weights and AdamW moments.
struct OwnedSlice {
  int64_t flat_offset;
  Tensor master;
  AdamW* opt;
};

// One rank's part of a step. Losses are returned already scaled (this rank's share of the
// global mean); gradients end up reduced into the rank's own slices.
class Engine {
 public:
  virtual ~Engine() = default;
  // Forward and backward of this rank's rows of a batch; returns its scaled loss.
  virtual double forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                                  float scale) = 0;
  // Forward only: the sum of per-token losses over the rows.
  virtual double loss_sum(const Tensor& inputs, const Tensor& targets, int64_t micro) = 0;
  virtual double grad_sum_squares() = 0;  // of this rank's gradient slices
  // This rank's reduced gradient slice of each unit (unit order; empty where it owns none).
  virtual std::vector<Tensor> unit_grads() = 0;
  virtual void scale_grads(float factor) = 0;
  virtual void optimizer_step(float lr, int step) = 0;
  virtual std::vector<OwnedSlice> slices() = 0;
  // Moves this rank's training state to another layout of the same model (a new plan's
  // shares). Every rank calls it at the same point.
  virtual void reshard(const ShardLayout& next) = 0;
  double wait_s = 0;  // time spent waiting for collectives since the last reset
};

// ---- one rank: the whole model --------------------------------------------------------------

class WholeModelEngine final : public Engine {
 public:
  WholeModelEngine(const GPTConfig& config, Device device, uint64_t seed, const AdamWConfig& adam,
                   bool recompute)
      : model_(config, device, seed),
        opt_(model_.layout(), 0, model_.num_params(), device, adam),
        recompute_(recompute) {}

  double forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                          float scale) override {
    model_.zero_grad();
    double loss = 0;
    for_micro_batches(inputs.size(0), micro, [&](int64_t, int64_t r0, int64_t r1) {
      Var l = model_.loss(inputs.slice(r0, r1), targets.slice(r0, r1), scale, recompute_);
      backward(l);
      loss += l.value().item();
    });
    return loss;
  }
  double loss_sum(const Tensor& inputs, const Tensor& targets, int64_t micro) override {
    NoGradGuard no_grad;
    double sum = 0;
    for_micro_batches(inputs.size(0), micro, [&](int64_t, int64_t r0, int64_t r1) {
      sum += model_.loss(inputs.slice(r0, r1), targets.slice(r0, r1), 1.0f).value().item();
    });
    return sum;
  }
  double grad_sum_squares() override { return ops::sum_squares(model_.grads()); }
  std::vector<Tensor> unit_grads() override {
    std::vector<Tensor> out;
    for (int u = 0; u < model_.config().num_units(); ++u) {
      const auto [offset, count] = model_.unit_range(u);
      out.push_back(model_.grads().flat_slice(offset, count));
    }
    return out;
  }
  void scale_grads(float f) override { ops::scale(model_.grads(), model_.grads(), f); }
  void optimizer_step(float lr, int step) override {
    opt_.step(model_.params(), model_.grads(), lr, step);
  }
  std::vector<OwnedSlice> slices() override { return {{0, model_.params(), &opt_}}; }
  void reshard(const ShardLayout&) override {}  // one rank owns everything, in any plan

 private:
  GPT model_;
  AdamW opt_;
  bool recompute_;
};

// ---- several ranks: the uneven sharded engine ------------------------------------------------

class ShardedEngine final : public Engine {
 public:
  ShardedEngine(const GPTConfig& config, const ShardLayout& layout, Comm& comm, Device device,
                uint64_t seed, const AdamWConfig& adam, bool prefetch)
      : config_(config), layout_(layout), comm_(comm), device_(device), model_(config, device),
        adam_(adam), prefetch_(prefetch) {
    allocate_state();
    for (int u = 0; u < layout_.num_units(); ++u) {
      Tensor mine = master_slice(u);
      GPT::init_slice(model_.layout(), seed, layout_.unit_offset(u) + layout_.slice(u, comm.rank()).offset, mine);
    }
  }

  double forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                          float scale) override {
    const int L = config_.L, head = L + 1;
    const int64_t rows = inputs.size(0);
    std::vector<std::vector<Tensor>> saved = forward_blocks(inputs, micro);  // [l][j]
    fault_point(comm_.rank(), "forward");
    // Head and loss, then backward into the last block's output. The LM head is tied to
    // wte, so unit 0 is gathered here too and its gradient buffer lives until the end.
    Tensor g0 = Tensor::zeros({layout_.unit_size(0)}, DType::f32, device_);
    Tensor gh = Tensor::zeros({layout_.unit_size(head)}, DType::f32, device_);
    bind(head, fetch(head, 0), gh);
    bind(0, fetch(0, L), g0);
    std::vector<Tensor> dx(saved[L].size());
    double loss = 0;
    for_micro_batches(rows, micro, [&](int64_t j, int64_t r0, int64_t r1) {
      Var x(saved[L][j], true);
      Var l = cross_entropy(model_.head(x), targets.slice(r0, r1), scale);
      backward(l);
      loss += l.value().item();
      dx[j] = x.grad();
    });
    reduce(head, gh);
    release(head);
    // Blocks, last to first: recompute each from its saved input, backward, one
    // reduce-scatter per unit.
    for (int l = L - 1; l >= 0; --l) {
      Tensor g = Tensor::zeros({layout_.unit_size(l + 1)}, DType::f32, device_);
      bind(l + 1, fetch(l + 1, l >= 1 ? l : -1), g);
      for (size_t j = 0; j < dx.size(); ++j) {
        Var x(saved[l][j], true);
        Var y = model_.block(l, x);
        backward(y, dx[j]);
        dx[j] = x.grad();
      }
      saved[l + 1].clear();
      if (l == L - 1) fault_point(comm_.rank(), "backward");
      reduce(l + 1, g);
      release(l + 1);
    }
    // Embedding backward needs only the tokens and the incoming gradient.
    const int64_t VC = (int64_t)config_.V * config_.C;
    Tensor dwte = g0.flat_slice(0, VC).view({config_.V, config_.C});
    Tensor dwpe = g0.flat_slice(VC, (int64_t)config_.T * config_.C).view({config_.T, config_.C});
    for_micro_batches(rows, micro, [&](int64_t j, int64_t r0, int64_t r1) {
      ops::embedding_backward(dwte, dwpe, dx[j], inputs.slice(r0, r1));
    });
    reduce(0, g0);
    release(0);
    return loss;
  }

  double loss_sum(const Tensor& inputs, const Tensor& targets, int64_t micro) override {
    const int L = config_.L, head = L + 1;
    std::vector<std::vector<Tensor>> saved = forward_blocks(inputs, micro);
    bind(head, fetch(head, 0), Tensor());
    bind(0, fetch(0, -1), Tensor());
    NoGradGuard no_grad;
    double sum = 0;
    for_micro_batches(inputs.size(0), micro, [&](int64_t j, int64_t r0, int64_t r1) {
      sum += cross_entropy(model_.head(Var(saved[L][j])), targets.slice(r0, r1), 1.0f).value().item();
    });
    release(head);
    release(0);
    return sum;
  }

  double grad_sum_squares() override { return ops::sum_squares(grads_); }
  std::vector<Tensor> unit_grads() override {
    std::vector<Tensor> out;
    for (int u = 0; u < layout_.num_units(); ++u) out.push_back(grad_slice(u));
    return out;
  }
  void scale_grads(float f) override { ops::scale(grads_, grads_, f); }
  void optimizer_step(float lr, int step) override {
    for (int u = 0; u < layout_.num_units(); ++u) {
      Tensor p = master_slice(u), g = grad_slice(u);
      opts_[u]->step(p, g, lr, step);
    }
  }
  std::vector<OwnedSlice> slices() override {
    std::vector<OwnedSlice> out;
    for (int u = 0; u < layout_.num_units(); ++u)
      out.push_back({layout_.unit_offset(u) + layout_.slice(u, comm_.rank()).offset, master_slice(u),
                     opts_[u].get()});
    return out;
  }

  // The old slices go to host memory first, so that the device never holds the old and
  // the new shard at once (a device planned near its capacity would not have room); then
  // each unit's arrays are all-gathered there, one unit at a time, and the new slices
  // copied to the device.
  void reshard(const ShardLayout& next) override {
    const int rank = comm_.rank();
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
        comm_.all_gather_v(from, gathered, old.counts(u));
        ops::copy(arrays[a], gathered.flat_slice(s.offset, s.count));
      }
    }
  }

 private:
  // This rank's master weights and gradient slices (zeros) and an AdamW per unit slice.
  void allocate_state() {
    const int rank = comm_.rank();
    master_ = Tensor::empty({layout_.rank_total(rank)}, DType::f32, device_);
    grads_ = Tensor::zeros({layout_.rank_total(rank)}, DType::f32, device_);
    for (int u = 0; u < layout_.num_units(); ++u) {
      const Slice& s = layout_.slice(u, rank);
      opts_.push_back(std::make_unique<AdamW>(model_.layout(), layout_.unit_offset(u) + s.offset, s.count,
                                              device_, adam_));
    }
  }

  Tensor master_slice(int u) {
    return master_.flat_slice(layout_.rank_unit_offset(u, comm_.rank()), layout_.slice(u, comm_.rank()).count);
  }
  Tensor grad_slice(int u) {
    return grads_.flat_slice(layout_.rank_unit_offset(u, comm_.rank()), layout_.slice(u, comm_.rank()).count);
  }

  // Forward through the embedding and every block without recording, keeping each block's
  // input per micro-batch: saved[l][j] is block l's input (saved[L][j] the head's).
  std::vector<std::vector<Tensor>> forward_blocks(const Tensor& inputs, int64_t micro) {
    NoGradGuard no_grad;
    const int L = config_.L;
    std::vector<std::vector<Tensor>> saved(L + 1);
    bind(0, fetch(0, 1), Tensor());
    for_micro_batches(inputs.size(0), micro, [&](int64_t, int64_t r0, int64_t r1) {
      saved[0].push_back(model_.embed(inputs.slice(r0, r1)).value());
    });
    release(0);
    for (int l = 0; l < L; ++l) {
      bind(l + 1, fetch(l + 1, l + 2 <= L ? l + 2 : L + 1), Tensor());
      for (const Tensor& x : saved[l]) saved[l + 1].push_back(model_.block(l, Var(x)).value());
      release(l + 1);
    }
    return saved;
  }

  void bind(int unit, const Tensor& params, const Tensor& grads) { model_.bind_unit(unit, params, grads); }
  // After a unit ran: its gathered parameters (and gradient buffer) are freed, so that only
  // the running unit, the prefetched one and the tied embedding are ever on the device.
  void release(int unit) { model_.unbind_unit(unit); }

  // The full parameters of `unit`, gathered (or taken from the prefetch started earlier);
  // then starts gathering `next` (if >= 0) in the background. Every rank walks the units in
  // the same order, so their collectives match.
  Tensor fetch(int unit, int next) {
    Tensor full;
    const double t0 = detail::now_seconds();
    if (pending_ && pending_unit_ == unit) {
      pending_->wait();
      full = pending_full_;
      pending_.reset();
    } else {
      GPUMIX_CHECK(!pending_, "internal: prefetched unit ", pending_unit_, " but unit ", unit, " is needed");
      full = Tensor::empty({layout_.unit_size(unit)}, DType::f32, device_);
      comm_.all_gather_v(master_slice(unit), full, layout_.counts(unit));
    }
    wait_s += detail::seconds_since(t0);
    if (prefetch_ && next >= 0) {
      pending_full_ = Tensor::empty({layout_.unit_size(next)}, DType::f32, device_);
      pending_ = comm_.all_gather_v_async(master_slice(next), pending_full_, layout_.counts(next));
      pending_unit_ = next;
    }
    return full;
  }

  void reduce(int unit, const Tensor& full_grad) {
    fault_point(comm_.rank(), "collective");
    const double t0 = detail::now_seconds();
    Tensor mine = grad_slice(unit);
    comm_.reduce_scatter_v(full_grad, mine, layout_.counts(unit));
    wait_s += detail::seconds_since(t0);
  }

  GPTConfig config_;
  ShardLayout layout_;
  Comm& comm_;
  Device device_;
  GPT model_;  // unbound: each unit is bound to its gathered parameters as it runs
  AdamWConfig adam_;
  bool prefetch_;
  Tensor master_, grads_;  // (rank_total): this rank's slices of every unit, back to back
  std::vector<std::unique_ptr<AdamW>> opts_;
  CommRequestPtr pending_;
  Tensor pending_full_;
  int pending_unit_ = -1;
};

// ---- checkpoints ----------------------------------------------------------------------------

std::string save(const TrainOptions& o, const GPTConfig& config, const std::vector<RankWork>& work,
                 Engine& engine, Comm& comm, int step, uint64_t tokenizer_hash) {
  const int64_t P = config.total_params();
  // The temporary folder's nonce: the step and a number rank 0 draws for this save (a sum
  // with zeros, exact in double: every rank gets it). A leftover folder of an interrupted
  // save of the same step (a rank killed while writing) must not block the resumed run's.
  const uint64_t draw = comm.rank() == 0 ? (uint64_t)std::random_device{}() : 0;
  const std::string nonce = "s" + std::to_string(step) + "r" + std::to_string((uint64_t)comm.all_reduce_sum((double)draw));
  CheckpointWriter writer;
  std::string error, tmp = checkpoint_temp_dir(o.out, step, nonce);
  auto attempt = [&](auto&& fn) {
    error.clear();
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  if (comm.rank() == 0)
    attempt([&] { tmp = writer.begin(o.out, step, {{"master", P}, {"adam_m", P}, {"adam_v", P}}, nonce); });
  comm.agree("checkpoint: preparing step " + std::to_string(step), {}, error);
  attempt([&] {
    for (const OwnedSlice& s : engine.slices()) {
      const int64_t n = s.master.numel();
      CheckpointWriter::write_slice(tmp, "master", s.flat_offset, s.master.data<float>(), n);
      CheckpointWriter::write_slice(tmp, "adam_m", s.flat_offset, s.opt->m().data<float>(), n);
      CheckpointWriter::write_slice(tmp, "adam_v", s.flat_offset, s.opt->v().data<float>(), n);
    }
  });
  fault_point(comm.rank(), "checkpoint");
  comm.agree("checkpoint: writing slices of step " + std::to_string(step), {}, error);
  std::string dir;
  if (comm.rank() == 0) {
    CheckpointMeta meta;
    meta.model = config_to_json(config);
    meta.data_position = {{"next_batch", step}, {"seed", o.seed}};
    meta.rng = {{"seed", o.seed}};
    meta.tokenizer_hash = tokenizer_hash;
    json ranks = json::array();
    for (const RankWork& w : work) ranks.push_back({{"batch", w.batch}, {"micro_batch", w.micro_batch}, {"share", w.share}});
    meta.plan = {{"ranks", ranks}, {"global_batch", o.batch}};
    meta.extra = {{"lr", o.lr}, {"steps", o.steps}, {"seq", config.T}};
    attempt([&] { dir = writer.commit(meta); });
  }
  comm.agree("checkpoint: committing step " + std::to_string(step), {}, error);
  return dir;
}

// Reads this rank's slices; returns the checkpoint's step (the same on every rank).
int load(const std::string& where, const GPTConfig& config, Engine& engine, Comm& comm,
         uint64_t tokenizer_hash) {
  std::string error;
  int64_t step = -1;
  try {
    const CheckpointReader reader = open_checkpoint(where);
    reader.check_model(config_to_json(config));
    GPUMIX_CHECK(!tokenizer_hash || !reader.tokenizer_hash() || reader.tokenizer_hash() == tokenizer_hash,
                 "checkpoint ", reader.dir(), " was trained with another tokenizer; resume with the "
                 "run's own (--tokenizer <run>/tokenizer.bpe)");
    for (const OwnedSlice& s : engine.slices()) {
      const int64_t n = s.master.numel();
      reader.read_slice("master", s.flat_offset, s.master.data<float>(), n);
      reader.read_slice("adam_m", s.flat_offset, s.opt->m().data<float>(), n);
      reader.read_slice("adam_v", s.flat_offset, s.opt->v().data<float>(), n);
    }
    step = reader.step();
    if (comm.rank() == 0) std::printf("resumed from %s (step %lld)\n", reader.dir().c_str(), (long long)step);
  } catch (const std::exception& e) {
    error = e.what();
  }
  comm.agree("resume", {step}, error);
  return (int)step;
}

// GPUMIX_FAULT injections of non-finite values (dist/engine/fault.h): tests of the guard below.
void inject_faults(Engine& engine, int rank, double* local_loss) {
  if (fault_inject(rank, "nan_loss")) *local_loss = NAN;
  int unit = -1;
  for (const char* point : {"nan_grad", "inf_grad"}) {
    if (!fault_inject(rank, point, &unit)) continue;
    const std::vector<Tensor> grads = engine.unit_grads();
    if (unit < 0)
      for (size_t u = 0; u < grads.size() && unit < 0; ++u)
        if (grads[u].numel() > 0) unit = (int)u;
    GPUMIX_CHECK(unit >= 0 && unit < (int)grads.size() && grads[unit].numel() > 0, "GPUMIX_FAULT: rank ",
                 rank, " owns no gradient of unit ", unit);
    grads[unit].data<float>()[grads[unit].numel() / 2] = point[0] == 'n' ? NAN : INFINITY;
  }
}

// The non-finite guard. Each rank checks its own loss and the sum of squares of each
// unit's reduced gradient slice (the squares it needs for the norm anyway); one small
// all-gather then tells every rank what every rank found, so that all of them agree on the
// verdict and print the same message. Returns this rank's sum of squares.
const char* unit_name(int unit, int L, std::string* buf) {
  *buf = unit == 0 ? "embedding" : unit <= L ? "block " + std::to_string(unit - 1) : "head";
  return buf->c_str();
}

double check_finite(Engine& engine, Comm& comm, double local_loss, int step, int L, Device device,
                    std::string* error) {
  double sum = 0;
  int bad_unit = -1;
  const std::vector<Tensor> grads = engine.unit_grads();
  for (size_t u = 0; u < grads.size(); ++u) {
    const double s = grads[u].numel() > 0 ? ops::sum_squares(grads[u]) : 0.0;
    if (!std::isfinite(s) && bad_unit < 0) bad_unit = (int)u;
    sum += s;
  }
  const int ranks = comm.size();
  Tensor mine = Tensor::empty({2}, DType::i32, device);
  mine.data<int32_t>()[0] = std::isfinite(local_loss) ? 0 : 1;
  mine.data<int32_t>()[1] = bad_unit;
  Tensor all = Tensor::empty({2 * (int64_t)ranks}, DType::i32, device);
  comm.all_gather_v(mine, all, std::vector<int64_t>(ranks, 2));
  const int32_t* found = all.data<int32_t>();
  std::string loss_ranks, grad_text, name;
  for (int r = 0; r < ranks; ++r) {
    if (found[2 * r]) loss_ranks += str(loss_ranks.empty() ? "" : ", ", r);
    if (found[2 * r + 1] >= 0)
      grad_text += str(grad_text.empty() ? "" : "; ", "unit ", found[2 * r + 1], " (",
                       unit_name(found[2 * r + 1], L, &name), ") on rank ", r);
  }
  error->clear();
  if (!loss_ranks.empty())
    *error = str("step ", step, ": the loss is not finite on rank ", loss_ranks, " (unit ", L + 1, ", head)");
  if (!grad_text.empty())
    *error += str(error->empty() ? str("step ", step, ": ") : std::string("; "),
                  "non-finite gradient in ", grad_text, " (the first such unit of each rank's reduced slices)");
  return sum;
}

// Rows [begin, end) of `total` for each rank, proportional to the plan's batches.
std::pair<int64_t, int64_t> proportional_rows(const std::vector<RankWork>& work, int64_t global_batch,
                                              int rank, int64_t total) {
  int64_t before = 0;
  for (int r = 0; r < rank; ++r) before += work[r].batch;
  const int64_t begin = before * total / global_batch;
  const int64_t end = (before + work[rank].batch) * total / global_batch;
  return {begin, end};
}

// GPUMIX_FAULT=RANK:slow:STEP:FACTOR: from step STEP on, rank RANK's device runs FACTOR
// times slower (a device that slows down mid-run: the tests of re-planning).
void slow_down_if_injected(int rank, Device device) {
  int factor = 0;
  if (!fault_inject(rank, "slow", &factor)) return;
  GPUMIX_CHECK(factor >= 1, "GPUMIX_FAULT: slow needs a factor of at least 1 (RANK:slow:STEP:FACTOR), got ", factor);
  DeviceProps props = device_props(device);
  props.slowdown = factor;
  props.emulated = true;
  configure_device(device, props);
}

// The running plan and what it was made from: the profile (corrected as devices drift),
// the planner, and the drift monitor that compares measured compute times with the plan's.
class Replanner {
 public:
  static constexpr int kMaxDriftSteps = 64;
  struct Change {
    std::vector<double> factors;       // per rank: measured / predicted, relative to the others
    bool adopted = false;              // a new plan replaced the running one
    double before_s = 0, after_s = 0;  // predicted step of the running plan and of the new one
    std::string describe_factors() const {
      std::string text;
      for (size_t i = 0; i < factors.size(); ++i)
        if (factors[i] != 1.0) text += str(" rank ", i, " x", std::round(factors[i] * 100) / 100);
      return text;
    }
  };

  Replanner(Profile profile, std::string name, int64_t global_batch, const DriftOptions& drift)
      : profile_(std::move(profile)), name_(std::move(name)), global_batch_(global_batch), drift_(drift) {
    // This engine keeps every rank in every collective, so a rank left out of the plan
    // would still hold the gathered units that its memory model does not count.
    options_.allow_leave_out = false;
    plan_ = run_planner(name_, profile_, global_batch_, options_);
    watch();
  }

  const Plan& plan() const { return plan_; }
  const std::string& name() const { return name_; }
  const Change& last_change() const { return change_; }
  std::vector<RankWork> work() const {
    std::vector<RankWork> w;
    for (const RankPlan& r : plan_.ranks) w.push_back({r.batch, r.micro_batch, r.share});
    return w;
  }
  std::vector<double> predicted_busy_s() const {
    std::vector<double> t;
    for (const RankPlan& r : plan_.ranks) t.push_back(r.busy_s);
    return t;
  }
  std::vector<double> predicted_bytes() const {
    std::vector<double> b;
    for (const RankPlan& r : plan_.ranks) b.push_back(r.memory.total());
    return b;
  }

  // One step's compute seconds per rank. True when drift was confirmed: the profile is
  // corrected and, if the planner then finds a plan at least 5% faster than the running
  // one (both predicted on the corrected profile), it becomes the plan (last_change()).
  bool observe(const std::vector<double>& busy_s) {
    if (name_ == "even") return false;  // even shares ignore speed: nothing to re-plan
    const std::vector<double> factors = monitor_->observe(busy_s);
    if (factors.empty()) return false;
    profile_ = corrected_profile(profile_, factors);
    const Plan current = make_plan(CostModel(profile_, options_.memory), name_, global_batch_, plan_.choices());
    change_ = {factors, false, current.predicted.step_s, current.predicted.step_s};
    plan_ = current;
    try {
      Plan next = run_planner(name_, profile_, global_batch_, options_);
      change_.after_s = next.predicted.step_s;
      if (next.predicted.step_s < 0.95 * current.predicted.step_s) {
        plan_ = std::move(next);
        change_.adopted = true;
        // A device whose speed keeps changing (the load of a shared machine) would be
        // re-planned back and forth: each adopted re-plan doubles the steps that must
        // confirm the next drift.
        drift_.steps = std::min(2 * drift_.steps, kMaxDriftSteps);
      }
    } catch (const InfeasiblePlan&) {
      // The corrected devices cannot hold any plan the model trusts: keep the running one.
    }
    watch();
    return true;
  }

 private:
  void watch() {
    std::vector<double> predicted = predicted_busy_s();
    for (size_t i = 0; i < predicted.size(); ++i)
      if (plan_.ranks[i].batch == 0) predicted[i] = 0;  // a state-only rank's time is too small to judge
    monitor_ = std::make_unique<DriftMonitor>(drift_, predicted);
  }

  Profile profile_;
  std::string name_;
  int64_t global_batch_;
  DriftOptions drift_;
  PlannerOptions options_;
  Plan plan_;
  std::unique_ptr<DriftMonitor> monitor_;
  Change change_;
};

// Per rank: the plan's compute time per step next to the measured median (the first two
// steps of the plan left out: warm-up), and its memory next to the allocator's peak.
std::string prediction_table(const Plan& plan, const std::vector<std::vector<double>>& busy_history,
                             const std::vector<double>& peak) {
  const size_t skip = busy_history.size() > 3 ? 2 : 0;
  std::string out = "predicted vs measured, per rank (compute per step; memory peak)\n"
                    "rank   busy ms pred   measured   ratio  |  memory pred   measured   ratio\n";
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    std::vector<double> b;
    for (size_t s = skip; s < busy_history.size(); ++s) b.push_back(busy_history[s][r]);
    std::sort(b.begin(), b.end());
    const double measured = b[b.size() / 2], predicted = plan.ranks[r].busy_s;
    const double mem = plan.ranks[r].memory.total();
    char row[200];
    std::snprintf(row, sizeof row, "%4zu %14.1f %10.1f %7.2f  | %12s %10s %7.2f\n", r, predicted * 1e3, measured * 1e3,
                  predicted > 0 ? measured / predicted : 0.0, format_bytes((int64_t)mem).c_str(),
                  format_bytes((int64_t)peak[r]).c_str(), mem > 0 ? peak[r] / mem : 0.0);
    out += row;
  }
  return out;
}

}  // namespace

void validate_work(const std::vector<RankWork>& work, int64_t global_batch, int ranks) {
  GPUMIX_CHECK((int)work.size() == ranks, "the plan has ", work.size(), " ranks but ", ranks,
               " are running; give one batch, micro-batch and share per rank");
  int64_t batch = 0;
  double share = 0;
  for (size_t r = 0; r < work.size(); ++r) {
    const RankWork& w = work[r];
    GPUMIX_CHECK(w.batch >= 0, "rank ", r, ": batch ", w.batch, " is negative");
    GPUMIX_CHECK(w.batch == 0 || w.micro_batch >= 1, "rank ", r, ": micro-batch ", w.micro_batch,
                 " must be at least 1 for its batch of ", w.batch);
    GPUMIX_CHECK(w.share >= 0 && w.share <= 1, "rank ", r, ": share ", w.share, " is outside [0, 1]");
    batch += w.batch;
    share += w.share;
  }
  GPUMIX_CHECK(batch == global_batch, "the plan's batches sum to ", batch, " but the global batch is ",
               global_batch, "; make them add up (or change --batch)");
  GPUMIX_CHECK(std::fabs(share - 1.0) <= 1e-6, "the plan's shares sum to ", share,
               ", not 1; every parameter needs exactly one owner");
}

std::vector<RankWork> even_work(int64_t global_batch, int ranks) {
  std::vector<RankWork> work(ranks);
  for (int r = 0; r < ranks; ++r) {
    work[r].batch = global_batch / ranks + (r < global_batch % ranks ? 1 : 0);
    work[r].micro_batch = std::max<int64_t>(1, work[r].batch);
    work[r].share = 1.0 / ranks;
  }
  return work;
}

TrainResult train(const TrainOptions& o, const std::vector<RankWork>& given_work, Comm& comm,
                  const EngineOptions& engine_options) {
  const int rank = comm.rank(), ranks = comm.size();
  const bool lead = rank == 0;
  GPUMIX_CHECK(o.steps >= 1, "--steps must be at least 1, got ", o.steps);
  GPUMIX_CHECK(o.batch >= 1, "--batch must be at least 1, got ", o.batch);
  GPUMIX_CHECK(o.seq >= 0, "--seq must be positive, got ", o.seq);
  GPUMIX_CHECK(o.lr > 0, "--lr must be positive, got ", o.lr);
  if (engine_options.planner.empty()) validate_work(given_work, o.batch, ranks);
  const GPTConfig preset = gpt_preset(o.model);  // fail fast on an unknown name

  const fs::path log_path = fs::path(o.out) / "log.jsonl";
  const bool resuming = !o.resume.empty();
  std::string error;
  if (lead) {
    try {
      fs::create_directories(o.out);
      // An empty log is a run that failed before its first step: nothing to keep.
      GPUMIX_CHECK(resuming || !fs::exists(log_path) || fs::file_size(log_path) == 0, "run folder ", o.out,
                   " already holds a run (",
                   log_path.string(), "); continue it with --resume ", o.out, ", or pass another --out");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  comm.agree("run folder", {}, error);

  // Rank 0 prepares the tokenizer first; the others then load it.
  const int64_t seq = o.seq > 0 ? o.seq : preset.T;
  RunData run;
  error.clear();
  if (lead) {
    try {
      run = prepare_data(o, true);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  comm.agree("data", {}, error);
  if (!lead) run = prepare_data(o, false);
  const GPTConfig config = resolve_model(o, run.vocab, seq);
  const data::Split split = data::split_train_val(run.tokens, seq, o.val_fraction);
  const data::BatchLoader loader(split.train, seq, o.batch, o.seed);
  const data::BatchLoader val_loader(split.val, seq, o.batch, o.seed);

  const Device device = engine_options.device_set
                            ? engine_options.device
                            : Device::cpu(ranks > 1 && comm.backend() == "local" ? rank : 0);
  if (o.device_memory > 0) {
    DeviceProps props = device_props(device);
    props.capacity = o.device_memory;
    configure_device(device, props);
  }
  std::vector<RankWork> work = given_work;
  std::unique_ptr<Replanner> planner;
  if (!engine_options.planner.empty()) {
    planner = std::make_unique<Replanner>(
        profile_cluster(config, (int)seq, engine_options.device_label, device, comm, engine_options.profiler),
        engine_options.planner == "auto" ? "gpumix" : engine_options.planner, o.batch, engine_options.drift);
    work = planner->work();
    validate_work(work, o.batch, ranks);
    if (lead && !planner->plan().fits())
      std::printf("warning: the %s plan does not fit its memory model: %s\n", planner->name().c_str(),
                  planner->plan().oom_message().c_str());
  }
  AdamWConfig adam;
  adam.weight_decay = o.weight_decay;
  std::vector<int64_t> unit_sizes;
  for (int u = 0; u < config.num_units(); ++u) unit_sizes.push_back(config.unit_params(u));
  auto layout_of = [&](const std::vector<RankWork>& w) {
    std::vector<double> shares;
    for (const RankWork& r : w) shares.push_back(r.share);
    const ShardLayout layout(unit_sizes, shares);
    comm.agree("shard layout", {(int64_t)layout.fingerprint(), (int64_t)config.total_params()});
    return layout;
  };
  std::unique_ptr<Engine> engine;
  if (ranks == 1)
    engine = std::make_unique<WholeModelEngine>(config, device, o.seed, adam, o.recompute);
  else
    engine = std::make_unique<ShardedEngine>(config, layout_of(work), comm, device, o.seed, adam,
                                             engine_options.prefetch);
  LRSchedule schedule;
  schedule.max_lr = o.lr;
  schedule.min_lr = o.lr * o.min_lr_ratio;
  schedule.warmup = o.warmup >= 0 ? o.warmup : std::min(100, o.steps / 10);
  schedule.total = o.steps;

  int start = 0;
  if (resuming) {
    start = load(o.resume, config, *engine, comm, run.tokenizer_hash);
    GPUMIX_CHECK(start < o.steps, "the checkpoint is at step ", start, ", not before --steps ", o.steps,
                 "; pass a larger --steps to train further");
  }

  auto plan_text = [&] {
    std::string text;
    for (int r = 0; r < ranks; ++r)
      text += str(r ? ", " : "", work[r].batch, "/", work[r].micro_batch, "/", work[r].share);
    return text;
  };
  if (lead) {
    print_settings({
        {"data", o.data + " (" + human_count((double)run.tokens.size()) + " tokens)"},
        {"split", human_count((double)split.train.size()) + " train / " +
                      human_count((double)split.val.size()) + " validation"},
        {"tokenizer", run.tokenizer_path + " (vocab " + std::to_string(run.vocab) + ")"},
        {"model", config.name + " L=" + std::to_string(config.L) + " NH=" + std::to_string(config.NH) +
                      " C=" + std::to_string(config.C) + " T=" + std::to_string(config.T)},
        {"parameters", human_count((double)config.total_params())},
        {"batch x seq", std::to_string(o.batch) + " x " + std::to_string(seq) + " = " +
                            std::to_string(o.batch * seq) + " tokens/step"},
        {"steps", std::to_string(o.steps) + (resuming ? " (from step " + std::to_string(start) + ")" : "")},
        {"lr", str(o.lr, " warmup ", schedule.warmup, " cosine to ", schedule.min_lr)},
        {"weight decay / clip", str(o.weight_decay, " / ", o.grad_clip)},
        {"ranks", str(ranks, " (", comm.backend(), ")")},
        {"plan b/m/r per rank", plan_text()},
        {"recompute", ranks > 1 || o.recompute ? "on" : "off"},
        {"device (rank 0)", device.str() + " (" + format_bytes(device_props(device).capacity) + ")"},
        {"threads per rank", std::to_string(omp_get_max_threads())},
        {"seed", std::to_string(o.seed)},
        {"out", o.out},
    });
    if (planner) std::printf("%s", plan_table(planner->plan()).c_str());
  }

  std::ofstream log;
  if (lead) {
    log.open(log_path, std::ios::app);
    GPUMIX_CHECK(log.good(), "cannot write ", log_path.string());
  }
  auto log_line = [&](const json& j) {
    if (!lead) return;
    log << j.dump() << "\n";
    log.flush();
  };

  // Validation: the eval windows split over the ranks like the batch.
  auto evaluate = [&](int64_t total) {
    const auto [w0, w1] = proportional_rows(work, o.batch, rank, total);
    double sum = 0;
    const int64_t chunk = std::max<int64_t>(1, work[rank].batch);
    // Every rank walks the same number of passes so that their collectives match.
    int64_t passes = 0;
    for (int r = 0; r < ranks; ++r) {
      const auto [a, b] = proportional_rows(work, o.batch, r, total);
      passes = std::max(passes, (b - a + std::max<int64_t>(1, work[r].batch) - 1) / std::max<int64_t>(1, work[r].batch));
    }
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t r0 = std::min(w1, w0 + p * chunk), r1 = std::min(w1, r0 + chunk);
      Tensor in = Tensor::empty({r1 - r0, seq}, DType::i32, device), tg = Tensor::empty({r1 - r0, seq}, DType::i32, device);
      for (int64_t r = r0; r < r1; ++r)
        val_loader.eval_window(r, in.data<int32_t>() + (r - r0) * seq, tg.data<int32_t>() + (r - r0) * seq);
      if (ranks == 1 && r1 == r0) continue;
      sum += engine->loss_sum(in, tg, std::max<int64_t>(1, work[rank].micro_batch));
    }
    return comm.all_reduce_sum(sum) / (double)(total * seq);
  };

  // This rank's rows of every batch and its input buffers; again after a re-plan.
  int64_t row0 = 0;
  Tensor inputs, targets;
  auto take_rows = [&] {
    row0 = 0;
    for (int r = 0; r < rank; ++r) row0 += work[r].batch;
    inputs = Tensor::empty({work[rank].batch, seq}, DType::i32, device);
    targets = Tensor::empty({work[rank].batch, seq}, DType::i32, device);
  };
  take_rows();
  // Every rank's value of x, on every rank.
  auto gather_ranks = [&](double x) {
    Tensor one = Tensor::full({1}, (float)x, DType::f32, device);
    Tensor all = Tensor::empty({ranks}, DType::f32, device);
    comm.all_gather_v(one, all, std::vector<int64_t>(ranks, 1));
    const std::vector<float> v = all.to_vector();
    return std::vector<double>(v.begin(), v.end());
  };
  auto ms_of = [](const std::vector<double>& seconds) {
    std::vector<double> ms;
    for (double x : seconds) ms.push_back(x * 1e3);
    return ms;
  };

  TrainResult result;
  std::vector<double> rates;
  std::vector<std::vector<double>> busy_history;  // per step since the plan started: per rank
  const int64_t tokens_per_step = o.batch * seq;
  const float scale = 1.0f / (float)tokens_per_step;
  const int last = o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps;
  Allocator& memory = allocator(device);
  memory.reset_peak();  // the profiler's measurements are not the training's
  for (int step = start + 1; step <= last; ++step) {
    const double t0 = detail::now_seconds();
    engine->wait_s = 0;
    fault_set_step(step);
    if (faults_enabled()) slow_down_if_injected(rank, device);
    loader.get(step - 1, row0, row0 + work[rank].batch, inputs.data<int32_t>(), targets.data<int32_t>());
    double local_loss =
        engine->forward_backward(inputs, targets, std::max<int64_t>(1, work[rank].micro_batch), scale);
    if (faults_enabled()) inject_faults(*engine, rank, &local_loss);
    const double loss = comm.all_reduce_sum(local_loss);
    std::string nonfinite;
    const double norm = std::sqrt(comm.all_reduce_sum(check_finite(*engine, comm, local_loss, step, config.L,
                                                                   device, &nonfinite)));
    if (!nonfinite.empty() && !o.skip_nonfinite)
      throw Error(nonfinite + "; the optimizer step was not applied. Lower --lr, resume from the last "
                  "checkpoint, or pass --skip-nonfinite to skip such steps");
    const float lr = schedule.at(step);
    if (nonfinite.empty()) {
      const float clip = clip_factor(norm, o.grad_clip);
      if (clip < 1) engine->scale_grads(clip);
      fault_point(rank, "optimizer");
      engine->optimizer_step(lr, step);
    } else {
      if (lead) std::printf("skipping %s (the optimizer step was not applied)\n", nonfinite.c_str());
    }
    const double local_s = detail::seconds_since(t0);
    const double step_s = comm.all_reduce_max(local_s);
    // Each rank's compute time: the step without its waits for collectives.
    const std::vector<double> busy_s = gather_ranks(local_s - engine->wait_s);
    const double ms = step_s * 1e3;
    const double rate = tokens_per_step / step_s;
    rates.push_back(rate);
    result.train_loss = loss;
    json line = {{"step", step}, {"loss", loss}, {"norm", norm}, {"lr", lr}, {"ms", ms}, {"tokens_per_s", rate}};
    if (!nonfinite.empty()) {  // JSON has no NaN: the numbers become null, with the reason
      line["loss"] = std::isfinite(loss) ? json(loss) : json(nullptr);
      line["norm"] = std::isfinite(norm) ? json(norm) : json(nullptr);
      line["skipped"] = nonfinite;
    }
    std::string busy_text;
    if (ranks > 1) {
      std::vector<double> fraction;
      busy_text = " | busy";
      for (double b : busy_s) {
        fraction.push_back(b / step_s);
        busy_text += str(" ", (int)std::lround(100 * b / step_s), "%");
      }
      line["busy"] = fraction;
      line["busy_ms"] = ms_of(busy_s);
      busy_history.push_back(busy_s);
    }
    if (step == start + 1) line["plan"] = plan_text();  // b/m/r per rank, as in the settings
    if (planner) {
      line["predicted_ms"] = planner->plan().predicted.step_s * 1e3;
      line["predicted_busy_ms"] = ms_of(planner->predicted_busy_s());
    }
    const bool eval_now = (o.eval_interval > 0 && step % o.eval_interval == 0) || step == last;
    double val = NAN;
    // The first --eval-windows windows during training (0: all); all of them at the end.
    const int64_t val_windows = step == last || o.eval_windows <= 0
                                    ? val_loader.num_eval_windows()
                                    : std::min<int64_t>(o.eval_windows, val_loader.num_eval_windows());
    if (eval_now) {
      val = evaluate(val_windows);
      line["val_loss"] = val;
      line["val_windows"] = val_windows;
      result.val_loss = val;
    }
    // Drift: a device slower (or faster) than planned re-plans; the new shares take effect
    // from the next step, the same on every rank (they all judge the same gathered times).
    std::string replan_text;
    if (planner && ranks > 1 && planner->observe(busy_s)) {
      const Replanner::Change& c = planner->last_change();
      line["replan"] = {{"factors", c.factors}, {"adopted", c.adopted},
                        {"predicted_ms_before", c.before_s * 1e3}, {"predicted_ms_after", c.after_s * 1e3}};
      replan_text = str("rank speeds drifted from the plan (measured/predicted, relative:",
                        c.describe_factors(), "): ");
      if (c.adopted) {
        work = planner->work();
        validate_work(work, o.batch, ranks);
        engine->reshard(layout_of(work));
        take_rows();
        busy_history.clear();
        memory.reset_peak();  // the final line compares the peak with the plan now running
        line["replan"]["plan"] = plan_text();
        replan_text += str("re-planned and re-sharded, predicted step ", c.before_s * 1e3, " -> ", c.after_s * 1e3,
                           " ms; plan b/m/r per rank now ", plan_text());
      } else {
        replan_text += str("kept the plan (a new one would not be 5% faster: ", c.before_s * 1e3, " vs ",
                           c.after_s * 1e3, " ms predicted)");
      }
    }
    log_line(line);
    if (lead && !o.quiet)
      std::printf("step %d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s tok/s%s%s\n", step, o.steps,
                  loss, norm, lr, ms, human_count(rate).c_str(), busy_text.c_str(),
                  eval_now ? str(" | val ", val, " (", val_windows, " windows)").c_str() : "");
    if (lead && !replan_text.empty()) {
      std::printf("step %d: %s\n", step, replan_text.c_str());
      if (planner->last_change().adopted) std::printf("%s", plan_table(planner->plan()).c_str());
    }
    if ((o.ckpt_interval > 0 && step % o.ckpt_interval == 0) || step == last)
      result.checkpoint = save(o, config, work, *engine, comm, step, run.tokenizer_hash);
    result.step = step;
    if (lead) std::fflush(stdout);
  }
  std::sort(rates.begin(), rates.end());
  result.tokens_per_s = rates.empty() ? 0 : rates[rates.size() / 2];
  result.unigram_loss = data::unigram_cross_entropy(split.train, split.val, run.vocab);
  json final_line = {{"final", true}, {"step", result.step}, {"val_loss", result.val_loss},
                     {"unigram_loss", result.unigram_loss}, {"tokens_per_s", result.tokens_per_s}};
  // Memory: every rank's allocator peak since the running plan started, next to its
  // prediction.
  const std::vector<double> peak = gather_ranks((double)memory.stats().peak);
  final_line["peak_bytes"] = peak;
  if (planner) final_line["predicted_bytes"] = planner->predicted_bytes();
  log_line(final_line);
  if (lead) {
    if (planner && !busy_history.empty())
      std::printf("%s", prediction_table(planner->plan(), busy_history, peak).c_str());
    std::printf("validation loss %.4f nats/token vs unigram baseline %.4f (%.2f below)\n", result.val_loss,
                result.unigram_loss, result.unigram_loss - result.val_loss);
    if (!result.checkpoint.empty()) std::printf("checkpoint: %s\n", result.checkpoint.c_str());
  }
  return result;
}

}  // namespace gpumix::dist
