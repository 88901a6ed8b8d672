// The MPI backend over a communicator of the caller's (an MPI program that embeds GPUMix:
// the C API's gpumix_session_create_mpi). Includes <mpi.h>, so comm.h does not.
#pragma once

#include <mpi.h>

#include <memory>

#include "dist/comm/comm.h"

namespace gpumix::dist {

// A Comm over the ranks of `base` (MPI_COMM_WORLD or any sub-communicator), on its own
// duplicate (MPI_Comm_dup: GPUMix's messages never meet the caller's) with
// MPI_ERRORS_RETURN. Collective over base; MPI must be initialised, by the caller or an
// MpiSession. Freed (MPI_Comm_free) with the Comm unless MPI is finalised by then.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm base, const MpiOptions& options = {});

}  // namespace gpumix::dist
