// Checked CUDA, cuBLASLt and NCCL calls: on failure they throw gpumix::kernels::cuda::Error
// whose message carries file:line, the failing expression and the library's own words.
//
//   CUDA_CHECK(cudaMalloc(&p, bytes));
//   CUDA_CHECK_LAST();                    // after a kernel launch
//   CUBLAS_CHECK(cublasLtMatmul(...));
//   NCCL_CHECK(ncclAllReduce(...));       // only where nccl.h is available
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace gpumix::kernels::cuda {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_error(const char* lib, const char* expr, const char* file,
                                     int line, const std::string& what) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + lib + " call '" +
              expr + "' failed: " + what);
}

inline std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace gpumix::kernels::cuda

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t gpumix_err_ = (expr);                                               \
    if (gpumix_err_ != cudaSuccess)                                                       \
      ::gpumix::kernels::cuda::throw_error("CUDA", #expr, __FILE__, __LINE__,             \
                                           ::gpumix::kernels::cuda::cuda_error_text(      \
                                               gpumix_err_));                             \
  } while (0)

// After a kernel launch: reports launch-configuration errors (and earlier asynchronous
// errors) at the launch site.
#define CUDA_CHECK_LAST() CUDA_CHECK(cudaGetLastError())

// cuBLASLt: status name and string from the library itself.
#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define CUBLAS_CHECK(expr)                                                                \
  do {                                                                                    \
    const cublasStatus_t gpumix_st_ = (expr);                                             \
    if (gpumix_st_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::gpumix::kernels::cuda::throw_error(                                               \
          "cuBLASLt", #expr, __FILE__, __LINE__,                                          \
          std::string(cublasLtGetStatusName(gpumix_st_)) + " (" +                         \
              cublasLtGetStatusString(gpumix_st_) + ")");                                 \
  } while (0)
#endif

// NCCL: the result's string plus ncclGetLastError's detail.
#if __has_include(<nccl.h>)
#include <nccl.h>
#define NCCL_CHECK(expr)                                                                  \
  do {                                                                                    \
    const ncclResult_t gpumix_nr_ = (expr);                                               \
    if (gpumix_nr_ != ncclSuccess && gpumix_nr_ != ncclInProgress)                        \
      ::gpumix::kernels::cuda::throw_error(                                               \
          "NCCL", #expr, __FILE__, __LINE__,                                              \
          std::string(ncclGetErrorString(gpumix_nr_)) + " (" +                            \
              (ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "") + ")");        \
  } while (0)
#endif
