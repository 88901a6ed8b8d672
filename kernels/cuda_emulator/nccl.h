// The emulated NCCL (kernels/cuda_emulator/nccl.cpp): the calls GPUMix makes
// (dist/comm/comm_nccl.cpp), over MPI, on emulated device buffers, as stream work.
//
// Provided: ncclUniqueId, ncclComm_t, ncclResult_t (ncclSuccess ... ncclInProgress),
// ncclDataType_t (ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64,
// ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16; reductions: ncclFloat32,
// ncclBfloat16, ncclInt32), ncclRedOp_t (ncclSum; the others refused), ncclGetUniqueId,
// ncclCommInitRank, ncclCommDestroy, ncclCommAbort, ncclCommGetAsyncError,
// ncclGetLastError, ncclGetErrorString, ncclAllGather, ncclReduceScatter, ncclAllReduce,
// ncclBroadcast, ncclReduce, ncclGroupStart, ncclGroupEnd.
//
// A communicator spans all of MPI_COMM_WORLD (nranks == the world's size; a subset is
// refused) or one rank without MPI (nranks == 1). MPI must run at MPI_THREAD_MULTIPLE:
// the collectives call MPI from the stream's worker thread.
#pragma once

#include <cstddef>

#include "driver_types.h"

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
const char* ncclGetLastError(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

}  // extern "C"
