/* GPUMix C API: build a GPT from a preset, describe the devices, plan, train on token
 * buffers supplied by the caller, read metrics, save and load checkpoints, and use the
 * model: logits, per-token losses, mean loss, sampling. For HPC codes that embed training
 * without Python or C++. Opaque handles; sized integers; every call that can fail returns
 * 0 on success and -1 on failure (a create returns NULL), with gpumix_last_error() saying
 * what went wrong and how to fix it (per thread). Link with `pkg-config --libs gpumix`.
 *
 * A session is one run: it holds its run folder (out_dir) locked from create to destroy,
 * so a second session or `gpumix train` on the same folder is refused with the holder's
 * pid and host. The ranks of a session are threads of this process (gpumix_session_create,
 * one per device) or the ranks of an MPI communicator (gpumix_session_create_mpi in
 * gpumix_mpi.h, which says what each call costs there). Arrays are row-major. */
#ifndef GPUMIX_H
#define GPUMIX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumix_session gpumix_session;

/* Log levels: a session logs the lines at or below its log_level (quiet: none). */
enum {
  GPUMIX_LOG_QUIET = 0, /* nothing (the default) */
  GPUMIX_LOG_ERROR = 1,
  GPUMIX_LOG_WARN = 2,  /* a plan that does not fit its memory model, a skipped step */
  GPUMIX_LOG_INFO = 3,  /* the settings table, one line per step, the final validation */
  GPUMIX_LOG_DEBUG = 4  /* and each rank's own work (device, batch, share) */
};

/* Receives each log line, without its newline, on the thread that made the call logging it
 * (one of a session's thread ranks, or the caller's); `line` lives for the call only. */
typedef void (*gpumix_log_fn)(int level, const char* line, void* user);

typedef struct gpumix_config {
  const char* model;      /* preset: "gpt-nano", "gpt-mini", "gpt2", ... */
  int32_t vocab;          /* vocabulary of the caller's tokens (0: the preset's) */
  int32_t seq;            /* sequence length (0: the preset's context) */
  int64_t global_batch;   /* sequences per step, over all ranks */
  int32_t total_steps;    /* length of the learning-rate schedule */
  float lr;               /* peak learning rate (warmup, then cosine to lr / 10) */
  uint64_t seed;
  const char* devices;    /* one device per rank, e.g. "cpu:mem=2GiB,cpu:mem=512MiB:slow=3";
                             NULL: one rank on this machine's CPU (MPI form: cpu on every rank) */
  const char* plan;       /* "auto" (profile + plan), "even", "proportional", "cephalo", or a
                             plan file from `gpumix plan --out`; NULL: auto with devices, even
                             without */
  const char* out_dir;    /* run folder: checkpoints and log.jsonl; NULL: none (a session
                             that only uses a model from gpumix_load, and cannot train) */
  int32_t threads;        /* CPU threads in all (MPI form: of each rank); 0: all cores (MPI
                             form: this node's cores over this node's ranks) */
  const char* dtype;      /* compute dtype: "bf16", "fp32" (or "f32"); NULL: a plan file's,
                             else the checkpoint's when continuing one (gpumix_load), else
                             bf16 where every device computes it natively (avx512_bf16, AMX),
                             fp32 elsewhere */
  /* The library prints nothing to stdout or stderr; its lines go where these say. Errors
   * stay in return codes and gpumix_last_error(). */
  int32_t log_level;          /* GPUMIX_LOG_QUIET (default) .. GPUMIX_LOG_DEBUG */
  gpumix_log_fn log_callback; /* each line (NULL: none) */
  void* log_user;             /* passed to log_callback */
  const char* log_file;       /* lines appended to this file (NULL: none) */
  int32_t log_all_ranks;      /* MPI form: 0: rank 0's lines only (errors: every rank's);
                                 1: every rank's, prefixed "[rank N] " */
} gpumix_config;

typedef struct gpumix_metrics {
  int32_t step;           /* steps completed */
  double loss;            /* training loss of the last step (nats/token) */
  double val_loss;        /* validation loss at the last evaluation */
  double unigram_loss;    /* the unigram baseline on the same validation tokens */
  double tokens_per_s;    /* median over the last gpumix_train call */
} gpumix_metrics;

typedef struct gpumix_model_info {
  int32_t vocab;          /* V: token ids are 0 .. V-1 */
  int32_t context;        /* T: the longest sequence a forward pass takes */
  int32_t layers;
  int32_t heads;
  int32_t channels;
  int64_t params;         /* parameters in all */
} gpumix_model_info;

/* Fills a config with defaults (gpt-nano, batch 8, 100 steps, lr 1e-3, out "gpumix-run"). */
void gpumix_config_default(gpumix_config* config);

/* Checks the config and the devices and locks out_dir; NULL on error. */
gpumix_session* gpumix_session_create(const gpumix_config* config);
/* Releases the session and its run folder's lock. NULL is ignored. */
void gpumix_session_destroy(gpumix_session* session);

/* Trains `steps` more steps (up to total_steps) on the caller's tokens: n_tokens int32
 * ids, all below the vocabulary; the last 5% serve as validation. The run folder keeps a
 * checkpoint after each call, and the next call continues from it exactly. */
