#include "dist/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "autograd/functions.h"
#include "core/ops.h"
#include "dist/planner.h"
#include "dist/simulator.h"
#include "dist/fault.h"
#include "dist/shard_layout.h"
#include "nn/data/loader.h"
#include "nn/gpt.h"
#include "nn/optim.h"

namespace gpumix::dist {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
        prefetch_(prefetch) {
    const int rank = comm.rank();
    master_ = Tensor::empty({layout.rank_total(rank)}, DType::f32, device);
    grads_ = Tensor::zeros({layout.rank_total(rank)}, DType::f32, device);
    for (int u = 0; u < layout.num_units(); ++u) {
      const Slice& s = layout.slice(u, rank);
      Tensor mine = master_slice(u);
      GPT::init_slice(model_.layout(), seed, layout.unit_offset(u) + s.offset, mine);
      opts_.push_back(std::make_unique<AdamW>(model_.layout(), layout.unit_offset(u) + s.offset,
                                              s.count, device, adam));
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
    }
    // Embedding backward needs only the tokens and the incoming gradient.
    const int64_t VC = (int64_t)config_.V * config_.C;
    Tensor dwte = g0.flat_slice(0, VC).view({config_.V, config_.C});
    Tensor dwpe = g0.flat_slice(VC, (int64_t)config_.T * config_.C).view({config_.T, config_.C});
    for_micro_batches(rows, micro, [&](int64_t j, int64_t r0, int64_t r1) {
      ops::embedding_backward(dwte, dwpe, dx[j], inputs.slice(r0, r1));
    });
    reduce(0, g0);
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

 private:
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
    for (int l = 0; l < L; ++l) {
      bind(l + 1, fetch(l + 1, l + 2 <= L ? l + 2 : L + 1), Tensor());
      for (const Tensor& x : saved[l]) saved[l + 1].push_back(model_.block(l, Var(x)).value());
    }
    return saved;
  }

  void bind(int unit, const Tensor& params, const Tensor& grads) { model_.bind_unit(unit, params, grads); }

  // The full parameters of `unit`, gathered (or taken from the prefetch started earlier);
  // then starts gathering `next` (if >= 0) in the background. Every rank walks the units in
  // the same order, so their collectives match.
  Tensor fetch(int unit, int next) {
    Tensor full;
    const double t0 = now_s();
    if (pending_ && pending_unit_ == unit) {
      pending_->wait();
      full = pending_full_;
      pending_.reset();
    } else {
      GPUMIX_CHECK(!pending_, "internal: prefetched unit ", pending_unit_, " but unit ", unit, " is needed");
      full = Tensor::empty({layout_.unit_size(unit)}, DType::f32, device_);
      comm_.all_gather_v(master_slice(unit), full, layout_.counts(unit));
    }
    wait_s += now_s() - t0;
    if (prefetch_ && next >= 0) {
      pending_full_ = Tensor::empty({layout_.unit_size(next)}, DType::f32, device_);
      pending_ = comm_.all_gather_v_async(master_slice(next), pending_full_, layout_.counts(next));
      pending_unit_ = next;
    }
    return full;
  }

  void reduce(int unit, const Tensor& full_grad) {
    fault_point(comm_.rank(), "collective");
    const double t0 = now_s();
    Tensor mine = grad_slice(unit);
    comm_.reduce_scatter_v(full_grad, mine, layout_.counts(unit));
    wait_s += now_s() - t0;
  }

