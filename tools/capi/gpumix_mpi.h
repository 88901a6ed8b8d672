/* GPUMix C API inside an MPI program (installed when GPUMix is built with MPI; gpumix.h
 * stays MPI-free). The host initialises MPI (MPI_Init, or MPI_Init_thread with at least
 * MPI_THREAD_FUNNELED) and finalises it; GPUMix never calls MPI_Init or MPI_Finalize. Only
 * the thread that created a session may call it.
 *
 * gpumix_session_create_mpi(config, comm): the ranks of `comm` (MPI_COMM_WORLD or any
 * sub-communicator, e.g. from MPI_Comm_split) train ONE model together, data-parallel with
 * uneven batches and shares as `devices` / `plan` say (devices: one per rank of comm, in
 * rank order). GPUMix works on its own duplicate of comm (MPI_Comm_dup), so its messages
 * never mix with the host's. Every rank passes the same config (checked: a difference is an
 * error on every rank). Rank 0 of comm holds the run folder's lock and writes the log; every
 * rank writes its slices of each checkpoint, so out_dir must be one folder that all ranks
 * see (a shared file system).
 *
 * Tokens: gpumix_train trains on RANK 0's tokens, broadcast to the other ranks at each call
 * (their tokens and n_tokens are ignored: pass NULL, 0), so every rank sees the same data and
 * the run is the one `mpirun gpumix train` makes from the same tokens and plan.
 *
 * What each call costs:
 *   collective (every rank of comm calls it, in the same order; it synchronises them):
 *     gpumix_session_create_mpi  MPI_Comm_dup, a check that the configs agree, the lock
 *                                (and the profiling of the devices at the first train when
 *                                plan is "auto" or a planner)
 *     gpumix_train               the tokens' broadcast, then per step every block's
 *                                all-gather and reduce-scatter, and a checkpoint at the end
 *     gpumix_load                a check that all ranks read the same checkpoint step
 *     gpumix_session_destroy     MPI_Comm_free of the duplicate
 *   local (no communication; any rank, any time, in any number):
 *     gpumix_forward, gpumix_evaluate, gpumix_generate, gpumix_generate_batch,
 *     gpumix_get_model_info: each rank
 *       reads the newest checkpoint's full model once (host memory: 4 bytes per parameter)
 *       and computes on its own CPU threads;
 *     gpumix_get_metrics, gpumix_checkpoint, gpumix_last_error.
 *
 * Errors: a collective call fails on every rank alike, each returning -1 (NULL) with the
 * same message naming the rank, whether one rank or all of them found the problem: a rank's
 * error meets its peers at their next collective, which then fails too. Only a rank that
 * dies (or MPI itself failing) ends the job, as under `mpirun gpumix train`. */
#ifndef GPUMIX_MPI_H
#define GPUMIX_MPI_H

#include <mpi.h>

#include "gpumix.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over comm; NULL (on every rank) on error. */
gpumix_session* gpumix_session_create_mpi(const gpumix_config* config, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif /* GPUMIX_MPI_H */
