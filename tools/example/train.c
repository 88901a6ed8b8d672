/* An HPC code embedding GPUMix through its C API: it brings its own tokens (here the
 * bytes of a text file, vocabulary 256), describes two emulated devices, lets GPUMix
 * profile and plan them, trains in two calls, reads metrics, then uses the model: the
 * mean loss, a forward pass, sampling, and the same model again in a session that only
 * loads the checkpoint.
 *
 *   cc train.c $(pkg-config --cflags --libs gpumix) -lm -o train && ./train [text-file [out-dir]]
 *
 * Prints "generated: ID ..." (the ids sampled after the prompt: the first 8 tokens, 16 new
 * ids at temperature 0.8, top-k 20, seed 7) and "checkpoint: DIR", for tools/example/
 * run_example.sh to compare with `gpumix generate --prompt-ids`. */
#include <float.h>
#include <gpumix.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "read_bytes.h"

#define CHECK(call)                                                   \
  do {                                                                \
    if ((call) != 0) {                                                \
      fprintf(stderr, "%s failed: %s\n", #call, gpumix_last_error()); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

enum { PROMPT = 8, NEW = 16, ROWS = 2 };

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "/usr/share/common-licenses/GPL-3";
  const char* out = argc > 2 ? argv[2] : "gpumix-c-example";
  int64_t n = 0;
  int32_t* tokens = read_bytes(path, &n);
  if (!tokens) {
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }

  gpumix_config config;
  gpumix_config_default(&config);
  config.model = "gpt-nano";
  config.vocab = 256;
  config.seq = 64;
  config.global_batch = 8;
  config.total_steps = 20;
  config.lr = 3e-3f;
  config.devices = "cpu:mem=1GiB,cpu:mem=256MiB:slow=2";
  config.out_dir = out;

  gpumix_session* session = gpumix_session_create(&config);
  if (!session) {
    fprintf(stderr, "gpumix_session_create: %s\n", gpumix_last_error());
    return 1;
  }
  /* One run per folder: a second session on it is refused while this one lives. */
  if (gpumix_session_create(&config) != NULL) return 1;
  printf("expected error: %s\n", gpumix_last_error());

  gpumix_metrics m;
  CHECK(gpumix_train(session, tokens, n, 10));
  CHECK(gpumix_get_metrics(session, &m));
  printf("after %d steps: loss %.4f, validation %.4f (unigram %.4f), %.0f tokens/s\n", m.step, m.loss,
         m.val_loss, m.unigram_loss, m.tokens_per_s);
  CHECK(gpumix_train(session, tokens, n, 10));
  CHECK(gpumix_get_metrics(session, &m));
  printf("after %d steps: loss %.4f, validation %.4f\n", m.step, m.loss, m.val_loss);
  printf("checkpoint: %s\n", gpumix_checkpoint(session));

  /* A bad call reports instead of crashing. */
  if (gpumix_train(session, tokens, n, 1) == 0) return 1;
  printf("expected error: %s\n", gpumix_last_error());
  /* An untrained model predicts bytes at about ln 256 = 5.55 nats each. */
  if (!(m.loss < 4.5)) {
    fprintf(stderr, "the model did not learn: training loss %.4f after %d steps\n", m.loss, m.step);
    return 1;
  }

  /* The model: its shape, its mean loss over the first ROWS windows, and a forward pass
   * over the same windows that gives logits and per-token losses. */
  gpumix_model_info info;
  CHECK(gpumix_get_model_info(session, &info));
  const int64_t T = info.context, V = info.vocab;
  double mean = 0;
  CHECK(gpumix_evaluate(session, tokens, ROWS * T + 1, &mean));
  float* logits = malloc(sizeof(float) * ROWS * T * V);
  float* losses = malloc(sizeof(float) * ROWS * T);
  if (!logits || !losses) return 1;
  CHECK(gpumix_forward(session, tokens, NULL, ROWS, T, logits));       /* (ROWS, T, V) */
  CHECK(gpumix_forward(session, tokens, tokens + 1, ROWS, T, losses));  /* (ROWS, T) */
  /* Each loss is log-sum-exp of its logits minus the target's: fp32 sums of V terms, so
   * they agree within V * FLT_EPSILON * (1 + |loss|); their mean is evaluate's. */
  double sum = 0;
  for (int64_t i = 0; i < ROWS * T; ++i) {
    const float* row = logits + i * V;
    double top = row[0], z = 0;
    for (int64_t v = 1; v < V; ++v) top = row[v] > top ? row[v] : top;
    for (int64_t v = 0; v < V; ++v) z += exp(row[v] - top);
    const double loss = top + log(z) - row[tokens[i + 1]];
    if (fabs(loss - losses[i]) > V * FLT_EPSILON * (1 + fabs(loss))) {
      fprintf(stderr, "position %lld: forward's loss %.6f but its logits give %.6f\n", (long long)i, losses[i], loss);
      return 1;
    }
    sum += losses[i];
  }
  if (fabs(sum / (ROWS * T) - mean) > V * FLT_EPSILON * (1 + mean)) {
    fprintf(stderr, "evaluate's mean loss %.6f but forward's losses average %.6f\n", mean, sum / (ROWS * T));
    return 1;
  }
  printf("mean loss over %d windows: %.4f (forward agrees)\n", ROWS, mean);

  int32_t ids[NEW];
  CHECK(gpumix_generate(session, tokens, PROMPT, NEW, 0.8f, 20, 7, ids));
  printf("generated:");
  for (int i = 0; i < NEW; ++i) printf(" %d", ids[i]);
  printf("\n");
  char checkpoint[4096];
  snprintf(checkpoint, sizeof checkpoint, "%s", gpumix_checkpoint(session));
  gpumix_session_destroy(session);

  /* A session without a run folder uses a checkpoint's model and cannot train. */
  config.out_dir = NULL;
  config.devices = NULL;
  gpumix_session* reader = gpumix_session_create(&config);
  if (!reader) {
    fprintf(stderr, "gpumix_session_create: %s\n", gpumix_last_error());
    return 1;
  }
  CHECK(gpumix_load(reader, checkpoint));
  int32_t again[NEW];
  CHECK(gpumix_generate(reader, tokens, PROMPT, NEW, 0.8f, 20, 7, again));
  if (memcmp(ids, again, sizeof ids) != 0) {
    fprintf(stderr, "the loaded checkpoint sampled other ids for the same seed\n");
    return 1;
  }
  gpumix_session_destroy(reader);
  free(logits);
  free(losses);
  free(tokens);
  return 0;
}
