// The C API (tools/capi/gpumix.h) over dist::train_local: a session is a configuration
// and a run folder; each gpumix_train call resumes from the folder's latest checkpoint.
#include "tools/capi/gpumix.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>

#include "dist/engine/launch.h"

namespace fs = std::filesystem;

struct gpumix_session {
  gpumix::TrainOptions options;
  std::vector<gpumix::dist::ClusterDevice> devices;
  gpumix::dist::EngineOptions engine;
  int ranks = 1;
  int threads = 1;
  std::string resume;      // checkpoint to continue from ("" : none yet)
  std::string checkpoint;  // the newest one written
  gpumix_metrics metrics{};
};

namespace {

thread_local std::string last_error;

// Runs fn, turning exceptions into -1 and the thread's last error.
template <class F>
int guarded(F&& fn) {
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

}  // namespace

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
  gpumix_session* s = nullptr;
  guarded([&] {
    GPUMIX_CHECK(c, "gpumix_session_create: config is NULL (use gpumix_config_default)");
    auto session = std::make_unique<gpumix_session>();
    gpumix::TrainOptions& o = session->options;
    o.model = c->model ? c->model : "gpt-nano";
    const gpumix::GPTConfig preset = gpumix::gpt_preset(o.model);
    o.token_vocab = c->vocab > 0 ? c->vocab : preset.V;
    o.seq = c->seq;
    o.batch = c->global_batch;
    o.steps = c->total_steps;
    o.lr = c->lr;
    o.seed = c->seed;
    o.out = c->out_dir ? c->out_dir : "gpumix-run";
    o.eval_interval = 0;
    o.quiet = true;
    GPUMIX_CHECK(o.batch >= 1 && o.steps >= 1 && o.lr > 0, "gpumix_session_create: global_batch (",
                 o.batch, "), total_steps (", o.steps, ") and lr (", o.lr, ") must be positive");
    if (c->devices && *c->devices) {
      session->devices = gpumix::dist::parse_devices(c->devices);
      session->ranks = (int)session->devices.size();
    }
    const std::string plan = c->plan ? c->plan : (session->devices.empty() ? "even" : "auto");
    GPUMIX_CHECK(plan == "auto" || plan == "even" || plan == "proportional" || plan == "gpumix" ||
                     plan == "cephalo", "gpumix_session_create: unknown plan '", plan,
                 "'; use auto, even, proportional or cephalo");
    if (!(plan == "even" && session->devices.empty())) session->engine.planner = plan;
    session->threads = c->threads > 0 ? c->threads : (int)std::max(1u, std::thread::hardware_concurrency());
    GPUMIX_CHECK(!fs::exists(fs::path(o.out) / "log.jsonl"), "gpumix_session_create: ", o.out,
                 " already holds a run; choose another out_dir, or gpumix_load() one of its checkpoints "
                 "into a session with a new out_dir");
    s = session.release();
  });
  return s;
}

void gpumix_session_destroy(gpumix_session* s) { delete s; }

int gpumix_train(gpumix_session* s, const int32_t* tokens, int64_t n_tokens, int32_t steps) {
  return guarded([&] {
    GPUMIX_CHECK(s && tokens, "gpumix_train: session and tokens must not be NULL");
    GPUMIX_CHECK(steps >= 1, "gpumix_train: steps must be >= 1, got ", steps);
    gpumix::TrainOptions o = s->options;
    GPUMIX_CHECK(s->metrics.step < o.steps, "gpumix_train: the schedule's ", o.steps,
                 " steps are done; create a session with a larger total_steps to go on");
    o.token_data = tokens;
    o.token_count = n_tokens;
    o.resume = s->resume;
    const int target = std::min(o.steps, s->metrics.step + steps);
    // Train up to `target`: the loop runs to o.steps, so stop it there by saving and
    // ending at `target` with the full schedule length kept for the learning rate.
    o.stop_at = target;
    const std::vector<gpumix::dist::RankWork> work = gpumix::dist::even_work(o.batch, s->ranks);
    const gpumix::TrainResult r = gpumix::dist::train_local(o, s->ranks, s->devices, work, s->engine, s->threads);
    s->checkpoint = s->resume = r.checkpoint;
    s->metrics.step = r.step;
    s->metrics.loss = r.train_loss;
    s->metrics.val_loss = r.val_loss;
    s->metrics.unigram_loss = r.unigram_loss;
    s->metrics.tokens_per_s = r.tokens_per_s;
  });
}

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
  return guarded([&] {
    GPUMIX_CHECK(s && dir, "gpumix_load: session and checkpoint_dir must not be NULL");
    const gpumix::CheckpointReader reader = gpumix::open_checkpoint(dir);
    s->resume = reader.dir();
    s->metrics.step = (int)reader.step();
  });
}

const char* gpumix_last_error(void) { return last_error.c_str(); }

}  // extern "C"
