// The C API (tools/capi/gpumix.h) over the launcher (dist/engine/launch.h: thread ranks, or
// a communicator in the MPI form): a session is a checked launch and a claimed run folder; each
// gpumix_train call resumes from the folder's latest checkpoint; forward, evaluate and
// generate use the newest checkpoint's model (nn/infer.h).
#include "tools/capi/gpumix.h"

#include <omp.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>

#include "core/precision.h"
#include "dist/engine/stop.h"
#include "nn/infer.h"
#include "nn/run_folder.h"
#include "tools/capi/session.h"

using gpumix::dist::Comm;

namespace gpumix::capi {
namespace {

thread_local std::string last_error;

// Sets OpenMP's thread count for the calls that run on the caller's thread (the MPI form's
// training, inference) and gives the caller its own setting back.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
    if (n > 0) omp_set_num_threads(n);
  }
  ~OmpThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Runs fn on this rank so that every rank of an MPI-form session ends alike: an error all
// ranks raised together (CollectiveError) is rethrown as it is; an error of this rank is
// told to the others through agree(), which makes their next collective (or their own
// closing agree) throw the same CollectiveError, so that no rank is left waiting.
template <class F>
void on_every_rank(gpumix_session& s, const char* what, F&& fn) {
  if (!s.comm) {
    fn();
    return;
  }
  std::string error;
  try {
    fn();
  } catch (const dist::CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    error = dist::local_error_of(e);
  }
  s.comm->agree(what, {}, error);
}

// FNV-1a of a config string, for the MPI form's check that every rank passes the same.
int64_t text_hash(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; s && *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (int64_t)h;
}

void configure(gpumix_session& s, const gpumix_config* c) {
  GPUMIX_CHECK(c, "gpumix_session_create: config is NULL (use gpumix_config_default)");
  dist::LaunchRequest request;
  TrainOptions& o = request.options;
  o.model = c->model ? c->model : "gpt-nano";
  const GPTConfig preset = gpt_preset(o.model);
  o.token_vocab = c->vocab > 0 ? c->vocab : preset.V;
  o.seq = c->seq;
  o.batch = c->global_batch;
  o.steps = c->total_steps;
  o.lr = c->lr;
  o.seed = c->seed;
  o.threads = c->threads;
  o.out = c->out_dir ? c->out_dir : "";
  o.eval_interval = 0;
  o.quiet = false;  // the step lines are info lines of the session's log
  GPUMIX_CHECK(c->log_level >= GPUMIX_LOG_QUIET && c->log_level <= GPUMIX_LOG_DEBUG, "gpumix_session_create: "
               "log_level ", c->log_level, " is not a level; pass GPUMIX_LOG_QUIET (0) .. GPUMIX_LOG_DEBUG (4)");
  LogSink sink;
  sink.level = (LogLevel)c->log_level;
  if (c->log_callback) {
    const gpumix_log_fn fn = c->log_callback;
    void* const user = c->log_user;
    sink.callback = [fn, user](LogLevel level, const std::string& line) { fn((int)level, line.c_str(), user); };
  }
  if (c->log_file) sink.file = c->log_file;
  sink.all_ranks = c->log_all_ranks != 0;
  s.logger = std::make_shared<Logger>(sink);
  if (c->dtype) o.dtype = compute_dtype_from_name(c->dtype, "gpumix_session_create: dtype");
  GPUMIX_CHECK(o.batch >= 1 && o.steps >= 1 && o.lr > 0, "gpumix_session_create: global_batch (", o.batch,
               "), total_steps (", o.steps, ") and lr (", o.lr, ") must be positive");
  GPUMIX_CHECK(c->seq >= 0 && c->vocab >= 0 && c->threads >= 0, "gpumix_session_create: seq (", c->seq,
               "), vocab (", c->vocab, ") and threads (", c->threads, ") must be >= 0 (0: the default)");
  request.devices = c->devices ? c->devices : "";
  request.plan.plan = c->plan ? c->plan : "";
  // The communicator's ranks on this node share its cores.
  const int node_ranks = s.comm ? (int)s.comm->ranks_of_node(s.comm->node()).size() : 1;
  s.launch = dist::prepare_launch(request, s.comm.get(), node_ranks);
  // Inference runs on the caller's thread alone: all of the process's threads.
  s.threads = dist::threads_per_rank(c->threads, 1, node_ranks);
}

// The run folder's lock (on rank 0 for a communicator), and no earlier run in it.
void claim_run_folder(gpumix_session& s) {
  const std::string& out = s.launch.options.out;
  if (out.empty()) return;
  s.lock = dist::claim_run_folder(out, false, "choose another out_dir, or gpumix_load() one of its checkpoints "
                                  "into a session with a new out_dir", s.comm.get());
}

// Rank 0's string on every rank.
std::string broadcast_string(Comm& comm, const std::string& text) {
  const int64_t n = (int64_t)comm.all_reduce_max(comm.rank() == 0 ? (double)text.size() : 0.0);
  Tensor chars = Tensor::empty({n}, DType::i32);
  for (int64_t i = 0; i < n && comm.rank() == 0; ++i) chars.data<int32_t>()[i] = (unsigned char)text[i];
  comm.broadcast(chars, 0);
  std::string out((size_t)n, '\0');
  for (int64_t i = 0; i < n; ++i) out[i] = (char)chars.data<int32_t>()[i];
  return out;
}

void train_session(gpumix_session& s, const int32_t* tokens, int64_t n_tokens, int32_t steps, std::string& stopped) {
  dist::Launch launch = s.launch;  // this call's options below
  TrainOptions& o = launch.options;
  GPUMIX_CHECK(!o.out.empty(), "gpumix_train: the session has no run folder (out_dir was NULL); create a "
               "session with an out_dir to train");
  GPUMIX_CHECK(steps >= 1, "gpumix_train: steps must be >= 1, got ", steps);
  GPUMIX_CHECK(s.metrics.step < o.steps, "gpumix_train: the schedule's ", o.steps,
               " steps are done; create a session with a larger total_steps to go on");
  std::vector<int32_t> received;  // rank 0's tokens, on the other ranks of a communicator
  if (s.comm) {
    Comm& comm = *s.comm;
    const bool root = comm.rank() == 0;
    comm.agree("gpumix_train: steps", {steps},
               root && (!tokens || n_tokens < 1)
                   ? str("gpumix_train: rank 0 must pass the tokens (got ", tokens ? "" : "NULL, ", n_tokens, " tokens)")
                   : "");
    n_tokens = (int64_t)comm.all_reduce_max(root ? (double)n_tokens : 0.0);
    if (!root) {
      received.resize((size_t)n_tokens);
      tokens = received.data();
    }
    Tensor shared = Tensor::borrow(const_cast<int32_t*>(tokens), {n_tokens}, DType::i32);
    comm.broadcast(shared, 0);
  }
  GPUMIX_CHECK(tokens && n_tokens >= 1, "gpumix_train: tokens must not be NULL and n_tokens (", n_tokens,
               ") must be >= 1");
  o.token_data = tokens;
  o.token_count = n_tokens;
  o.resume = s.resume;
  // Train up to `target`: the loop runs to o.steps, so stop it there by saving and
  // ending at `target` with the full schedule length kept for the learning rate.
  o.stop_at = std::min(o.steps, s.metrics.step + steps);
  TrainResult r = dist::run_launch(launch, s.comm.get());
  if (s.comm) r.checkpoint = broadcast_string(*s.comm, r.checkpoint);  // written by rank 0
  s.checkpoint = s.resume = r.checkpoint;
  s.metrics.step = r.step;
  s.metrics.loss = r.train_loss;
  s.metrics.val_loss = r.val_loss;
  s.metrics.unigram_loss = r.unigram_loss;
  s.metrics.tokens_per_s = r.tokens_per_s;
  if (r.stop_signal)
    stopped = str("gpumix_train: stopped by ", dist::signal_name(r.stop_signal), " after step ", r.step,
                  ", checkpointed in ", r.checkpoint, "; gpumix_train again continues from there");
}

// The session's model for inference: its newest checkpoint's, read when that changed.
const GPT& session_model(gpumix_session& s, const char* call) {
  GPUMIX_CHECK(!s.checkpoint.empty(), call, ": the session has no model yet; gpumix_train it, or "
               "gpumix_load a checkpoint");
  if (!s.model || s.model_dir != s.checkpoint) {
    s.model.reset();
    s.model = load_model(CheckpointReader(s.checkpoint));
    s.model_dir = s.checkpoint;
  }
  return *s.model;
}

void forward(gpumix_session& s, const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
             float* out) {
  const OmpThreads threads(s.threads);
  const GPT& model = session_model(s, "gpumix_forward");
  const int64_t T = model.config().T, V = model.config().V;
  GPUMIX_CHECK(tokens && out, "gpumix_forward: tokens and out must not be NULL");
  GPUMIX_CHECK(batch >= 1 && seq >= 1 && seq <= T, "gpumix_forward: batch (", batch, ") must be >= 1 and seq (",
               seq, ") in 1..", T, ", the model's context");
  check_token_ids(tokens, batch * seq, V, "gpumix_forward: tokens");
  if (targets) check_token_ids(targets, batch * seq, V, "gpumix_forward: targets", -1);
  // A few rows at a time, so that the activations stay small whatever the batch.
  const int64_t chunk = 8;
  for (int64_t r0 = 0; r0 < batch; r0 += chunk) {
    const int64_t rows = std::min(chunk, batch - r0);
    const Tensor in = Tensor::borrow(const_cast<int32_t*>(tokens + r0 * seq), {rows, seq}, DType::i32);
    if (targets) {
      const Tensor tg = Tensor::borrow(const_cast<int32_t*>(targets + r0 * seq), {rows, seq}, DType::i32);
      const Tensor losses = token_losses(model, in, tg);  // (rows, seq)
      std::memcpy(out + r0 * seq, losses.data<float>(), sizeof(float) * rows * seq);
    } else {
      const Tensor logits = model.logits(in);  // (rows, seq, V)
      std::memcpy(out + r0 * seq * V, logits.data<float>(), sizeof(float) * rows * seq * V);
    }
  }
}

}  // namespace

