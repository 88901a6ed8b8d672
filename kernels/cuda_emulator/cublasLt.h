// The emulated cuBLASLt (kernels/cuda_emulator/cublaslt.cpp): the one matmul path GPUMix
// uses (kernels/cuda/matmul.cu), computed by a plain reference with fp32 accumulation,
// following NVIDIA's cuBLAS documentation, "Using the cuBLASLt API" (cublasLtMatmul(),
// cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t,
// cublasLtMatmulPreferenceAttributes_t, cublasLtMatmulAlgoGetHeuristic()).
//
// Provided: cublasStatus_t (CUBLAS_STATUS_*), cublasOperation_t (CUBLAS_OP_N, CUBLAS_OP_T),
// cublasComputeType_t (CUBLAS_COMPUTE_32F), cublasLtHandle_t, cublasLtCreate,
// cublasLtDestroy, cublasLtGetStatusName, cublasLtGetStatusString,
// cublasLtMatmulDesc_t + cublasLtMatmulDescCreate / Destroy / SetAttribute
//   (CUBLASLT_MATMUL_DESC_TRANSA, TRANSB, EPILOGUE = CUBLASLT_EPILOGUE_DEFAULT, BIAS,
//   GELU_AUX_BIAS, DGELU, DGELU_BGRAD or BGRADB, BIAS_POINTER, BIAS_DATA_TYPE,
//   EPILOGUE_AUX_POINTER, EPILOGUE_AUX_LD, EPILOGUE_AUX_DATA_TYPE),
// cublasLtMatrixLayout_t + cublasLtMatrixLayoutCreate / Destroy / SetAttribute
//   (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, STRIDED_BATCH_OFFSET; column-major order only),
// cublasLtMatmulPreference_t + cublasLtMatmulPreferenceCreate / Destroy / SetAttribute
//   (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, MIN_ALIGNMENT_A/B/C/D_BYTES),
// cublasLtMatmulAlgo_t, cublasLtMatmulHeuristicResult_t, cublasLtMatmulAlgoGetHeuristic,
// cublasLtMatmul.
// Types: A and B CUDA_R_16BF or CUDA_R_16F (the same); C and D A's type or CUDA_R_32F (the
// same); compute
// CUBLAS_COMPUTE_32F, scale CUDA_R_32F, host scalars. Every other attribute, value or type
// is refused at run time with its name. The enum names GPUMix does not use are declared
// only so that refusals can name them (CUBLASLT_EPILOGUE_RELU, ...).
#pragma once

#include <cstddef>
#include <cstdint>

#include "driver_types.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_TRANSC = 5,
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 6,
  CUBLASLT_EPILOGUE_RELU_AUX = 2 | 128,
  CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 2 | 128 | 4,
  CUBLASLT_EPILOGUE_DRELU = 8 | 128,
  CUBLASLT_EPILOGUE_DRELU_BGRAD = 8 | 128 | 16,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = 36,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,
  CUBLASLT_MATRIX_LAYOUT_LD = 4,
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

struct cublasLtContext;
struct cublasLtMatmulDescOpaque_t;
struct cublasLtMatrixLayoutOpaque_t;
struct cublasLtMatmulPreferenceOpaque_t;
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

// As the real one: plain data, copied freely by the caller (matmul.cu caches it).
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref,
                                              int requested_algo_count,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* return_algo_count);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

}  // extern "C"