int gpumix_train(gpumix_session* session, const int32_t* tokens, int64_t n_tokens, int32_t steps);

/* gpumix_train's return when SIGTERM or SIGINT (or gpumix_request_stop) ended it early: every
 * rank stopped after the same step and checkpointed it (gpumix_get_metrics: its step);
 * gpumix_last_error says which signal and where. The next gpumix_train continues from
 * there. gpumix_train catches SIGTERM and SIGINT only while it runs and only where the host
 * has no handler of its own; a second signal then stops the process at once. */
#define GPUMIX_STOPPED (-2)

/* Asks a gpumix_train in progress (on any thread) to stop after its step in flight, as
 * SIGTERM does; async-signal-safe, for a host that handles SIGTERM itself. */
void gpumix_request_stop(void);

int gpumix_get_metrics(const gpumix_session* session, gpumix_metrics* out);

/* The newest checkpoint folder of the run (NULL before the first gpumix_train or gpumix_load). */
const char* gpumix_checkpoint(const gpumix_session* session);

/* Continue from a checkpoint folder, or the latest checkpoint of a run folder (written by
 * this or another run of the same model, on any number of ranks): the next gpumix_train
 * starts from it, and the calls below use its model. */
int gpumix_load(gpumix_session* session, const char* checkpoint_dir);

/* The shape of the session's model: that of its newest checkpoint (the calls below use
 * that model, read once per new checkpoint, on this process's CPU). */
int gpumix_get_model_info(gpumix_session* session, gpumix_model_info* out);

/* One forward pass over a batch: tokens (batch, seq) ids, 1 <= seq <= context. With
 * targets NULL, `out` receives the logits, (batch, seq, vocab) floats; with targets
 * (batch, seq) ids (-1: none), `out` receives each position's cross-entropy in nats,
 * (batch, seq) floats (0 where the target is -1). */
int gpumix_forward(gpumix_session* session, const int32_t* tokens, const int32_t* targets, int64_t batch,
                   int64_t seq, float* out);

/* The mean per-token loss (nats) over n_tokens >= context + 1 ids, read as consecutive
 * windows of `context` tokens each predicting the next one, as training's validation reads
 * its split. */
int gpumix_evaluate(gpumix_session* session, const int32_t* tokens, int64_t n_tokens, double* mean_loss);

/* Continues a prompt (n_prompt >= 1 ids; the last `context` are seen) by n_new ids, written
 * to out: each sampled among the top_k most likely (0: all) at `temperature` (0: greedy),
 * from the uniform philox(seed, "generate", i). The same ids as `gpumix generate --ckpt
 * <the checkpoint> --prompt-ids ... --tokens n_new --temperature ... --top-k ... --seed
 * ...` prints after the prompt's. */
int gpumix_generate(gpumix_session* session, const int32_t* prompt, int64_t n_prompt, int32_t n_new,
                    float temperature, int32_t top_k, uint64_t seed, int32_t* out);

/* Continues n_seqs prompts at once, each with its own key/value cache (nn/infer.h). Prompt j
 * is prompts[prompt_offsets[j] .. prompt_offsets[j] + prompt_lengths[j]) (>= 1 ids each;
 * the last `context` are seen). Each gets up to n_new ids, sampled as gpumix_generate does
 * (top_k, temperature) and then cut to the top_p nucleus (the fewest most likely ids whose
 * probabilities sum to >= top_p; 1: no cut), and ends early after sampling one of
 * stop[0 .. n_stop) (that id is kept; stop may be NULL when n_stop is 0; pass the
 * tokenizer's <|endoftext|> id here to stop at it). Row j of out (n_seqs x n_new ids, row
 * j at j * n_new) receives sequence j's new ids, -1 after its end; out_lengths[j] how many.
 * Sequence j draws its own stream, philox(rng_key(seed, "generate", j), i), so its ids
 * depend neither on n_seqs nor on the other prompts; sequence 0 with top_p 1 and no stop ids
 * is gpumix_generate's. */
int gpumix_generate_batch(gpumix_session* session, const int32_t* prompts, const int64_t* prompt_offsets,
                          const int64_t* prompt_lengths, int64_t n_seqs, int32_t n_new, float temperature,
                          int32_t top_k, float top_p, uint64_t seed, const int32_t* stop, int64_t n_stop,
                          int32_t* out, int32_t* out_lengths);

/* The last error on this thread ("" when none). */
const char* gpumix_last_error(void);

/* For language bindings (gpumix.f90): makes `message` this thread's last error, for the
 * checks a binding does itself (array shapes). */
void gpumix_set_last_error(const char* message);

/* The MPI form for Fortran and other languages without MPI_Comm (gpumix_mpi.h has the C
 * form): `comm` is a Fortran handle (MPI_Fint: MPI_COMM_WORLD of `use mpi`, or comm%MPI_VAL
 * of `use mpi_f08`), converted with MPI_Comm_f2c. NULL with an error when this library was
 * built without MPI. */
gpumix_session* gpumix_session_create_mpi_fortran(const gpumix_config* config, int32_t comm);

#ifdef __cplusplus
}
#endif

#endif /* GPUMIX_H */