int guarded(const std::function<void()>& fn) {
  try {
    last_error.clear();
    fn();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return -1;
}

int guarded(const gpumix_session* s, const std::function<void()>& fn) {
  if (!s || !s->logger) return guarded(fn);
  const LogScope scope(s->logger, s->comm ? s->comm->rank() : -1);
  return guarded(fn);
}

gpumix_session* create_session(const gpumix_config* c, std::unique_ptr<Comm> comm) {
  gpumix_session* created = nullptr;
  guarded([&] {
    auto s = std::make_unique<gpumix_session>();
    s->comm = std::move(comm);
    if (s->comm) {
      std::string error;
      try {
        configure(*s, c);
      } catch (const std::exception& e) {
        error = dist::local_error_of(e);
      }
      const std::vector<int64_t> same =
          c ? std::vector<int64_t>{text_hash(c->model), c->vocab, c->seq, c->global_batch, c->total_steps,
                                   (int64_t)std::llround(c->lr * 1e9), (int64_t)c->seed, text_hash(c->devices),
                                   text_hash(c->plan), text_hash(c->out_dir), text_hash(c->dtype)}
            : std::vector<int64_t>{};
      s->comm->agree("gpumix_session_create_mpi: every rank's config (model, vocab, seq, global_batch, "
                     "total_steps, lr * 1e9, seed, devices, plan, out_dir, dtype; strings hashed)",
                     same, error);
    } else {
      configure(*s, c);
    }
    claim_run_folder(*s);
    created = s.release();
  });
  return created;
}

}  // namespace gpumix::capi

