/* An HPC code embedding GPUMix through its C API: it brings its own tokens (here the
 * bytes of a text file, vocabulary 256), describes two emulated devices, lets GPUMix
 * profile and plan them, trains in two calls, reads metrics, and continues from the
 * checkpoint in a second session.
 *
 *   cc train.c $(pkg-config --cflags --libs gpumix) -o train && ./train [text-file] */
#include <gpumix.h>
#include <stdio.h>
#include <stdlib.h>

static int32_t* read_bytes(const char* path, int64_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* bytes = malloc((size_t)size);
  int32_t* tokens = malloc(sizeof(int32_t) * (size_t)size);
  if (!bytes || !tokens || fread(bytes, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    return NULL;
  }
  fclose(f);
  for (long i = 0; i < size; ++i) tokens[i] = bytes[i];
  free(bytes);
  *n = size;
  return tokens;
}

#define CHECK(call)                                                   \
  do {                                                                \
    if ((call) != 0) {                                                \
      fprintf(stderr, "%s failed: %s\n", #call, gpumix_last_error()); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

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
  gpumix_metrics m;
  CHECK(gpumix_train(session, tokens, n, 10));
  CHECK(gpumix_get_metrics(session, &m));
  printf("after %d steps: loss %.4f, validation %.4f (unigram %.4f), %.0f tokens/s\n", m.step, m.loss,
         m.val_loss, m.unigram_loss, m.tokens_per_s);
  CHECK(gpumix_train(session, tokens, n, 10));
  CHECK(gpumix_get_metrics(session, &m));
  printf("after %d steps: loss %.4f, validation %.4f, checkpoint %s\n", m.step, m.loss, m.val_loss,
         gpumix_checkpoint(session));

  /* A bad call reports instead of crashing. */
  if (gpumix_train(session, tokens, n, 1) == 0) return 1;
  printf("expected error: %s\n", gpumix_last_error());

  gpumix_session_destroy(session);
  free(tokens);
  /* An untrained model predicts bytes at about ln 256 = 5.55 nats each. */
  if (!(m.loss < 4.5)) {
    fprintf(stderr, "the model did not learn: training loss %.4f after %d steps\n", m.loss, m.step);
    return 1;
  }
  return 0;
}
