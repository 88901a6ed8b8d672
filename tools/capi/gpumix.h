/* GPUMix C API: build a GPT from a preset, describe the devices, plan, train on token
 * buffers supplied by the caller, read metrics, save and load checkpoints. For HPC codes
 * that embed training without Python or C++. Opaque handles; sized integers; every call
 * that can fail returns 0 on success and -1 on failure, with gpumix_last_error() saying
 * what went wrong and how to fix it (per thread). Link with `pkg-config --libs gpumix`. */
#ifndef GPUMIX_H
#define GPUMIX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumix_session gpumix_session;

typedef struct gpumix_config {
  const char* model;      /* preset: "gpt-nano", "gpt-mini", "gpt2", ... */
  int32_t vocab;          /* vocabulary of the caller's tokens (0: the preset's) */
  int32_t seq;            /* sequence length (0: the preset's context) */
  int64_t global_batch;   /* sequences per step, over all ranks */
  int32_t total_steps;    /* length of the learning-rate schedule */
  float lr;               /* peak learning rate (warmup, then cosine to lr / 10) */
  uint64_t seed;
  const char* devices;    /* one device per rank, e.g. "cpu:mem=2GiB,cpu:mem=512MiB:slow=3";
                             NULL: one rank on this machine's CPU */
  const char* plan;       /* "auto" (profile + plan), "even", "proportional"; NULL: auto with
                             devices, even without */
  const char* out_dir;    /* run folder: checkpoints and log.jsonl */
  int32_t threads;        /* CPU threads in all (0: all cores) */
  const char* dtype;      /* compute dtype: "bf16", "fp32" (or "f32"); NULL: the checkpoint's
                             when continuing one (gpumix_load), else bf16 where every device
                             computes it natively (avx512_bf16, AMX), fp32 elsewhere */
} gpumix_config;

typedef struct gpumix_metrics {
  int32_t step;           /* steps completed */
  double loss;            /* training loss of the last step (nats/token) */
  double val_loss;        /* validation loss at the last evaluation */
  double unigram_loss;    /* the unigram baseline on the same validation tokens */
  double tokens_per_s;    /* median over the last gpumix_train call */
} gpumix_metrics;

/* Fills a config with defaults (gpt-nano, batch 8, 100 steps, lr 1e-3, out "gpumix-run"). */
void gpumix_config_default(gpumix_config* config);

/* Checks the config and the devices; NULL on error. */
gpumix_session* gpumix_session_create(const gpumix_config* config);
void gpumix_session_destroy(gpumix_session* session);

/* Trains `steps` more steps (up to total_steps) on the caller's tokens: n_tokens int32
 * ids, all below the vocabulary; the last 5% serve as validation. The run folder keeps a
 * checkpoint after each call, and the next call continues from it exactly. */
int gpumix_train(gpumix_session* session, const int32_t* tokens, int64_t n_tokens, int32_t steps);

int gpumix_get_metrics(const gpumix_session* session, gpumix_metrics* out);

/* The newest checkpoint folder of the run (NULL before the first gpumix_train). */
const char* gpumix_checkpoint(const gpumix_session* session);

/* Continue from a checkpoint folder (written by this or another run of the same model,
 * on any number of ranks): the next gpumix_train starts from it. */
int gpumix_load(gpumix_session* session, const char* checkpoint_dir);

/* The last error on this thread ("" when none). */
const char* gpumix_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUMIX_H */
