/* An MPI program training GPUMix models inside its own job: the host initialises MPI,
 * splits MPI_COMM_WORLD into groups of `ranks_per_model` ranks (MPI_Comm_split; the last
 * group may be smaller), and each
 * group trains one model together through gpumix_session_create_mpi on its own
 * sub-communicator, on rank 0's tokens (the bytes of a text file, vocabulary 256), with
 * GPUMix's even plan or a plan file. Every rank then samples from the model (a local call).
 *
 *   mpicc train_mpi.c $(pkg-config --cflags --libs gpumix) -o train_mpi
 *   mpirun -np 3 ./train_mpi TEXT OUT [ranks_per_model [plan.json]]
 *
 * Model k trains in OUT/model-k. Prints, on the group's rank 0, "model K (N ranks): step S
 * loss L" after each gpumix_train call, and on every rank "model K rank R generated: ID ..."
 * (8 prompt tokens, 16 new ids at temperature 0.8, top-k 20, seed 7). First it shows what
 * happens without the communicator: ranks that each create a plain session on one folder
 * are refused, all but one, with the holder's pid. */
#include <gpumix_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "read_bytes.h"

enum { PROMPT = 8, NEW = 16, STEPS = 6 };

/* Every rank of the failed call returns the same error; stop the job alike. */
static int fail(const char* call) {
  fprintf(stderr, "%s failed: %s\n", call, gpumix_last_error());
  MPI_Finalize();
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (argc < 3) {
    if (world_rank == 0) fprintf(stderr, "usage: %s TEXT OUT [ranks_per_model [plan.json]]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const int per_model = argc > 3 ? atoi(argv[3]) : world_size;
  if (per_model < 1) {
    if (world_rank == 0) fprintf(stderr, "ranks_per_model must be at least 1, got %d\n", per_model);
    MPI_Finalize();
    return 2;
  }

  gpumix_config config;
  gpumix_config_default(&config);
  config.model = "gpt-nano";
  config.vocab = 256;
  config.seq = 64;
  config.global_batch = 8;
  config.total_steps = STEPS;
  config.lr = 3e-3f;
  config.threads = 1;

  /* Without a communicator every rank would be a run of its own: on one folder, all but
   * one are refused at once. */
  char folder[4096];
  snprintf(folder, sizeof folder, "%s/shared-without-comm", argv[2]);
  config.out_dir = folder;
  gpumix_session* alone = gpumix_session_create(&config);
  int created = alone != NULL, total = 0;
  MPI_Allreduce(&created, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (!alone) printf("rank %d expected error: %s\n", world_rank, gpumix_last_error());
  if (total != 1) {
    if (world_rank == 0) fprintf(stderr, "%d plain sessions shared %s; expected exactly 1\n", total, folder);
    MPI_Finalize();
    return 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);  /* the holder lives until every rank has tried */
  gpumix_session_destroy(alone);

  /* One model per group of ranks, on its own sub-communicator. */
  const int model = world_rank / per_model;
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, model, world_rank, &comm);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  char out[4096];
  snprintf(out, sizeof out, "%s/model-%d", argv[2], model);
  config.out_dir = out;
  config.plan = argc > 4 ? argv[4] : NULL;

  /* Rank 0 brings the tokens; the others receive them from GPUMix. */
  int64_t n = 0;
  int32_t* tokens = NULL;
  if (rank == 0 && !(tokens = read_bytes(argv[1], &n))) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  gpumix_session* session = gpumix_session_create_mpi(&config, comm);
  if (!session) return fail("gpumix_session_create_mpi");
  /* A call that only some ranks get wrong fails on all of them alike (none waits). */
  if (gpumix_train(session, tokens, n, rank == ranks - 1 ? 0 : 1) == 0) return 1;
  if (rank == 0) printf("model %d expected error: %s\n", model, gpumix_last_error());
  gpumix_metrics m;
  for (int call = 0; call < 2; ++call) {
    if (gpumix_train(session, tokens, n, STEPS / 2) != 0) return fail("gpumix_train");
    gpumix_get_metrics(session, &m);
    if (rank == 0) printf("model %d (%d ranks): step %d loss %.6f\n", model, ranks, m.step, m.loss);
  }
  /* Sampling is local: every rank has the whole model from the checkpoint. */
  int32_t prompt[PROMPT];
  for (int i = 0; i < PROMPT; ++i) prompt[i] = "Licenses"[i];
  int32_t ids[NEW];
  if (gpumix_generate(session, prompt, PROMPT, NEW, 0.8f, 20, 7, ids) != 0) return fail("gpumix_generate");
  printf("model %d rank %d generated:", model, rank);
  for (int i = 0; i < NEW; ++i) printf(" %d", ids[i]);
  printf("\n");
  if (rank == 0) printf("model %d checkpoint: %s\n", model, gpumix_checkpoint(session));

  gpumix_session_destroy(session);
  MPI_Comm_free(&comm);
  free(tokens);
  MPI_Finalize();
  return 0;
}
