// The step loop: one rank's training run, set up once (run folder, data, device, plan,
// engine, resume, settings, log) and then stepped. What a rank computes in a step is the
// engine's (dist/engine/engine.h); the loop around it (data, the non-finite guard, the
// optimizer's schedule, timing, validation, re-planning, the log, checkpoints) is here and
// the same for every engine.
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
#include "dist/engine/stop.h"
#include "dist/engine/engine.h"
#include "dist/engine/fault.h"
#include "dist/engine/replan.h"
#include "dist/engine/shard_layout.h"
#include "dist/engine/sharded_engine.h"
#include "dist/engine/trace.h"
#include "dist/engine/whole_model_engine.h"
#include "dist/plan/simulator.h"
#include "kernels/cpu/isa.h"
#include "nn/data/loader.h"
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
// all-gather (host memory: `host` is the rank's CPU device, or the host of its GPU) then
// tells every rank what every rank found, so that all of them agree on the verdict and
// print the same message. Returns this rank's sum of squares.
double check_finite(const StepNumbers& n, double local_loss, Comm& comm, int step, int L, Device host,
                    std::string* error) {
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

// What makes a device compute bf16 natively (core/precision.h decides; "" : it does not),
// as the settings table names it. kNativeFeatures[i] travels between ranks as i.
const char* const kNativeFeatures[] = {"", "avx512_bf16", "AMX-BF16", "a CUDA GPU"};
int native_bf16_feature(Device device) {
  if (default_compute_dtype(device) != DType::bf16) return 0;
  if (device.is_cuda()) return 3;
  return kernels::cpu::isa_supported(kernels::cpu::Isa::avx512_bf16) ? 1 : 2;
}

std::vector<double> ms_of(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double x : seconds) ms.push_back(x * 1e3);
  return ms;
}

// What a step computed, on every rank: the global loss and gradient norm, the learning
// rate, and why the optimizer step was skipped ("" when it was applied).
struct StepOutcome {
  double loss = 0, norm = 0;
  float lr = 0;
  std::string nonfinite;
};

// How long a step took: the slowest rank's time and each rank's compute time.
struct StepTime {
  double step_s = 0, ms = 0, tokens_per_s = 0;
  std::vector<double> busy_s;  // per rank: the step without its waits for collectives
};

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
  void make_engine();
  void init_from();
  void resume();
  void check_collectives();
  void print_settings() const;
  void open_log();
  void start_trace();
  void run_steps();
  TrainResult finish();

 private:
  void run_step(int step);
  void load_batch(int step);
  StepOutcome forward_backward_update(int step);
  StepTime time_step(double t0);
  json step_line(int step, const StepOutcome& s, const StepTime& t, std::string* busy_text) const;
  void write_trace();
  std::string evaluate_if_due(int step, json& line);
  std::string replan_if_drifted(const std::vector<double>& busy_s, json& line);
  void adopt(Work work);
  void print_step(int step, const StepOutcome& s, const StepTime& t, const std::string& busy_text,
                  const std::string& val_text, const std::string& replan_text) const;
  void save_if_due(int step);
  void save_checkpoint_now(int step);
  bool stop_if_requested(int step);

  double evaluate(int64_t total);
  void take_rows();
  ShardLayout agreed_layout() const;
  json collectives_vs_plan();
  static std::string collectives_text(const json& collectives);
  std::vector<double> gather_ranks(double x) const;
  std::string plan_text() const;
  int64_t micro_batch() const { return std::max<int64_t>(1, work_.ranks[rank_].micro_batch); }
  Allocator& memory() const { return allocator(device_); }
  Comm& engine_comm() { return device_comm_ ? *device_comm_ : comm_; }
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
  void log_line(const json& j);

  const TrainOptions& o_;
  Comm& comm_;
  const EngineOptions& engine_options_;
  const int rank_, ranks_;
  const bool lead_;
  const bool resuming_;
  const fs::path log_path_;
  const int64_t seq_;
  const int64_t tokens_per_step_;
  const float scale_;  // of each token's loss: the global batch's mean
  const int last_;     // the last step this call runs (--stop-at)
  LRSchedule schedule_;

  RunData run_;
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
  int start_ = 0;  // the step the run starts after (the checkpoint's when resuming)
  int saved_step_ = -1;  // the step of the checkpoint written last by this call
  std::ofstream log_;
  Tracer tracer_;  // off unless --trace

  int64_t row0_ = 0;        // this rank's first row of every batch
  Tensor inputs_, targets_;  // (b, T) i32: this rank's rows, on its device
  Tensor inputs_host_, targets_host_;  // (b, T) i32 on host_: the loader's; the same tensors on a CPU
  TrainResult result_;
  std::vector<double> rates_;
  std::vector<std::vector<double>> busy_history_;  // per step since the plan started: per rank
  std::vector<double> step_history_s_;             // per step since the plan started
  json collectives_;  // collectives_vs_plan() of the running plan (null: not measured yet)
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
      last_(o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps) {
  schedule_.max_lr = o.lr;
  schedule_.min_lr = o.lr * o.min_lr_ratio;
  schedule_.warmup = o.warmup >= 0 ? o.warmup : std::min(100, o.steps / 10);
  schedule_.total = o.steps;
}

