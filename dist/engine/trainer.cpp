// The step loop: one rank's training run, set up once (run folder, data, device, plan,
// engine, resume, settings, log) and then stepped. What a rank computes in a step is the
// engine's (dist/engine/engine.h); the loop around it (data, the non-finite guard, the
// optimizer's schedule, timing, validation, re-planning, checkpoints) is here and the same
// for every engine. It measures; what a run shows and logs is dist/engine/run_report.h's,
// its compute dtype dist/plan/compute_dtype.h's, and how it is launched launch.h's.
#include "dist/engine/trainer.h"

#include <omp.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "core/log.h"
#include "core/ops.h"
#include "core/precision.h"
#include "dist/engine/checkpoint.h"
#include "dist/engine/choices_eval.h"
#include "dist/engine/stop.h"
#include "dist/engine/engine.h"
#include "dist/engine/fault.h"
#include "dist/engine/local_mode.h"
#include "dist/engine/outer_step.h"
#include "dist/engine/replan.h"
#include "dist/engine/run_report.h"
#include "dist/engine/shard_layout.h"
#include "dist/engine/sharded_engine.h"
#include "dist/engine/trace.h"
#include "dist/engine/whole_model_engine.h"
#include "dist/plan/planner_local.h"
#include "dist/plan/simulator.h"
#include "nn/data/loader.h"
#include "nn/data/shards.h"
#include "nn/hf/gpt2.h"
#include "nn/optim.h"
#include "nn/run_data.h"
#include "nn/run_folder.h"
#include "nn/run_model.h"

