// Stopping a run cleanly when its job is told to end: SIGTERM (Slurm at the time limit or
// with --signal, a preemption, `mpirun` forwarding its own) or SIGINT (Ctrl-C). The first
// signal asks every rank to stop after the step in flight: they agree on it at the step's
// end (one max-reduction of the signal number), write a checkpoint of that step, log why,
// and return; `gpumix train` then exits with 128 + the signal's number (143, 130), as a
// program killed by it would. A second signal stops at once (the default action).
#pragma once

namespace gpumix::dist {

// Catches SIGTERM and SIGINT for its lifetime (the training calls), restoring what was
// there before. A signal the host program already handles is left to it: such a host can
// call request_stop() from its own handler (as the C API's gpumix_request_stop does).
class StopOnSignals {
 public:
  // `announce`: this rank says on stderr that it got the signal (rank 0; the other ranks of
  // a process-per-rank job keep quiet, so the job says it once).
  explicit StopOnSignals(bool announce);
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;
};

// Whether the signal handler itself says on stderr that it got the first signal (off by
// default: the library prints nothing unless asked; `gpumix train` turns it on).
void announce_stop_signals(bool on);

// Asks the running training to stop after its step in flight, as a signal `signo` does
// (async-signal-safe). The first request is kept.
void request_stop(int signo);

// The first stop request's signal number, or 0 when none is pending.
int stop_requested();

// Clears a request once a training has acted on it, so that the next training runs.
void clear_stop_request();

// "SIGTERM", "SIGINT", else "a stop request".
const char* signal_name(int signo);

}  // namespace gpumix::dist