// ---- setup ----------------------------------------------------------------------------------

void Training::prepare_run_folder() {
  std::string error;
  if (lead_) {
    try {
      fs::create_directories(o_.out);
      // An empty log is a run that failed before its first step: nothing to keep.
      GPUMIX_CHECK_INPUT(resuming_ || !fs::exists(log_path_) || fs::file_size(log_path_) == 0, "run folder ", o_.out,
                         " already holds a run (",
                         log_path_.string(), "); continue it with --resume ", o_.out, ", or pass another --out");
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
  config_ = resolve_model(o_, run_.vocab, seq_);
  split_ = data::split_train_val(run_.tokens, seq_, o_.val_fraction);
  loader_.emplace(split_.train, seq_, o_.batch, o_.seed);
  val_loader_.emplace(split_.val, seq_, o_.batch, o_.seed);
  result_.unigram_loss = data::unigram_cross_entropy(split_.train, split_.val, run_.vocab);
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
  for (double f : gather_ranks((double)native_bf16_feature(device_))) sources.native.push_back(kNativeFeatures[(int)f]);
  try {
    if (resuming_) sources.checkpoint = checkpoint_dtype(open_checkpoint(o_.resume));
    dtype_ = choose_compute_dtype(sources);
  } catch (const std::exception& e) {
    error = local_error_of(e);
  }
  comm_.agree("compute dtype", {(int64_t)dtype_.dtype}, error);
  if (lead_ && !dtype_.note.empty()) log_info("note: ", dtype_.note);
}

// The work as given, or the planner's on a profile of the ranks.
void Training::choose_plan(const Work& given_work) {
  work_ = given_work;
  if (engine_options_.planner.empty()) return;
  planner_ = std::make_unique<Replanner>(
      profile_cluster(config_, (int)seq_, dtype_.dtype, engine_options_.device_label, device_, engine_comm(),
                      engine_options_.profiler),
      engine_options_.planner == "auto" ? "gpumix" : engine_options_.planner, o_.batch, engine_options_.drift,
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

// One rank: the whole model; several: the uneven sharded engine.
void Training::make_engine() {
  AdamWConfig adam;
  adam.weight_decay = o_.weight_decay;
  if (ranks_ == 1)
    engine_ = std::make_unique<WholeModelEngine>(config_, device_, dtype_.dtype, o_.seed, adam, o_.recompute);
  else
    engine_ = std::make_unique<ShardedEngine>(config_, agreed_layout(), engine_comm(), device_, dtype_.dtype,
                                              o_.seed, adam, engine_options_.prefetch, work_.sharding.group_size,
                                              topology_links());
  engine_->tracer = &tracer_;
  engine_->set_offload(work_.ranks[rank_].offload);
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
  if (lead_) log_info("initialised from ", o_.init_from);
}

void Training::resume() {
  if (!resuming_) return;
  start_ = load_checkpoint(o_.resume, config_, *engine_, comm_, run_.tokenizer_hash);
  GPUMIX_CHECK_INPUT(start_ < o_.steps, "the checkpoint is at step ", start_, ", not before --steps ", o_.steps,
                     "; pass a larger --steps to train further");
}

void Training::print_settings() const {
  // Each rank's own work, for a log of every rank (debug).
  log_debug("rank ", rank_, " of ", ranks_, ": ", device_.str(), " (", format_bytes(device_props(device_).capacity),
            "), batch ", work_.ranks[rank_].batch, ", micro-batch ", work_.ranks[rank_].micro_batch, ", state share ",
            work_.ranks[rank_].share);
  if (!lead_) return;
  const GPTConfig& config = config_;
  gpumix::print_settings({
      {"data", o_.data + " (" + human_count((double)run_.tokens.size()) + " tokens)"},
      {"format", run_.format},
      {"split", human_count((double)split_.train.size()) + " train / " +
                    human_count((double)split_.val.size()) + " validation"},
      {"tokenizer", run_.tokenizer_path + " (vocab " + std::to_string(run_.vocab) + ")"},
      {"model", config.name + " L=" + std::to_string(config.L) + " NH=" + std::to_string(config.NH) +
                    " C=" + std::to_string(config.C) + " T=" + std::to_string(config.T)},
      {"parameters", human_count((double)config.total_params())},
      {"dtype", dtype_.why},
      {"batch x seq", std::to_string(o_.batch) + " x " + std::to_string(seq_) + " = " +
                          std::to_string(o_.batch * seq_) + " tokens/step"},
      {"steps", std::to_string(o_.steps) + (resuming_ ? " (from step " + std::to_string(start_) + ")" : "")},
      {"init from", o_.init_from.empty() ? "(random, seed " + std::to_string(o_.seed) + ")" : o_.init_from},
      {"lr", str(o_.lr, " warmup ", schedule_.warmup, " cosine to ", schedule_.min_lr)},
      {"weight decay / clip", str(o_.weight_decay, " / ", o_.grad_clip)},
      {"ranks", str(ranks_, " (", comm_.backend(), ")")},
      {"plan b/m/r per rank", plan_text()},
      // What the planner's profile measured (or its cache held): its bounds.
      {"profile", planner_ ? str("micro-batches <= ", engine_options_.profiler.max_micro_batch, ", ",
                                 engine_options_.profiler.repeats,
                                 engine_options_.profiler.repeats == 1 ? " repeat" : " repeats")
                           : std::string("none (no planner)")},
      {"recompute", ranks_ > 1 || o_.recompute ? "on" : "off"},
      {"device (rank 0)", device_.str() + " (" + format_bytes(device_props(device_).capacity) + ")"},
      {"threads per rank", std::to_string(omp_get_max_threads())},
      {"seed", std::to_string(o_.seed)},
      {"out", o_.out},
  });
  if (const Plan* plan = predicting_plan()) log_info(plan_table(*plan));
  if (!collectives_.is_null()) log_info(collectives_text(collectives_));
}

// Before the first step, the planned collectives against the same ones timed on the layout
// that will run (so that a run stopped early, or a node lost, has shown them too).
void Training::check_collectives() {
  if (predicting_plan() && ranks_ > 1) collectives_ = collectives_vs_plan();
}

void Training::open_log() {
  if (!lead_) return;
  log_.open(log_path_, std::ios::app);
  GPUMIX_CHECK_INPUT(log_.good(), "cannot write ", log_path_.string());
}

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
  for (int step = start_ + 1; step <= last_; ++step) {
    run_step(step);
    if (stop_if_requested(step)) break;
  }
}

// SIGTERM / SIGINT (dist/engine/stop.h): every rank stops after the same step, the one at
// whose end any rank had seen the request, with a checkpoint of it.
bool Training::stop_if_requested(int step) {
  const int signo = ranks_ > 1 ? (int)comm_.all_reduce_max((double)stop_requested()) : stop_requested();
  if (signo == 0) return false;
  if (saved_step_ != step) save_checkpoint_now(step);
  result_.stop_signal = signo;
  if (lead_)
    log_info("step ", step, ": ", signal_name(signo), ": stopped after this step, checkpoint ", result_.checkpoint,
             "; continue with --resume ", o_.out);
  return true;
}

void Training::run_step(int step) {
  tracer_.begin_step(step);
  const double t0 = detail::now_seconds();
  {
    TraceSpan span(&tracer_, "load batch", "phase");
    load_batch(step);
  }
  const StepOutcome s = forward_backward_update(step);
  const StepTime t = time_step(t0);
  result_.train_loss = s.loss;
  std::string busy_text;
  json line = step_line(step, s, t, &busy_text);
  const std::string val_text = evaluate_if_due(step, line);
  const std::string replan_text = replan_if_drifted(t.busy_s, line);
  log_line(line);
  print_step(step, s, t, busy_text, val_text, replan_text);
  save_if_due(step);
  result_.step = step;
  if (tracer_.complete(step)) write_trace();
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

// The engine's forward and backward, the non-finite guard, then (unless it found a
// non-finite value) clipping and the optimizer step.
StepOutcome Training::forward_backward_update(int step) {
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
    s.loss = comm_.all_reduce_sum(local_loss);
  }
  {
    TraceSpan span(&tracer_, "finite check and norm", "collective");
    // Replicas hold the same reduced slices: the norm counts the first group's only.
    const double squares = check_finite(numbers, local_loss, comm_, step, config_.L, host_, &s.nonfinite);
    s.norm = std::sqrt(comm_.all_reduce_sum(engine_->primary_replica() ? squares : 0.0));
  }
  engine_->wait_s += detail::seconds_since(t0);
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
  return s;
}

StepTime Training::time_step(double t0) {
  StepTime t;
  const double local_s = detail::seconds_since(t0);
  tracer_.add("step", "step", t0, t0 + local_s);  // what the log's ms measures on this rank
  TraceSpan span(&tracer_, "share step times", "collective");
  t.step_s = comm_.all_reduce_max(local_s);
  t.busy_s = gather_ranks(local_s - engine_->wait_s);
  t.ms = t.step_s * 1e3;
  t.tokens_per_s = tokens_per_step_ / t.step_s;
  rates_.push_back(t.tokens_per_s);
  if (ranks_ > 1) busy_history_.push_back(t.busy_s);
  step_history_s_.push_back(t.step_s);
  return t;
}

// The step's log line (without validation and re-planning); *busy_text gets the console's
// per-rank busy fractions.
json Training::step_line(int step, const StepOutcome& s, const StepTime& t, std::string* busy_text) const {
  json line = {{"step", step}, {"loss", s.loss}, {"norm", s.norm}, {"lr", s.lr}, {"ms", t.ms},
               {"tokens_per_s", t.tokens_per_s}};
  if (!s.nonfinite.empty()) {  // JSON has no NaN: the numbers become null, with the reason
    line["loss"] = std::isfinite(s.loss) ? json(s.loss) : json(nullptr);
    line["norm"] = std::isfinite(s.norm) ? json(s.norm) : json(nullptr);
    line["skipped"] = s.nonfinite;
  }
  if (ranks_ > 1) {
    std::vector<double> fraction;
    *busy_text = " | busy";
    for (double b : t.busy_s) {
      fraction.push_back(b / t.step_s);
      *busy_text += str(" ", (int)std::lround(100 * b / t.step_s), "%");
    }
    line["busy"] = fraction;
    line["busy_ms"] = ms_of(t.busy_s);
  }
  if (step == start_ + 1) {  // what the whole run shares: the plan, the compute dtype, the baseline to beat
    line["plan"] = plan_text();  // b/m/r per rank, as in the settings
    line["dtype"] = dtype_name(dtype_.dtype);
    line["unigram_loss"] = result_.unigram_loss;
  }
  if (const Plan* plan = predicting_plan()) {
    line["predicted_ms"] = plan->predicted.step_s * 1e3;
    line["predicted_busy_ms"] = ms_of(predicted_busy_s(*plan));
  }
  return line;
}

// Every --eval-interval steps and at the last: the validation loss, into the line; returns
// the console's text for it ("" when not due).
std::string Training::evaluate_if_due(int step, json& line) {
  const bool eval_now = (o_.eval_interval > 0 && step % o_.eval_interval == 0) || step == last_;
  if (!eval_now) return "";
  // The same first --eval-windows windows at every step (0: all), so that the points of a
  // run compare; at the last step, when they are fewer than all, the full validation too,
  // logged as its own estimate (val_full_loss) for the run's result.
  const int64_t total = val_loader_->num_eval_windows();
  const int64_t val_windows = o_.eval_windows <= 0 ? total : std::min<int64_t>(o_.eval_windows, total);
  TraceSpan span(&tracer_, "evaluate", "phase");
  const double val = evaluate(val_windows);
  line["val_loss"] = val;
  line["val_windows"] = val_windows;
  line["val_windows_total"] = total;
  result_.val_loss = val;
  result_.val_windows = val_windows;
  std::string text = str(" | val ", val, " (", val_windows, val_windows == total ? " windows, all)" : " windows)");
  if (step == last_ && val_windows < total) {
    const double full = evaluate(total);
    line["val_full_loss"] = full;
    result_.val_loss = full;
    result_.val_windows = total;
    text += str(" | full val ", full, " (", total, " windows)");
  }
  return text;
}

// Drift: a device slower (or faster) than planned re-plans; the new shares take effect
// from the next step, the same on every rank (they all judge the same gathered times).
// Returns the console's message ("" when no drift was confirmed).
std::string Training::replan_if_drifted(const std::vector<double>& busy_s, json& line) {
  if (!planner_ || ranks_ == 1 || !planner_->observe(busy_s)) return "";
  const Replanner::Change& c = planner_->last_change();
  if (c.adopted) adopt(planner_->plan().work());
  line["replan"] = c.record(plan_text());
  return c.message(plan_text());
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

void Training::print_step(int step, const StepOutcome& s, const StepTime& t, const std::string& busy_text,
                          const std::string& val_text, const std::string& replan_text) const {
  if (!lead_) return;
  if (!o_.quiet && log_enabled(LogLevel::info)) {
    char line[256];
    std::snprintf(line, sizeof line, "step %d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s tok/s", step,
                  o_.steps, s.loss, s.norm, s.lr, t.ms, human_count(t.tokens_per_s).c_str());
    log_info(line, busy_text, val_text);
  }
  if (!replan_text.empty()) {
    log_info("step ", step, ": ", replan_text);
    if (planner_->last_change().adopted) log_info(plan_table(planner_->plan()));
  }
}

void Training::save_if_due(int step) {
  if ((o_.ckpt_interval > 0 && step % o_.ckpt_interval == 0) || step == last_) save_checkpoint_now(step);
}

void Training::save_checkpoint_now(int step) {
  TraceSpan span(&tracer_, "checkpoint", "phase");
  result_.checkpoint = save_checkpoint(o_, config_, dtype_.dtype, work_, *engine_, comm_, step, run_.tokenizer_hash);
  saved_step_ = step;
}

TrainResult Training::finish() {
  std::sort(rates_.begin(), rates_.end());
  result_.tokens_per_s = rates_.empty() ? 0 : rates_[rates_.size() / 2];
  json final_line = {{"final", true}, {"step", result_.step}, {"val_loss", result_.val_loss},
                     {"val_windows", result_.val_windows}, {"unigram_loss", result_.unigram_loss},
                     {"tokens_per_s", result_.tokens_per_s}};
  // Memory: every rank's allocator peak since the running plan started, next to its
  // prediction.
  const std::vector<double> peak = gather_ranks((double)memory().stats().peak);
  final_line["peak_bytes"] = peak;
  const Plan* plan = predicting_plan();
  if (plan) final_line["predicted_bytes"] = predicted_bytes(*plan);
  if (plan && !busy_history_.empty()) {  // compute per step, per rank: as prediction_table prints it
    std::vector<double> measured;
    for (int r = 0; r < ranks_; ++r) {
      std::vector<double> b;
      for (const std::vector<double>& step : busy_history_) b.push_back(step[r]);
      measured.push_back(median_after_warm_up(b) * 1e3);
    }
    final_line["busy_ms"] = {{"predicted", ms_of(predicted_busy_s(*plan))}, {"measured", measured}};
  }
  // Measured again only when a re-plan changed the layout since the start.
  if (collectives_.is_null() && plan && ranks_ > 1) collectives_ = collectives_vs_plan();
  const json& collectives = collectives_;
  if (!collectives.is_null()) final_line["collectives"] = collectives;
  // The step: the plan's prediction against the median measured since it started (the
  // first 2 steps, which warm up, left out when there are more than 3).
  const double measured_step_s = median_after_warm_up(step_history_s_);
  if (plan && measured_step_s > 0)
    final_line["step_ms"] = {{"predicted", plan->predicted.step_s * 1e3}, {"measured", measured_step_s * 1e3},
                             {"ratio", measured_step_s / plan->predicted.step_s}};
  if (result_.stop_signal) {
    final_line["stopped"] = signal_name(result_.stop_signal);
    if (result_.step != last_) final_line.erase("val_loss");  // not validated at its end
  }
  log_line(final_line);
  if (lead_) {
    if (plan && !busy_history_.empty()) log_info(prediction_table(*plan, busy_history_, peak));
    if (final_line.contains("step_ms")) {
      char row[200];
      std::snprintf(row, sizeof row, "predicted vs measured, the step: %.1f ms predicted, %.1f ms measured (median), "
                    "ratio %.2f", final_line["step_ms"]["predicted"].get<double>(),
                    final_line["step_ms"]["measured"].get<double>(), final_line["step_ms"]["ratio"].get<double>());
      log_info(row);
    }
    if (!collectives.is_null()) log_info(collectives_text(collectives));
    if (!result_.stop_signal || result_.step == last_) {  // a stopped run was not validated at its end
      char line[256];
      std::snprintf(line, sizeof line, "validation loss %.4f nats/token (%lld windows) vs unigram baseline %.4f "
                    "(%.2f below)", result_.val_loss, (long long)result_.val_windows, result_.unigram_loss,
                    result_.unigram_loss - result_.val_loss);
      log_info(line);
    }
    if (!result_.checkpoint.empty()) log_info("checkpoint: ", result_.checkpoint);
  }
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
  for (int r = 0; r < positions; ++r) shares.push_back(work_.ranks[r].share);
  const ShardLayout layout(unit_sizes, shares);
  comm_.agree("shard layout", {(int64_t)layout.fingerprint(), (int64_t)config_.total_params(),
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
  json j = {{"over", str(ranks_, " ranks on ", nodes, nodes == 1 ? " node" : " nodes")},
            {"all_gather", entry(p.ag_s, t.all_gather_s, t.all_gather_form)},
            {"reduce_scatter", entry(p.rs_s, t.reduce_scatter_s, t.reduce_scatter_form)}};
  if (work_.sharding.hybrid()) j["all_reduce"] = entry(p.ar_s, t.all_reduce_s, "");
  j["embedding"] = {{"all_gather", entry(p.embed_ag_s, e.all_gather_s, e.all_gather_form)},
                    {"reduce_scatter", entry(p.embed_rs_s, e.reduce_scatter_s, e.reduce_scatter_form)}};
  if (work_.sharding.hybrid()) j["embedding"]["all_reduce"] = entry(p.embed_ar_s, e.all_reduce_s, "");
  return j;
}

std::string Training::collectives_text(const json& collectives) {
  std::string text = "predicted vs measured, per collective kind (one block; the embedding once a step; " +
                     collectives["over"].get<std::string>() + ")\n";
  auto rows = [&](const json& of, const std::string& prefix) {
    for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"}) {
      if (!of.contains(kind)) continue;
      const json& c = of[kind];
      char row[240];
      std::snprintf(row, sizeof row, "%-25s %8.2f ms predicted %8.2f ms measured  ratio %.2f%s\n",
                    (prefix + kind).c_str(), c["predicted_ms"].get<double>(), c["measured_ms"].get<double>(),
                    c["ratio"].get<double>(), c.contains("form") ? (" (" + c["form"].get<std::string>() + ")").c_str() : "");
      text += row;
    }
  };
  rows(collectives, "");
  if (collectives.contains("embedding")) rows(collectives["embedding"], "embedding ");
  return text;
}

// Every rank's value of x, on every rank.
std::vector<double> Training::gather_ranks(double x) const {
  Tensor one = Tensor::full({1}, (float)x, DType::f32, host_);
  Tensor all = Tensor::empty({ranks_}, DType::f32, host_);
  comm_.all_gather_v(one, all, std::vector<int64_t>(ranks_, 1));
  const std::vector<float> v = all.to_vector();
  return std::vector<double>(v.begin(), v.end());
}

std::string Training::plan_text() const {
  std::string text;
  for (int r = 0; r < ranks_; ++r)
    text += str(r ? ", " : "", work_.ranks[r].batch, "/", work_.ranks[r].micro_batch, "/", work_.ranks[r].share);
  if (work_.sharding.hybrid())  // the shares are then of each group's state
    text += str(", hybrid: ", ranks_ / work_.sharding.group_size, " groups of ", work_.sharding.group_size);
  return text;
}

void Training::log_line(const json& j) {
  if (!lead_) return;
  log_ << j.dump() << "\n";
  log_.flush();
}

void check_options(const TrainOptions& o, const Work& given_work, int ranks,
                   const EngineOptions& engine_options) {
  GPUMIX_CHECK_INPUT(o.steps >= 1, "--steps must be at least 1, got ", o.steps);
  GPUMIX_CHECK_INPUT(o.batch >= 1, "--batch must be at least 1, got ", o.batch);
  GPUMIX_CHECK_INPUT(o.seq >= 0, "--seq must be positive, got ", o.seq);
  GPUMIX_CHECK_INPUT(o.lr > 0, "--lr must be positive, got ", o.lr);
  if (engine_options.planner.empty()) validate_work(given_work, o.batch, ranks);
}

}  // namespace

ComputeDtype choose_compute_dtype(const ComputeDtypeSources& s) {
  // The first rank whose device lacks native bf16, and how to say where.
  int lacking = -1;
  for (size_t r = 0; r < s.native.size() && lacking < 0; ++r)
    if (s.native[r].empty()) lacking = (int)r;
  bool all_alike = true;
  for (const std::string& f : s.native) all_alike = all_alike && f == s.native[0];
  const std::string here = all_alike ? "this CPU" : str("rank ", lacking, "'s CPU");
  const char* no_bf16 = "neither avx512_bf16 nor AMX-BF16";
  ComputeDtype c;
  std::string source;
  if (s.flag) {
    GPUMIX_CHECK_INPUT(s.plan_file.empty() || *s.flag == s.plan_dtype, "plan ", s.plan_file, " was made for ",
                       dtype_name(s.plan_dtype), " but --dtype is ", dtype_name(*s.flag),
                       "; its memory and times hold only in its dtype: make the plan again with `gpumix plan "
                       "--dtype ", dtype_name(*s.flag), "`, or drop --dtype to train in ", dtype_name(s.plan_dtype));
    c.dtype = *s.flag;
    source = "--dtype";
  } else if (!s.plan_file.empty()) {
    c.dtype = s.plan_dtype;
    source = "the plan file's";
  } else if (s.checkpoint) {
    c.dtype = *s.checkpoint;
    source = "the checkpoint's";
  } else {
    c.dtype = lacking < 0 ? DType::bf16 : DType::f32;
    const std::string what = lacking >= 0         ? here + " has " + no_bf16
                             : !all_alike         ? "every rank's device computes it natively"
                             : s.native[0] == kNativeFeatures[3] ? std::string("the devices are CUDA GPUs")
                                                                : here + " has " + s.native[0];
    c.why = str(dtype_name(c.dtype), " (default: ", what, ")");
    return c;
  }
  check_compute_dtype(c.dtype, "the compute dtype");
  if (c.dtype == DType::bf16 && lacking >= 0) {
    c.why = str("bf16 (", source, "; ", here, " has ", no_bf16, ": the portable bf16 kernels)");
    c.note = str("bf16 on a CPU with ", no_bf16, " (", all_alike ? std::string("this one") : str("rank ", lacking),
                 "): the portable bf16 kernels run, correct but slower than f32");
  } else {
    c.why = str(dtype_name(c.dtype), " (", source, ")");
  }
  return c;
}

TrainResult train(const TrainOptions& o, const Work& given_work, Comm& comm,
                  const EngineOptions& engine_options) {
  const StopOnSignals stop_on_signals(comm.rank() == 0);
  check_options(o, given_work, comm.size(), engine_options);
  Training run(o, comm, engine_options);
  run.prepare_run_folder();
  run.load_data();
  run.choose_device();
  run.choose_dtype();
  run.choose_plan(given_work);
  run.make_engine();
  run.init_from();
  run.resume();
  run.start_trace();
  run.check_collectives();
  run.print_settings();
  run.open_log();
  run.run_steps();
  TrainResult result = run.finish();
  if (result.stop_signal) clear_stop_request();  // acted on: the next training runs
  return result;
}

}  // namespace gpumix::dist