namespace gpumix::dist {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// GPUMIX_FAULT injections of a non-finite gradient (dist/engine/fault.h): tests of the guard
// below. The value is written through a host copy: the gradient may be on a GPU.
void inject_grad_faults(Engine& engine, int rank, Device host) {
  int unit = -1;
  for (const char* point : {"nan_grad", "inf_grad"}) {
    if (!fault_inject(rank, point, &unit)) continue;
    const std::vector<Tensor> grads = engine.unit_grads();
    if (unit < 0)
      for (size_t u = 0; u < grads.size() && unit < 0; ++u)
        if (grads[u].numel() > 0) unit = (int)u;
    GPUMIX_CHECK(unit >= 0 && unit < (int)grads.size() && grads[unit].numel() > 0, "GPUMIX_FAULT: rank ",
                 rank, " owns no gradient of unit ", unit);
    Tensor element = grads[unit].flat_slice(grads[unit].numel() / 2, 1);
    element.copy_from(Tensor::full({1}, point[0] == 'n' ? NAN : INFINITY, DType::f32, host));
  }
}

// The sum over micro-batches of their loss tensors, in order, in double (on the CPU the
// same number as adding each one's item()).
double sum_in_order(const std::vector<Tensor>& losses) {
  double sum = 0;
  for (float x : ops::read_scalars(losses)) sum += x;
  return sum;
}

// What a step reads from the device, together: each micro-batch's loss and the sum of
// squares of each unit's reduced gradient slice (0 where the rank owns none). The squares
// come first and wait for the device once; the losses, computed before them, are then
// ready (their read waits for nothing). On the CPU the same numbers as per-tensor item()
// and sum_squares.
struct StepNumbers {
  double loss = 0;
  std::vector<double> unit_squares;
};

StepNumbers read_step_numbers(const std::vector<Tensor>& losses, const std::vector<Tensor>& unit_grads) {
  StepNumbers n;
  std::vector<Tensor> owned;
  for (const Tensor& g : unit_grads)
    if (g.numel() > 0) owned.push_back(g);
  const std::vector<double> squares = ops::sum_squares_many(owned);
  size_t next = 0;
  for (const Tensor& g : unit_grads) n.unit_squares.push_back(g.numel() > 0 ? squares[next++] : 0.0);
  n.loss = sum_in_order(losses);
  return n;
}

const char* unit_name(int unit, int L, std::string* buf) {
  *buf = unit == 0 ? "embedding" : unit <= L ? "block " + std::to_string(unit - 1) : "head";
  return buf->c_str();
}

// The non-finite guard. Each rank checks its own loss and the sum of squares of each
// unit's reduced gradient slice (the squares it needs for the norm anyway); one small
// all-gather over `comm` (host memory: `host` is the rank's CPU device, or the host of its
// GPU) then tells every rank of it what every rank found, so that all of them agree on the
// verdict and print the same message. `comm`: the ranks whose gradients are reduced
// together (the run, or in local mode this rank's group), `run_rank` their ranks in the run
// (the messages name those). Returns this rank's sum of squares.
double check_finite(const StepNumbers& n, double local_loss, Comm& comm, const std::vector<int>& run_rank, int step,
                    int L, Device host, std::string* error) {
  double sum = 0;
  int bad_unit = -1;
  for (size_t u = 0; u < n.unit_squares.size(); ++u) {
    const double s = n.unit_squares[u];
    if (!std::isfinite(s) && bad_unit < 0) bad_unit = (int)u;
    sum += s;
  }
  const int ranks = comm.size();
  Tensor mine = Tensor::empty({2}, DType::i32, host);
  mine.data<int32_t>()[0] = std::isfinite(local_loss) ? 0 : 1;
  mine.data<int32_t>()[1] = bad_unit;
  Tensor all = Tensor::empty({2 * (int64_t)ranks}, DType::i32, host);
  comm.all_gather_v(mine, all, std::vector<int64_t>(ranks, 2));
  const int32_t* found = all.data<int32_t>();
  std::string loss_ranks, grad_text, name;
  for (int r = 0; r < ranks; ++r) {
    if (found[2 * r]) loss_ranks += str(loss_ranks.empty() ? "" : ", ", run_rank[r]);
    if (found[2 * r + 1] >= 0)
      grad_text += str(grad_text.empty() ? "" : "; ", "unit ", found[2 * r + 1], " (",
                       unit_name(found[2 * r + 1], L, &name), ") on rank ", run_rank[r]);
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

// One rank's training run. Every rank builds the same one and calls the same collectives
// in the same order; rank 0 ("lead") prints and writes the log.
class Training {
 public:
  Training(const TrainOptions& o, Comm& comm, const EngineOptions& engine_options);

  void prepare_run_folder();
  void load_data();
  void choose_device();
  void choose_dtype();
  void choose_plan(const Work& given_work);
  void plan_groups(Profile profile, const std::string& name);
  void form_groups();
  void make_engine();
  void init_from();
  void resume();
  void check_collectives();
  void measure_peak();
  void print_settings() const;
  void open_log();
  void start_trace();
  void run_steps();
  TrainResult finish();

 private:
  int run_step(int step);
  int meet(StepOutcome& s, std::vector<double>* period_losses, std::vector<std::vector<double>>* period_busy_s);
  void load_batch(int step);
  StepOutcome forward_backward(int step);
  void update(int step, StepOutcome& s);
  StepTime time_step(double t0);
  void write_trace();
  std::optional<Validation> evaluate_if_due(int step);
  void load_choices();
  std::optional<ChoicesScore> score_choices_if_due(int step);
  void replan_if_drifted(int step, const std::vector<double>& busy_s, StepLine& line);
  void adopt(Work work);
  void save_if_due(int step);
  void save_checkpoint_now(int step);
  void outer_step_now(int step);

  double evaluate(int64_t total);
  void take_rows();
  ShardLayout agreed_layout() const;
  json collectives_vs_plan();
  std::vector<double> gather_ranks(double x) const { return gather_over(comm_, x); }
  std::vector<double> gather_over(Comm& comm, double x) const;
  std::string plan_text() const { return work_text(work_); }
  int64_t micro_batch() const { return std::max<int64_t>(1, work_.ranks[rank_].micro_batch); }
  Allocator& memory() const { return allocator(device_); }
  // Before local mode's groups are formed (the profiler): the whole run's.
  Comm& engine_comm() { return grouped() ? local_->engine_comm() : device_comm_ ? *device_comm_ : comm_; }
  // The ranks whose gradients are reduced together, over which each step's own collectives
  // run: this rank's group in local mode.
  Comm& step_comm() const { return grouped() ? local_->group_comm() : comm_; }
  bool grouped() const { return local_ && local_->formed(); }
  // Their ranks in the run.
  std::vector<int> step_ranks() const {
    if (local_) return local_->members();
    std::vector<int> all(ranks_);
    for (int r = 0; r < ranks_; ++r) all[r] = r;
    return all;
  }
  // Whether every rank meets after `step` (loss, times, stop request): every step, but
  // between local mode's outer steps (local_mode.h).
  bool meets(int step) const { return !local_ || local_->meets(step, o_.steps); }
  OuterStep* outer() const { return local_ ? local_->outer() : nullptr; }
  // The links the collectives' form is chosen by: the profile's where the run planned (as
  // the cost model prices them), a plan file's, else TopologyLinks' defaults.
  CollectiveLinks topology_links() const {
    if (planner_) {
      const CostModel cost(planner_->profile());
      return {cost.links(true), cost.links(false)};
    }
    const Plan* file = engine_options_.file_plan.get();
    if (file && file->comm) return {dist::topology_links(file->comm->all_gather), dist::topology_links(file->comm->reduce_scatter)};
    return {};
  }
  // The plan whose predictions the run is measured against: the planner's (re-planned as it
  // goes), or a plan file's that has them (made from its maker's profile); null: none.
  const Plan* predicting_plan() const {
    if (planner_) return &planner_->plan();
    const Plan* file = engine_options_.file_plan.get();
    return file && file->predicted.step_s > 0 ? file : nullptr;
  }
  Tensor on_device(const Tensor& host) const { return device_.is_cpu() ? host : host.to(device_); }
  void choose_device_comm();

  const TrainOptions& o_;
  Comm& comm_;
  const EngineOptions& engine_options_;
  const int rank_, ranks_;
  const bool lead_;
  const bool resuming_;
  const fs::path log_path_;
  const int64_t seq_;
  const int64_t tokens_per_step_;
  float scale_;  // of each token's loss: the mean over the batch of this rank's group (all ranks but in local mode)
  const int last_;     // the last step this call runs (--stop-at)
  LRSchedule schedule_;

  RunData run_;
  nlohmann::json data_identity_;  // the token files read (null for text), checked on resume
  GPTConfig config_;
  data::Split split_;
  std::optional<data::BatchLoader> loader_, val_loader_;
  Device device_;
  // Host memory this rank reads and writes through: its device when that is a CPU (whose
  // allocator counts it, as it counts everything of the rank), else the host of its GPU.
  Device host_;
  // Under mpirun on a CUDA device: the NCCL communicator the engine's collectives run on
  // (comm_ keeps the host-side ones); null otherwise (the engine uses comm_).
  std::unique_ptr<Comm> device_comm_;
  ComputeDtype dtype_;
  Work work_;
  std::unique_ptr<Replanner> planner_;  // null: `work` as given
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LocalMode> local_;  // --sync local:H (dist/engine/local_mode.h); null: every-step
  int start_ = 0;  // the step the run starts after (the checkpoint's when resuming)
  int saved_step_ = -1;  // the step of the checkpoint written last by this call
  RunReport report_;
  Tracer tracer_;  // off unless --trace

  int64_t row0_ = 0;        // this rank's first row of every batch
  Tensor inputs_, targets_;  // (b, T) i32: this rank's rows, on its device
  Tensor inputs_host_, targets_host_;  // (b, T) i32 on host_: the loader's; the same tensors on a CPU
  TrainResult result_;
  std::vector<double> rates_;
  std::vector<std::vector<double>> busy_history_;  // per step since the plan started: per rank
  std::vector<double> step_history_s_;             // per step since the plan started
  json collectives_;  // collectives_vs_plan() of the running plan (null: not measured yet)
  std::vector<ChoiceExample> choices_;  // --eval-choices: the examples each pass scores
  EtaClock eta_;
};

Training::Training(const TrainOptions& o, Comm& comm, const EngineOptions& engine_options)
    : o_(o),
      comm_(comm),
      engine_options_(engine_options),
      rank_(comm.rank()),
      ranks_(comm.size()),
      lead_(rank_ == 0),
      resuming_(!o.resume.empty()),
      log_path_(fs::path(o.out) / "log.jsonl"),
      seq_(resolve_seq(o)),  // an unknown --model fails here, before anything is written
      tokens_per_step_(o.batch * seq_),
      scale_(1.0f / (float)tokens_per_step_),
      last_(o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps),
      report_(o, lead_) {
  schedule_.max_lr = o.lr;
  schedule_.min_lr = o.lr * o.min_lr_ratio;
  schedule_.warmup = o.warmup >= 0 ? o.warmup : std::min(100, o.steps / 10);
  schedule_.total = o.steps;
  if (engine_options.sync.local) local_ = std::make_unique<LocalMode>(engine_options.sync);
}

// ---- setup ----------------------------------------------------------------------------------

void Training::prepare_run_folder() {
  std::string error;
  if (lead_) {
    try {
      // Whether it may hold this run is the launcher's check (launch.h: claim_run_folder).
      fs::create_directories(o_.out);
    } catch (const std::exception& e) {
      error = local_error_of(e, true);
    }
  }
  comm_.agree("run folder", {}, error);
}

// Rank 0 prepares the tokenizer first; the others then load it.
void Training::load_data() {
  std::string error;
  if (lead_) {
    try {
      run_ = prepare_data(o_, true);
    } catch (const std::exception& e) {
      error = local_error_of(e, true);
    }
  }
  comm_.agree("data", {}, error);
  if (lead_ && !run_.warning.empty()) log_warn("warning: ", run_.warning);
  if (!lead_) run_ = prepare_data(o_, false);
  data_identity_ = data_identity(run_.shards ? run_.shards->paths() : std::vector<std::string>(),
                                 run_.val_shards ? run_.val_shards->paths() : std::vector<std::string>());
  config_ = resolve_model(o_, run_.vocab, seq_);
  split_ = run_.val_tokens.empty() ? data::split_train_val(run_.tokens, seq_, o_.val_fraction)
                                   : data::given_split(run_.tokens, run_.val_tokens, seq_);
  loader_.emplace(split_.train, seq_, o_.batch, o_.seed);
  val_loader_.emplace(split_.val, seq_, o_.batch, o_.seed);
  result_.unigram_loss = data::unigram_cross_entropy(split_.train, split_.val, run_.vocab);
  load_choices();
}

// --eval-choices: its examples, every token id checked against the run's vocabulary and
// every completion against the sequence length (choice_rows refuses one longer), now rather
// than at the first pass.
void Training::load_choices() {
  if (o_.eval_choices.empty()) return;
  std::string error;
  try {
    choices_ = read_choices(o_.eval_choices, run_.vocab);
    if (o_.eval_choices_examples > 0 && (int64_t)choices_.size() > o_.eval_choices_examples)
      choices_.resize(o_.eval_choices_examples);
    for (const ChoiceExample& e : choices_) choice_rows(e, seq_, false);
  } catch (const std::exception& e) {
    error = local_error_of(e, true);
  }
  comm_.agree("eval choices", {}, error);
}

void Training::choose_device() {
  device_ = engine_options_.device_set ? engine_options_.device
                                       : Device::cpu(ranks_ > 1 && comm_.backend() == "local" ? rank_ : 0);
  host_ = device_.is_cpu() ? device_ : Device::cpu();
  if (o_.device_memory > 0) {
    DeviceProps props = device_props(device_);
    props.capacity = o_.device_memory;
    configure_device(device_, props);
  }
  choose_device_comm();
}

// Under mpirun, when every rank is on a CUDA device, parameters and gradients move with
// NCCL (one GPU per process, the rank's own: DeviceProps::ordinal; make_nccl_comm refuses
// two ranks on one GPU, naming them). Every rank decides alike. A job mixing CPU and CUDA
// ranks, or a build without NCCL, stages device buffers through host memory over MPI.
void Training::choose_device_comm() {
  if (comm_.backend() != "mpi") return;
  const double cuda_ranks = comm_.all_reduce_sum(device_.is_cuda() ? 1.0 : 0.0);
  if (cuda_ranks == 0) return;
  if (cuda_ranks < ranks_ || !nccl_built()) {
    if (lead_)
      log_info("note: ",
               cuda_ranks < ranks_ ? str((int)cuda_ranks, " of ", ranks_, " ranks run on CUDA devices")
                                   : std::string("this build has no NCCL"),
               ": collectives on CUDA devices go through host memory over MPI");
    return;
  }
  NcclOptions options;
  options.device = device_props(device_).ordinal;
  device_comm_ = make_nccl_comm(options);
}

// --dtype, the plan file's, the checkpoint's or the devices' (choose_compute_dtype).
void Training::choose_dtype() {
  std::string error;
  ComputeDtypeSources sources;
  sources.flag = o_.dtype;
  sources.plan_file = engine_options_.plan_file;
  if (engine_options_.file_plan) sources.plan_dtype = engine_options_.file_plan->dtype;
  for (double f : gather_ranks((double)native_bf16(device_))) sources.native.push_back(native_bf16_name((NativeBf16)f));
  try {
    if (resuming_) sources.checkpoint = checkpoint_dtype(open_checkpoint(o_.resume));
    dtype_ = choose_compute_dtype(sources);
  } catch (const std::exception& e) {
    error = local_error_of(e);
  }
  comm_.agree("compute dtype", {(int64_t)dtype_.dtype}, error);
  if (lead_ && !dtype_.note.empty()) log_info("note: ", dtype_.note);
}

// The work as given, or the planner's on a profile of the ranks (in local mode, per group).
void Training::choose_plan(const Work& given_work) {
  work_ = given_work;
  if (engine_options_.planner.empty()) return;
  Profile profile = profile_cluster(config_, (int)seq_, dtype_.dtype, engine_options_.device_label, device_,
                                    engine_comm(), engine_options_.profiler);
  const std::string name = engine_options_.planner == "auto" ? "gpumix" : engine_options_.planner;
  if (engine_options_.sync.local)
    plan_groups(std::move(profile), name);
  else
    planner_ = std::make_unique<Replanner>(std::move(profile), name, o_.batch, engine_options_.drift,
                                           engine_options_.sharding);
  work_ = planner_->plan().work();
  validate_work(work_, o_.batch, ranks_);
  if (lead_) {  // what the run planned from, for `gpumix plan --profile` and a look later
    write_profile(planner_->profile(), (fs::path(o_.out) / "profile.json").string());
    write_plan(planner_->plan(), (fs::path(o_.out) / "plan.json").string());
  }
  if (lead_ && !planner_->plan().fits())
    log_warn("warning: the ", planner_->name(), " plan does not fit its memory model: ",
             planner_->plan().oom_message());
}

// --sync local:H with a planner: each group planned as a cluster of its own, the rows split
// between the groups by their speed so that they reach the outer step together
// (dist/plan/planner_local.h), the groups' plans run as one (local_combined_plan). Kept for
// the whole run: re-planning on drift would move rows between the groups and re-shard each
// of them, which only an outer step could do; not done yet, and said so.
void Training::plan_groups(Profile profile, const std::string& name) {
  const LocalSync& sync = engine_options_.sync;
  PlannerOptions options;  // plan_local keeps every rank of a group, as the engine does
  options.group_size = engine_options_.sharding;
  local_->set_plan(std::make_unique<LocalPlan>(plan_local(profile, o_.batch, sync, name, options)));
  GPUMIX_CHECK_INPUT(local_->plan()->planned(), "--sync local:", sync.every, ": ", local_->plan()->error);
  Plan combined = local_combined_plan(*local_->plan(), profile);
  planner_ = std::make_unique<Replanner>(std::move(profile), name, std::move(combined));
  if (lead_ && engine_options_.drift.threshold > 0)
    log_info("note: --sync local:", sync.every, ": the plan is kept for the whole run (no re-planning on drift: it "
             "would move rows between the groups and re-shard each one)");
}

// One rank: the whole model; several: the uneven sharded engine.
void Training::make_engine() {
  AdamWConfig adam;
  adam.weight_decay = o_.weight_decay;
  if (step_comm().size() == 1)
    engine_ = std::make_unique<WholeModelEngine>(config_, device_, dtype_.dtype, o_.seed, adam, o_.recompute);
  else
    engine_ = std::make_unique<ShardedEngine>(config_, agreed_layout(), engine_comm(), device_, dtype_.dtype,
                                              o_.seed, adam, engine_options_.prefetch, work_.sharding.group_size,
                                              topology_links());
  engine_->tracer = &tracer_;
  engine_->set_offload(work_.ranks[rank_].offload);
  if (local_) local_->make_outer(comm_, config_.total_params(), *engine_, host_);
}

// --sync local:H: the ranks' groups, each with its communicator and its rows' share of the
// batch; the engine then trains each group as an every-step run of its own.
void Training::form_groups() {
  if (!local_) return;
  local_->form_groups(o_, work_, comm_, device_comm_.get());
  scale_ = 1.0f / (float)(local_->rows() * seq_);
}

// --init-from: every rank reads its own slices of the folder's weights (a resume reads the
// checkpoint's instead).
void Training::init_from() {
  if (o_.init_from.empty() || resuming_) return;
  std::string error;
  try {
    const hf::Weights weights(o_.init_from, config_);
    for (const OwnedSlice& s : engine_->slices())
      fill_through_host(s.master, [&](float* host, int64_t n) { weights.read(s.flat_offset, n, host); });
  } catch (const std::exception& e) {
    error = local_error_of(e);
  }
  comm_.agree("init-from", {}, error);
  engine_->sync_compute_params();  // the compute copy of the imported master weights
  if (local_) local_->masters_set(*engine_);  // the first outer step measures the change from these
  if (lead_) log_info("initialised from ", o_.init_from);
}

void Training::resume() {
  if (!resuming_) return;
  // Local mode: the outer step's period starts at the checkpoint's step, or before it for a
  // mid-period one (load_checkpoint sets it).
  start_ = load_checkpoint(o_.resume, config_, *engine_, comm_, run_.tokenizer_hash, &data_identity_, outer());
  GPUMIX_CHECK_INPUT(start_ < o_.steps, "the checkpoint is at step ", start_, ", not before --steps ", o_.steps,
                     "; pass a larger --steps to train further");
}

void Training::print_settings() const {
  RunSettings settings;
  settings.data = &run_;
  settings.train_tokens = (int64_t)split_.train.size();
  settings.val_tokens = (int64_t)split_.val.size();
  settings.epoch_windows = loader_->windows_per_epoch();
  settings.model = config_;
  settings.dtype = dtype_.why;
  settings.seq = seq_;
  settings.start = start_;
  settings.schedule = schedule_;
  settings.rank = rank_;
  settings.ranks = ranks_;
  settings.backend = comm_.backend();
  settings.work = work_;
  settings.profiled = planner_ ? &engine_options_.profiler : nullptr;
  settings.local = local_ ? local_->plan() : nullptr;
  settings.choices = (int64_t)choices_.size();
  settings.device = device_;
  settings.threads = omp_get_max_threads();
  report_.settings(settings, predicting_plan(), collectives_);
}

// Before the first step, the planned collectives against the same ones timed on the layout
// that will run (so that a run stopped early, or a node lost, has shown them too); none in
// local mode's groups of one rank (the whole model, no collectives).
void Training::check_collectives() {
  if (predicting_plan() && step_comm().size() > 1) collectives_ = collectives_vs_plan();
}

// What MFU is measured with: the model's FLOPs per step against the ranks' peak (a GEMM
// timed now where the run has no profile; run_report.h says which peak).
void Training::measure_peak() {
  const PeakFlops peak = run_peak_flops(device_, dtype_.dtype, planner_ ? &planner_->profile() : nullptr, comm_, 3);
  report_.set_mfu_basis(model_flops_per_step(config_, seq_, o_.batch), peak);
}

void Training::open_log() { report_.open_log(log_path_.string()); }

// --trace: the steps of --trace-steps that this call trains.
void Training::start_trace() {
  const EngineOptions& e = engine_options_;
  if (e.trace.empty()) return;
  const int first = std::max(e.trace_first, start_ + 1), last = std::min(e.trace_last, last_);
  GPUMIX_CHECK_INPUT(first <= last, "--trace-steps ", e.trace_first, ":", e.trace_last,
                     " holds none of the steps this run trains (", start_ + 1, " to ", last_, ")");
  const fs::path folder = fs::path(e.trace).parent_path();
  GPUMIX_CHECK_INPUT(folder.empty() || fs::is_directory(folder), "--trace ", e.trace, ": the folder ",
                     folder.string(), " does not exist");
  tracer_ = Tracer(e.trace, first, last, rank_, str("rank ", rank_, " (", device_.str(), ")"), config_.L);
}

// ---- the steps ------------------------------------------------------------------------------

void Training::run_steps() {
  take_rows();
  memory().reset_peak();  // the profiler's measurements are not the training's
  for (int step = start_ + 1; step <= last_; ++step)
    if (const int signo = run_step(step)) {
      result_.stop_signal = signo;
      if (lead_)
        log_info("step ", step, ": ", signal_name(signo), ": stopped after this step, checkpoint ", result_.checkpoint,
                 "; continue with --resume ", o_.out);
      break;
    }
}

// One step: this rank's rows, the gradients of the global batch (forward_backward, with the
// step's collectives), the optimizer's update; then what the step measured is shown, and
// validation, re-planning and checkpoints when due. In local mode (--sync local:H) the
// groups' outer step follows update() every H steps and at the last (outer_step.h), and the
// step's collectives stay in the group but there (local_mode.h). Returns the signal of a
// stop request the ranks agreed on at this step (SIGTERM / SIGINT, dist/engine/stop.h;
// 0: none): the run stops after it, with a checkpoint of it.
int Training::run_step(int step) {
  const int64_t cross_before = local_ ? local_->cross_group_calls(comm_) : 0;
  tracer_.begin_step(step);
  const double t0 = detail::now_seconds();
  {
    TraceSpan span(&tracer_, "load batch", "phase");
    load_batch(step);
  }
  StepOutcome s = forward_backward(step);
  update(step, s);
  if (local_ && local_->outer_due(step, o_.steps)) outer_step_now(step);
  StepTime t = time_step(t0);
  t.eta_s = eta_.seconds_left(step - start_, last_ - step, t.step_s, detail::now_seconds());
  const double group_loss = s.loss;
  if (outer()) local_->add_step(t.busy_s[step_comm().rank()], s.loss);
  std::vector<double> period_losses;
  std::vector<std::vector<double>> period_busy_s;
  const int signo = meets(step) ? meet(s, &period_losses, &period_busy_s) : 0;
  result_.train_loss = s.loss;
  std::optional<RunStart> first;  // the first step's line says what the whole run shares
  if (step == start_ + 1) first = RunStart{work_, dtype_.dtype, result_.unigram_loss};
  StepLine line = report_.step(step, s, t, first ? &*first : nullptr, predicting_plan());
  if (outer()) {  // the line's norm, ms and busy are this rank's group's; its loss too between outer steps
    line.record["group"] = local_->group();
    if (meets(step)) {  // per step since the last outer step, this one last: the batch's loss, every rank's busy time
      line.record["group_loss"] = group_loss;
      line.record["period_losses"] = period_losses;
      json busy = json::array();
      for (const std::vector<double>& b : period_busy_s) {
        std::vector<double> ms;
        for (double x : b) ms.push_back(1e3 * x);
        busy.push_back(ms);
      }
      line.record["period_busy_ms"] = busy;
    }
  }
  if (const std::optional<Validation> v = evaluate_if_due(step)) report_.add_validation(line, *v);
  if (const std::optional<ChoicesScore> c = score_choices_if_due(step)) report_.add_choices(line, *c);
  replan_if_drifted(step, t.busy_s, line);
  // What this step ran across groups (its exchange, its meeting, validation); a checkpoint
  // comes after: the step's line is in log.jsonl before its checkpoint starts, so a fault
  // or a kill while saving leaves it there (the fault tests check that).
  if (local_) line.record["cross_group_collectives"] = local_->cross_group_calls(comm_) - cross_before;
  report_.write(line);
  save_if_due(step);
  if (signo && saved_step_ != step) save_checkpoint_now(step);
  result_.step = step;
  if (tracer_.complete(step)) write_trace();
  return signo;
}

// Where every rank meets (every step; local mode's outer steps): the stop request, and in
// local mode with several groups the batch's loss (each group's mean weighted by its
// tokens: s.loss becomes it) and every rank's busy times of each step since the last outer
// step (`period_losses`: the batch's loss of each; `period_busy_s`: per step, per rank).
// Returns the stop request's signal.
int Training::meet(StepOutcome& s, std::vector<double>* period_losses, std::vector<std::vector<double>>* period_busy_s) {
  if (outer()) {
    TraceSpan span(&tracer_, "meet across groups", "collective");
    LocalMode::Period p = local_->gather_period(comm_, host_);
    busy_history_.insert(busy_history_.end(), p.busy_s.begin(), p.busy_s.end());
    *period_busy_s = std::move(p.busy_s);
    s.loss = p.loss.back();
    *period_losses = std::move(p.loss);
  }
  return ranks_ > 1 ? (int)comm_.all_reduce_max((double)stop_requested()) : stop_requested();
}

void Training::outer_step_now(int step) {
  TraceSpan span(&tracer_, "outer step", "phase");
  engine_->wait_s += local_->outer_step(step, *engine_);  // mostly the exchange: a wait, not busy time
}

void Training::write_trace() {
  const json other = {{"steps", str(tracer_.first(), ":", tracer_.last())},
                      {"model", config_.name}, {"ranks", ranks_}, {"plan b/m/r per rank", plan_text()},
                      {"log", log_path_.string()}};
  tracer_.write(comm_, device_, other.dump());
  if (lead_)
    log_info("trace of steps ", tracer_.first(), "-", tracer_.last(), ": ", engine_options_.trace,
             " (open it in ui.perfetto.dev or chrome://tracing)");
}

void Training::load_batch(int step) {
  engine_->wait_s = 0;
  fault_set_step(step);
  if (faults_enabled()) slow_down_if_injected(rank_, device_);
  loader_->get(step - 1, row0_, row0_ + work_.ranks[rank_].batch, inputs_host_.data<int32_t>(),
               targets_host_.data<int32_t>());
  if (!device_.is_cpu()) {  // one copy of the step's tokens to the device
    inputs_.copy_from(inputs_host_);
    targets_.copy_from(targets_host_);
  }
}

// The engine's forward and backward, then the step's own collectives: the global loss, the
// non-finite guard and the gradient norm.
StepOutcome Training::forward_backward(int step) {
  StepOutcome s;
  StepNumbers numbers;
  double local_loss = 0;
  {
    TraceSpan span(&tracer_, "forward-backward", "phase");
    const std::vector<Tensor> losses = engine_->forward_backward(inputs_, targets_, micro_batch(), scale_);
    if (faults_enabled()) inject_grad_faults(*engine_, rank_, host_);
    numbers = read_step_numbers(losses, engine_->unit_grads());
    local_loss = numbers.loss;
    if (faults_enabled() && fault_inject(rank_, "nan_loss")) local_loss = NAN;
  }
  // The step's own collectives are waits too (the busy time is the step without them).
  const double t0 = detail::now_seconds();
  {
    TraceSpan span(&tracer_, "loss all-reduce", "collective");
    // Local mode: the group's own tokens' mean (meet() weighs the groups' at an outer step).
    s.loss = step_comm().all_reduce_sum(local_loss);
  }
  {
    TraceSpan span(&tracer_, "finite check and norm", "collective");
    // Replicas hold the same reduced slices: the norm counts the first group's only.
    const double squares =
        check_finite(numbers, local_loss, step_comm(), step_ranks(), step, config_.L, host_, &s.nonfinite);
    // Local mode: each group clips by its own gradient's norm.
    s.norm = std::sqrt(step_comm().all_reduce_sum(engine_->primary_replica() ? squares : 0.0));
  }
  engine_->wait_s += detail::seconds_since(t0);
  return s;
}

// Unless the step found a non-finite value: clipping and the optimizer step on this rank's
// slice; s.lr gets the step's learning rate.
void Training::update(int step, StepOutcome& s) {
  if (!s.nonfinite.empty() && !o_.skip_nonfinite)
    throw Error(s.nonfinite + "; the optimizer step was not applied. Lower --lr, resume from the last "
                "checkpoint, or pass --skip-nonfinite to skip such steps");
  s.lr = schedule_.at(step);
  TraceSpan span(&tracer_, "optimizer", "phase");
  if (s.nonfinite.empty()) {
    const float clip = clip_factor(s.norm, o_.grad_clip);
    if (clip < 1) engine_->scale_grads(clip);
    fault_point(rank_, "optimizer");
    engine_->optimizer_step(s.lr, step);
  } else {
    if (lead_) log_warn("skipping ", s.nonfinite, " (the optimizer step was not applied)");
  }
}

StepTime Training::time_step(double t0) {
  StepTime t;
  const double local_s = detail::seconds_since(t0);
  tracer_.add("step", "step", t0, t0 + local_s);  // what the log's ms measures on this rank
  TraceSpan span(&tracer_, "share step times", "collective");
  // Local mode: the group's slowest rank and its ranks' busy times (every rank's are gathered
  // at the outer step, meet()).
  t.step_s = step_comm().all_reduce_max(local_s);
  t.busy_s = gather_over(step_comm(), local_s - engine_->wait_s);
  t.ms = t.step_s * 1e3;
  t.tokens_per_s = tokens_per_step_ / t.step_s;
  rates_.push_back(t.tokens_per_s);
  if (!outer() && ranks_ > 1)
    busy_history_.push_back(t.busy_s);
  step_history_s_.push_back(t.step_s);
  return t;
}

// Every --eval-interval steps and at the last: the validation loss (none when not due).
std::optional<Validation> Training::evaluate_if_due(int step) {
  const bool eval_now = (o_.eval_interval > 0 && step % o_.eval_interval == 0) || step == last_;
  if (!eval_now) return std::nullopt;
  // A --stop-at between local mode's outer steps: the groups hold different weights, and
  // validation (split over every rank) would mix them. The resumed run validates.
  if (local_ && local_->mid_period(step)) {
    if (lead_) log_info("step ", step, ": no validation between outer steps (the groups' weights differ)");
    return std::nullopt;
  }
  // The same first --eval-windows windows at every step (0: all), so that the points of a
  // run compare; at the last step, when they are fewer than all, the full validation too,
  // logged as its own estimate (val_full_loss) for the run's result.
  Validation v;
  v.total = val_loader_->num_eval_windows();
  v.windows = o_.eval_windows <= 0 ? v.total : std::min<int64_t>(o_.eval_windows, v.total);
  TraceSpan span(&tracer_, "evaluate", "phase");
  v.loss = evaluate(v.windows);
  result_.val_loss = v.loss;
  result_.val_windows = v.windows;
  if (step == last_ && v.windows < v.total) {
    v.full_loss = evaluate(v.total);
    result_.val_loss = *v.full_loss;
    result_.val_windows = v.total;
  }
  return v;
}

// --eval-choices every --eval-choices-interval steps (by default at each validation) and at
// the last: the accuracy of its examples (none when not due).
std::optional<ChoicesScore> Training::score_choices_if_due(int step) {
  if (choices_.empty()) return std::nullopt;
  const int every = o_.eval_choices_interval >= 0 ? o_.eval_choices_interval : o_.eval_interval;
  if (!((every > 0 && step % every == 0) || step == last_)) return std::nullopt;
  TraceSpan span(&tracer_, "multiple choice", "phase");
  const ExampleRange range = [&](int rank, int64_t total) {
    return proportional_rows(work_.ranks, o_.batch, rank, total);
  };
  return score_choices(*engine_, comm_, choices_, seq_, range, host_, device_);
}

// Drift: a device slower (or faster) than planned re-plans; the new shares take effect
// from the next step, the same on every rank (they all judge the same gathered times).
// The step's line gets the change (none when no drift was confirmed).
void Training::replan_if_drifted(int step, const std::vector<double>& busy_s, StepLine& line) {
  // Local mode keeps its plan (plan_groups); its busy times are the group's.
  if (!planner_ || ranks_ == 1 || local_ || !planner_->observe(busy_s)) return;
  const Replanner::Change& c = planner_->last_change();
  if (c.adopted) adopt(planner_->plan().work());
  report_.add_replan(line, step, c.record(plan_text()), c.message(plan_text()),
                     c.adopted ? &planner_->plan() : nullptr);
}

// A new plan: re-shard the engine's state to its shares and take its rows from the next step.
void Training::adopt(Work work) {
  work_ = std::move(work);
  validate_work(work_, o_.batch, ranks_);
  TraceSpan span(&tracer_, "re-shard", "phase");
  engine_->reshard(agreed_layout());
  engine_->set_offload(work_.ranks[rank_].offload);
  take_rows();
  busy_history_.clear();
  step_history_s_.clear();
  collectives_ = json();
  memory().reset_peak();  // the final line compares the peak with the plan now running
}

// Local mode's --ckpt-interval is a multiple of H and its last step runs an outer step
// (check_local_sync), so each of its checkpoints follows one.
void Training::save_if_due(int step) {
  if ((o_.ckpt_interval > 0 && step % o_.ckpt_interval == 0) || step == last_) save_checkpoint_now(step);
}

void Training::save_checkpoint_now(int step) {
  TraceSpan span(&tracer_, "checkpoint", "phase");
  result_.checkpoint = save_checkpoint(o_, config_, dtype_.dtype, work_, *engine_, comm_, step, run_.tokenizer_hash,
                                       data_identity_, outer());
  saved_step_ = step;
}

TrainResult Training::finish() {
  if (outer() && lead_)
    log_info("--sync local:", engine_options_.sync.every, ": ", outer()->steps(), " outer steps; rank 0 sent ",
             outer()->cross_group_bytes(), " bytes to the other groups (bf16; ",
             outer()->sliced() ? "sliced exchange: its own slices with its peers" : "flat exchange: as its group's leader",
             ", dist/engine/outer_step.h)");
  std::sort(rates_.begin(), rates_.end());
  result_.tokens_per_s = rates_.empty() ? 0 : rates_[rates_.size() / 2];
  RunSummary summary;
  summary.last = last_;
  summary.peak_bytes = gather_ranks((double)memory().stats().peak);
  summary.plan = predicting_plan();
  summary.busy_history = busy_history_;
  // The first 2 steps, which warm up, left out when there are more than 3.
  summary.step_s = median_after_warm_up(step_history_s_);
  // Measured again only when a re-plan changed the layout since the start.
  if (collectives_.is_null() && summary.plan && step_comm().size() > 1) collectives_ = collectives_vs_plan();
  summary.collectives = collectives_;
  if (outer()) summary.local = local_->summary(work_);
  summary.result = result_;
  report_.finish(summary);
  return result_;
}

// ---- helpers --------------------------------------------------------------------------------

// Validation: the eval windows split over the ranks like the batch.
double Training::evaluate(int64_t total) {
  const auto [w0, w1] = proportional_rows(work_.ranks, o_.batch, rank_, total);
  double sum = 0;
  const int64_t chunk = std::max<int64_t>(1, work_.ranks[rank_].batch);
  // Every rank walks the same number of passes so that their collectives match.
  int64_t passes = 0;
  for (int r = 0; r < ranks_; ++r) {
    const auto [a, b] = proportional_rows(work_.ranks, o_.batch, r, total);
    passes = std::max(passes, (b - a + std::max<int64_t>(1, work_.ranks[r].batch) - 1) / std::max<int64_t>(1, work_.ranks[r].batch));
  }
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t r0 = std::min(w1, w0 + p * chunk), r1 = std::min(w1, r0 + chunk);
    Tensor in = Tensor::empty({r1 - r0, seq_}, DType::i32, host_), tg = Tensor::empty({r1 - r0, seq_}, DType::i32, host_);
    for (int64_t r = r0; r < r1; ++r)
      val_loader_->eval_window(r, in.data<int32_t>() + (r - r0) * seq_, tg.data<int32_t>() + (r - r0) * seq_);
    if (ranks_ == 1 && r1 == r0) continue;
    sum += sum_in_order(engine_->loss_sums(on_device(in), on_device(tg), micro_batch()));
  }
  return comm_.all_reduce_sum(sum) / (double)(total * seq_);
}

// This rank's rows of every batch and its input buffers; again after a re-plan.
void Training::take_rows() {
  row0_ = 0;
  for (int r = 0; r < rank_; ++r) row0_ += work_.ranks[r].batch;
  inputs_host_ = Tensor::empty({work_.ranks[rank_].batch, seq_}, DType::i32, host_);
  targets_host_ = Tensor::empty({work_.ranks[rank_].batch, seq_}, DType::i32, host_);
  inputs_ = device_.is_cpu() ? inputs_host_ : Tensor::empty({work_.ranks[rank_].batch, seq_}, DType::i32, device_);
  targets_ = device_.is_cpu() ? targets_host_ : Tensor::empty({work_.ranks[rank_].batch, seq_}, DType::i32, device_);
}

// The running plan's shard layout, checked to be the same on every rank.
ShardLayout Training::agreed_layout() const {
  std::vector<int64_t> unit_sizes;
  for (int u = 0; u < config_.num_units(); ++u) unit_sizes.push_back(config_.unit_params(u));
  // Hybrid: the layout of a group's positions (the same in every group).
  const int positions = work_.sharding.hybrid() ? work_.sharding.group_size : ranks_;
  std::vector<double> shares;
  if (local_) {  // local mode: over the ranks of this rank's group, their shares renormalised
    double sum = 0;
    for (int r : local_->members()) sum += work_.ranks[r].share;
    for (int r : local_->members()) shares.push_back(work_.ranks[r].share / sum);
  } else {
    for (int r = 0; r < positions; ++r) shares.push_back(work_.ranks[r].share);
  }
  const ShardLayout layout(unit_sizes, shares);
  step_comm().agree("shard layout", {(int64_t)layout.fingerprint(), (int64_t)config_.total_params(),
                               (int64_t)work_.sharding.group_size});
  return layout;
}

// The cost model's per-block all-gather and reduce-scatter (and, hybrid, all-reduce across
// the groups) against the same collectives timed now by the engine on the running layout,
// through its own communicators and in the forms it runs them (flat or hierarchical): a
// block's parameters in the compute dtype gathered, its fp32 gradients reduce-scattered.
// Collective; each the fastest of 5 (the others measure the wait for ranks the scheduler
// did not run, as in the profiler), the slowest rank's. Only a plan with predictions (a
// planner's, or a plan file's) has them.
json Training::collectives_vs_plan() {
  const int unit = config_.num_units() > 1 ? 1 : 0;  // unit 1: the first block
  const Engine::CollectiveTimes t = engine_->time_collectives(unit, 5);
  const Engine::CollectiveTimes e = engine_->time_collectives(0, 3);  // the embedding
  const PlanPrediction& p = predicting_plan()->predicted;
  auto entry = [](double predicted, double measured, const std::string& form) {
    json e = {{"predicted_ms", predicted * 1e3}, {"measured_ms", measured * 1e3},
              {"ratio", predicted > 0 ? measured / predicted : 0.0}};
    if (!form.empty()) e["form"] = form;
    return e;
  };
  const int nodes = comm_.nodes();
  // Local mode: the engine's collectives run in rank 0's group (the combined plan predicts that group's).
  json j = {{"over", local_ ? str(local_->members().size(), " ranks of group ", local_->group(), " of local mode")
                                 : str(ranks_, " ranks on ", nodes, nodes == 1 ? " node" : " nodes")},
            {"all_gather", entry(p.ag_s, t.all_gather_s, t.all_gather_form)},
            {"reduce_scatter", entry(p.rs_s, t.reduce_scatter_s, t.reduce_scatter_form)}};
  if (work_.sharding.hybrid()) j["all_reduce"] = entry(p.ar_s, t.all_reduce_s, "");
  j["embedding"] = {{"all_gather", entry(p.embed_ag_s, e.all_gather_s, e.all_gather_form)},
                    {"reduce_scatter", entry(p.embed_rs_s, e.reduce_scatter_s, e.reduce_scatter_form)}};
  if (work_.sharding.hybrid()) j["embedding"]["all_reduce"] = entry(p.embed_ar_s, e.all_reduce_s, "");
  return j;
}

// Every rank's value of x, on every rank of `comm`.
std::vector<double> Training::gather_over(Comm& comm, double x) const {
  const int ranks = comm.size();
  Tensor one = Tensor::full({1}, (float)x, DType::f32, host_);
  Tensor all = Tensor::empty({ranks}, DType::f32, host_);
  comm.all_gather_v(one, all, std::vector<int64_t>(ranks, 1));
  const std::vector<float> v = all.to_vector();
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace

void check_train_options(const TrainOptions& o) {
  // "--lr must be positive and finite, got nan; e.g. --lr 1e-3".
  auto require = [](bool ok, const char* flag, const auto& value, const char* rule, const std::string& fix = "") {
    GPUMIX_CHECK_INPUT(ok, flag, " must be ", rule, ", got ", value, fix.empty() ? "" : "; ", fix);
  };
  require(o.steps >= 1, "--steps", o.steps, "at least 1");
  require(o.batch >= 1, "--batch", o.batch, "at least 1");
  require(o.seq >= 0, "--seq", o.seq, "at least 1", "leave --seq out for the model's context");
  require(std::isfinite(o.lr) && o.lr > 0, "--lr", o.lr, "positive and finite", "e.g. --lr 1e-3");
  require(o.warmup >= -1, "--warmup", o.warmup, "at least 0", "leave --warmup out for min(100, steps / 10)");
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "--weight-decay", o.weight_decay,
          "finite and at least 0", "0 for none");
  require(std::isfinite(o.grad_clip) && o.grad_clip >= 0, "--grad-clip", o.grad_clip, "finite and at least 0",
          "0 for no clipping");
  require(o.eval_interval >= 0, "--eval-interval", o.eval_interval, "at least 0", "0 to validate at the end only");
  require(o.eval_windows >= 0, "--eval-windows", o.eval_windows, "at least 0", "0 for all windows");
  require(o.ckpt_interval >= 0, "--ckpt-interval", o.ckpt_interval, "at least 0", "0 to save at the end only");
  require(o.keep_checkpoints >= 0, "--keep-checkpoints", o.keep_checkpoints, "at least 0", "0 keeps all");
  require(o.threads >= 0, "--threads", o.threads, "at least 0", "0 for all cores");
  require(o.eval_choices_interval >= -1, "--eval-choices-interval", o.eval_choices_interval, "at least 0",
          "0 to score the choices at the end only");
  require(o.eval_choices_examples >= 0, "--eval-choices-examples", o.eval_choices_examples, "at least 0", "0 for all");
  if (!o.eval_choices.empty()) read_choices(o.eval_choices);  // its layout, before the run folder is touched
  require(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction", o.val_fraction, "in (0, 1)");
  for (const auto& [flag, value] : {std::pair<const char*, int>{"--layers", o.layers}, {"--heads", o.heads},
                                    {"--channels", o.channels}})
    require(value >= 0, flag, value, "at least 1", std::string("leave ") + flag + " out for the preset's");
  require(o.vocab_size >= 0, "--vocab-size", o.vocab_size, "at least 1", "leave it out for the tokenizer's or the preset's");
  for (const auto& [flag, spec] : {std::pair<const char*, std::string>{"--data", o.data}, {"--val-data", o.val_data}})
    if (!spec.empty()) data::data_files(spec, flag);  // a file, folder or glob that names files
  GPUMIX_CHECK_INPUT(o.resume.empty() || fs::exists(o.resume), "--resume ", o.resume, " does not exist");
  // The model's shape as the options give it (the heads dividing the channels, ...); a
  // resumed run takes its checkpoint's, and --init-from's folder is read (and checked) at
  // the start.
  if (o.resume.empty() && o.init_from.empty()) resolve_model(o, gpt_preset(o.model).V, resolve_seq(o));
}

TrainResult train(const TrainOptions& o, const Work& given_work, Comm& comm,
                  const EngineOptions& engine_options) {
  const StopOnSignals stop_on_signals(comm.rank() == 0);
  check_train_options(o);
  if (engine_options.planner.empty()) validate_work(given_work, o.batch, comm.size());
  // Local mode's rules before the run folder is touched (form_groups checks the plan it runs).
  check_local_sync(engine_options.sync, o, engine_options.planner.empty() ? &given_work : nullptr, comm.size(),
                   comm.node_of_rank());
  check_local_sharding(engine_options.sync, engine_options.sharding);
  Training run(o, comm, engine_options);
  run.prepare_run_folder();
  run.load_data();
  run.choose_device();
  run.choose_dtype();
  run.choose_plan(given_work);
  run.form_groups();
  run.make_engine();
  run.init_from();
  run.resume();
  run.start_trace();
  run.check_collectives();
  run.measure_peak();
  run.print_settings();
  run.open_log();
  run.run_steps();
  TrainResult result = run.finish();
  if (result.stop_signal) clear_stop_request();  // acted on: the next training runs
  return result;
}

}  // namespace gpumix::dist
