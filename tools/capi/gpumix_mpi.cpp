// The MPI form of the C API (tools/capi/gpumix_mpi.h): a session over the ranks of the
// host's communicator, through the MPI backend's Comm on a duplicate of it.
#include "tools/capi/gpumix_mpi.h"

#include <mpi.h>

#include "dist/comm/comm_mpi.h"
#include "tools/capi/session.h"

extern "C" {

gpumix_session* gpumix_session_create_mpi(const gpumix_config* config, MPI_Comm comm) {
  std::unique_ptr<gpumix::dist::Comm> dup;
  if (gpumix::capi::guarded([&] {
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        GPUMIX_CHECK(initialized && !finalized, "gpumix_session_create_mpi: MPI is ",
                     finalized ? "already finalised" : "not initialised",
                     "; call it between the host's MPI_Init and MPI_Finalize");
        GPUMIX_CHECK(comm != MPI_COMM_NULL, "gpumix_session_create_mpi: comm is MPI_COMM_NULL");
        dup = gpumix::dist::make_mpi_comm(comm);
      }) != 0)
    return nullptr;
  return gpumix::capi::create_session(config, std::move(dup));
}

gpumix_session* gpumix_session_create_mpi_fortran(const gpumix_config* config, int32_t comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);  // MPI_Comm_f2c needs MPI; create_mpi says what is wrong
  return gpumix_session_create_mpi(config, initialized ? MPI_Comm_f2c((MPI_Fint)comm) : MPI_COMM_NULL);
}

}  // extern "C"