using gpumix::capi::guarded;

extern "C" {

void gpumix_config_default(gpumix_config* c) {
  *c = gpumix_config{};
  c->model = "gpt-nano";
  c->global_batch = 8;
  c->total_steps = 100;
  c->lr = 1e-3f;
  c->seed = 1337;
  c->out_dir = "gpumix-run";
}

gpumix_session* gpumix_session_create(const gpumix_config* c) {
  return gpumix::capi::create_session(c, nullptr);
}

void gpumix_session_destroy(gpumix_session* s) { delete s; }

int gpumix_train(gpumix_session* s, const int32_t* tokens, int64_t n_tokens, int32_t steps) {
  std::string stopped;  // why SIGTERM / SIGINT ended it early
  const int rc = guarded(s, [&] {
    GPUMIX_CHECK(s, "gpumix_train: session is NULL");
    gpumix::capi::on_every_rank(*s, "gpumix_train",
                                [&] { gpumix::capi::train_session(*s, tokens, n_tokens, steps, stopped); });
  });
  if (rc == 0 && !stopped.empty()) {
    gpumix::capi::last_error = stopped;
    return GPUMIX_STOPPED;
  }
  return rc;
}

void gpumix_request_stop(void) { gpumix::dist::request_stop(SIGTERM); }

int gpumix_get_metrics(const gpumix_session* s, gpumix_metrics* out) {
  return guarded([&] {
    GPUMIX_CHECK(s && out, "gpumix_get_metrics: session and out must not be NULL");
    *out = s->metrics;
  });
}

const char* gpumix_checkpoint(const gpumix_session* s) {
  return s && !s->checkpoint.empty() ? s->checkpoint.c_str() : nullptr;
}

int gpumix_load(gpumix_session* s, const char* dir) {
  return guarded(s, [&] {
    GPUMIX_CHECK(s, "gpumix_load: session is NULL");
    int64_t step = -1;
    gpumix::capi::on_every_rank(*s, "gpumix_load", [&] {
      GPUMIX_CHECK(dir, "gpumix_load: checkpoint_dir must not be NULL");
      const gpumix::CheckpointReader reader = gpumix::open_checkpoint(dir);
      step = reader.step();
      s->checkpoint = s->resume = reader.dir();
    });
    if (s->comm) s->comm->agree("gpumix_load: the checkpoint's step", {step});
    s->metrics.step = (int)step;
  });
}

int gpumix_get_model_info(gpumix_session* s, gpumix_model_info* out) {
  return guarded(s, [&] {
    GPUMIX_CHECK(s && out, "gpumix_get_model_info: session and out must not be NULL");
    const gpumix::GPTConfig& c = gpumix::capi::session_model(*s, "gpumix_get_model_info").config();
    *out = gpumix_model_info{c.V, c.T, c.L, c.NH, c.C, c.saved_params()};
  });
}

int gpumix_forward(gpumix_session* s, const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
                   float* out) {
  return guarded(s, [&] {
    GPUMIX_CHECK(s, "gpumix_forward: session is NULL");
    gpumix::capi::forward(*s, tokens, targets, batch, seq, out);
  });
}

int gpumix_evaluate(gpumix_session* s, const int32_t* tokens, int64_t n_tokens, double* mean_loss) {
  return guarded(s, [&] {
    GPUMIX_CHECK(s && tokens && mean_loss, "gpumix_evaluate: session, tokens and mean_loss must not be NULL");
    const gpumix::capi::OmpThreads threads(s->threads);
    const gpumix::GPT& model = gpumix::capi::session_model(*s, "gpumix_evaluate");
    GPUMIX_CHECK(n_tokens >= 1, "gpumix_evaluate: n_tokens must be >= 1, got ", n_tokens);
    gpumix::check_token_ids(tokens, n_tokens, model.config().V, "gpumix_evaluate: tokens");
    *mean_loss = gpumix::mean_loss(model, tokens, n_tokens);
  });
}

int gpumix_generate(gpumix_session* s, const int32_t* prompt, int64_t n_prompt, int32_t n_new, float temperature,
                    int32_t top_k, uint64_t seed, int32_t* out) {
  return guarded(s, [&] {
    GPUMIX_CHECK(s && prompt && (out || n_new == 0), "gpumix_generate: session, prompt and out must not be NULL");
    GPUMIX_CHECK(n_prompt >= 1, "gpumix_generate: n_prompt must be >= 1, got ", n_prompt);
    const gpumix::capi::OmpThreads threads(s->threads);
    const gpumix::GPT& model = gpumix::capi::session_model(*s, "gpumix_generate");
    std::vector<int32_t> ids(prompt, prompt + n_prompt);
    gpumix::SampleOptions o;
    o.tokens = n_new;
    o.temperature = temperature;
    o.top_k = top_k;
    o.seed = seed;
    gpumix::sample_tokens(model, ids, o);
    std::copy(ids.end() - n_new, ids.end(), out);
  });
}

int gpumix_generate_batch(gpumix_session* s, const int32_t* prompts, const int64_t* prompt_offsets,
                          const int64_t* prompt_lengths, int64_t n_seqs, int32_t n_new, float temperature,
                          int32_t top_k, float top_p, uint64_t seed, const int32_t* stop, int64_t n_stop,
                          int32_t* out, int32_t* out_lengths) {
  return guarded([&] {
    GPUMIX_CHECK_INPUT(s, "gpumix_generate_batch: session must not be NULL");
    GPUMIX_CHECK_INPUT(n_seqs >= 0, "gpumix_generate_batch: n_seqs must be >= 0, got ", n_seqs);
    GPUMIX_CHECK_INPUT(n_seqs == 0 || (prompts && prompt_offsets && prompt_lengths && out_lengths && (out || n_new == 0)),
                 "gpumix_generate_batch: prompts, prompt_offsets, prompt_lengths, out and out_lengths must not be "
                 "NULL (out may be NULL when n_new is 0)");
    GPUMIX_CHECK_INPUT(n_stop >= 0 && (stop || n_stop == 0), "gpumix_generate_batch: n_stop must be >= 0 with stop "
                 "not NULL when it is > 0, got n_stop ", n_stop);
    std::vector<std::vector<int32_t>> seqs((size_t)n_seqs);
    for (int64_t j = 0; j < n_seqs; ++j) {
      GPUMIX_CHECK_INPUT(prompt_lengths[j] >= 1 && prompt_offsets[j] >= 0, "gpumix_generate_batch: prompt ", j,
                   " has offset ", prompt_offsets[j], " and length ", prompt_lengths[j],
                   "; each prompt needs an offset >= 0 and a length >= 1");
      seqs[j].assign(prompts + prompt_offsets[j], prompts + prompt_offsets[j] + prompt_lengths[j]);
    }
    const gpumix::capi::OmpThreads threads(s->threads);
    const gpumix::GPT& model = gpumix::capi::session_model(*s, "gpumix_generate_batch");
    gpumix::SampleOptions o;
    o.tokens = n_new;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    o.stop.assign(stop, stop + n_stop);
    gpumix::sample_batch(model, seqs, o);
    for (int64_t j = 0; j < n_seqs; ++j) {
      const int64_t got = (int64_t)seqs[j].size() - prompt_lengths[j];
      out_lengths[j] = (int32_t)got;
      int32_t* row = out + j * (int64_t)n_new;
      std::copy(seqs[j].end() - got, seqs[j].end(), row);
      std::fill(row + got, row + n_new, -1);
    }
  });
}

const char* gpumix_last_error(void) { return gpumix::capi::last_error.c_str(); }

void gpumix_set_last_error(const char* message) { gpumix::capi::last_error = message ? message : ""; }

#ifndef GPUMIX_HAVE_MPI
gpumix_session* gpumix_session_create_mpi_fortran(const gpumix_config*, int32_t) {
  gpumix::capi::last_error = "gpumix_session_create_mpi: this GPUMix was built without MPI; rebuild it "
                             "with Open MPI installed (meson -Dmpi=enabled)";
  return nullptr;
}
#endif

}  // extern "C"
