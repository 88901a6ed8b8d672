// The C API's session (internal: shared by gpumix.cpp and the MPI form, gpumix_mpi.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "dist/engine/launch.h"
#include "nn/gpt.h"
#include "nn/run_lock.h"
#include "nn/train_options.h"
#include "tools/capi/gpumix.h"

struct gpumix_session {
  // What each gpumix_train runs (dist/engine/launch.h); launch.options.out "": no run folder.
  gpumix::dist::Launch launch;
  int threads = 0;  // of forward / evaluate / generate on the caller's thread (0: leave OpenMP's setting)
  // The MPI form: a duplicate of the host's communicator; the ranks train together.
  std::unique_ptr<gpumix::dist::Comm> comm;
  gpumix::RunLock lock;    // of the run folder (on rank 0 in the MPI form)
  std::string resume;      // checkpoint to continue from ("" : none yet)
  std::string checkpoint;  // the newest one written or loaded
  gpumix_metrics metrics{};
  // The model that forward / evaluate / generate use: `checkpoint`'s, read on first use.
  std::unique_ptr<gpumix::GPT> model;
  std::string model_dir;
  // Where the session's log lines go (the config's log_*): installed for each call.
  std::shared_ptr<gpumix::Logger> logger;
};

namespace gpumix::capi {

// Runs fn, turning exceptions into -1 and the thread's last error.
int guarded(const std::function<void()>& fn);
// guarded() with the session's logger and rank installed (a NULL session: fn's own check).
int guarded(const gpumix_session* s, const std::function<void()>& fn);

// A session of `config` (NULL comm: thread ranks; else the communicator's ranks). In the MPI
// form every rank gets the same outcome.
gpumix_session* create_session(const gpumix_config* config, std::unique_ptr<dist::Comm> comm);

}  // namespace gpumix::capi