  GPTConfig config_;
  const ShardLayout& layout_;
  Comm& comm_;
  Device device_;
  GPT model_;  // unbound: each unit is bound to its gathered parameters as it runs
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
    meta.model = model_to_json(config);
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
    reader.check_model(model_to_json(config));
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

// GPUMIX_FAULT injections of non-finite values (dist/fault.h): tests of the guard below.
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
      GPUMIX_CHECK(resuming || !fs::exists(log_path), "run folder ", o.out, " already holds a run (",
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
  std::string plan_table;
  if (!engine_options.planner.empty()) {
    const Profile profile = profile_cluster(config, (int)seq, engine_options.device_label, device, comm,
                                            engine_options.profiler);
    const std::string name = engine_options.planner == "auto" ? "gpumix" : engine_options.planner;
    const Plan plan = run_planner(name, profile, o.batch);
    work.clear();
    for (const RankPlan& r : plan.ranks) work.push_back({r.batch, r.micro_batch, r.share});
    validate_work(work, o.batch, ranks);
    plan_table = dist::plan_table(plan);
    if (lead && !plan.fits())
      std::printf("warning: the %s plan does not fit its memory model: %s\n", name.c_str(),
                  plan.oom_message().c_str());
  }
  AdamWConfig adam;
  adam.weight_decay = o.weight_decay;
  std::vector<double> shares;
  for (const RankWork& w : work) shares.push_back(w.share);
  std::vector<int64_t> unit_sizes;
  for (int u = 0; u < config.num_units(); ++u) unit_sizes.push_back(config.unit_params(u));
  const ShardLayout layout(unit_sizes, shares);
  comm.agree("shard layout", {(int64_t)layout.fingerprint(), (int64_t)config.total_params()});
  std::unique_ptr<Engine> engine;
  if (ranks == 1)
    engine = std::make_unique<WholeModelEngine>(config, device, o.seed, adam, o.recompute);
  else
    engine = std::make_unique<ShardedEngine>(config, layout, comm, device, o.seed, adam,
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

  const RankWork& mine = work[rank];
  if (lead) {
    const double unigram_preview = 0;
    (void)unigram_preview;
    std::string plan_text;
    for (int r = 0; r < ranks; ++r)
      plan_text += str(r ? ", " : "", work[r].batch, "/", work[r].micro_batch, "/", work[r].share);
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
        {"plan b/m/r per rank", plan_text},
        {"recompute", ranks > 1 || o.recompute ? "on" : "off"},
        {"device (rank 0)", device.str() + " (" + format_bytes(device_props(device).capacity) + ")"},
        {"threads per rank", std::to_string(omp_get_max_threads())},
        {"seed", std::to_string(o.seed)},
        {"out", o.out},
    });
    if (!plan_table.empty()) std::printf("%s", plan_table.c_str());
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
  auto evaluate = [&](int64_t windows) {
    const int64_t total = windows > 0 ? std::min(windows, val_loader.num_eval_windows())
                                      : val_loader.num_eval_windows();
    const auto [w0, w1] = proportional_rows(work, o.batch, rank, total);
    double sum = 0;
    const int64_t chunk = std::max<int64_t>(1, std::max(mine.batch, (int64_t)1));
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
      sum += engine->loss_sum(in, tg, std::max<int64_t>(1, mine.micro_batch));
    }
    return comm.all_reduce_sum(sum) / (double)(total * seq);
  };

  int64_t row0 = 0;
  for (int r = 0; r < rank; ++r) row0 += work[r].batch;
  TrainResult result;
  std::vector<double> rates;
  const int64_t tokens_per_step = o.batch * seq;
  const float scale = 1.0f / (float)tokens_per_step;
  Tensor inputs = Tensor::empty({mine.batch, seq}, DType::i32, device);
  Tensor targets = Tensor::empty({mine.batch, seq}, DType::i32, device);
  const int last = o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps;
  for (int step = start + 1; step <= last; ++step) {
    const double t0 = now_s();
    engine->wait_s = 0;
    loader.get(step - 1, row0, row0 + mine.batch, inputs.data<int32_t>(), targets.data<int32_t>());
    fault_set_step(step);
    double local_loss = engine->forward_backward(inputs, targets, std::max<int64_t>(1, mine.micro_batch), scale);
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
    const double local_s = now_s() - t0;
    const double step_s = comm.all_reduce_max(local_s);
    // Busy share of each rank: its time not spent waiting for collectives.
    Tensor busy_one = Tensor::full({1}, (float)(1.0 - engine->wait_s / step_s), DType::f32, device);
    Tensor busy = Tensor::empty({ranks}, DType::f32, device);
    comm.all_gather_v(busy_one, busy, std::vector<int64_t>(ranks, 1));
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
      const std::vector<float> b = busy.to_vector();
      line["busy"] = b;
      busy_text = " | busy";
      for (float x : b) busy_text += str(" ", (int)std::lround(100 * x), "%");
    }
    const bool eval_now = (o.eval_interval > 0 && step % o.eval_interval == 0) || step == last;
    double val = NAN;
    if (eval_now) {
      val = evaluate(step == last ? 0 : o.eval_windows);
      line["val_loss"] = val;
      result.val_loss = val;
    }
    log_line(line);
    if (lead && !o.quiet)
      std::printf("step %d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s tok/s%s%s\n", step, o.steps,
                  loss, norm, lr, ms, human_count(rate).c_str(), busy_text.c_str(),
                  eval_now ? str(" | val ", val).c_str() : "");
    if ((o.ckpt_interval > 0 && step % o.ckpt_interval == 0) || step == last)
      result.checkpoint = save(o, config, work, *engine, comm, step, run.tokenizer_hash);
    result.step = step;
    if (lead) std::fflush(stdout);
  }
  std::sort(rates.begin(), rates.end());
  result.tokens_per_s = rates.empty() ? 0 : rates[rates.size() / 2];
  result.unigram_loss = data::unigram_cross_entropy(split.train, split.val, run.vocab);
  log_line({{"final", true}, {"step", result.step}, {"val_loss", result.val_loss},
            {"unigram_loss", result.unigram_loss}, {"tokens_per_s", result.tokens_per_s}});
  if (lead) {
    std::printf("validation loss %.4f nats/token vs unigram baseline %.4f (%.2f below)\n", result.val_loss,
                result.unigram_loss, result.unigram_loss - result.val_loss);
    if (!result.checkpoint.empty()) std::printf("checkpoint: %s\n", result.checkpoint.c_str());
  }
  return result;
}

}  // namespace gpumix::dist
