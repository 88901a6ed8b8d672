// The emulated CUDA device's CUB: only cub::DeviceRadixSort::SortPairs for 32-bit integer
// keys and values (embedding.cu sorts (token, row) pairs), with CUB's contract:
// - a first call with d_temp_storage == nullptr only writes the temporary storage size;
// - the second call sorts on the stream, stably (equal keys keep their input order), by
//   the key bits [begin_bit, end_bit), signed keys in numeric order (as CUB's bit twiddle);
//   the temporary storage must be device memory of at least that size, and every buffer
//   device memory (refused otherwise, naming the argument).
// Returns cudaErrorInvalidValue for a short temporary buffer, a negative count or bad bits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cuda_emulator::detail {
cudaError_t radix_sort_pairs_i32(void* temp, size_t* temp_bytes, const int32_t* keys_in,
                                 int32_t* keys_out, const int32_t* values_in,
                                 int32_t* values_out, int num_items, int begin_bit, int end_bit,
                                 cudaStream_t stream);
}

namespace cub {

struct DeviceRadixSort {
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes,
                               const int32_t* d_keys_in, int32_t* d_keys_out,
                               const int32_t* d_values_in, int32_t* d_values_out, int num_items,
                               int begin_bit = 0, int end_bit = 32, cudaStream_t stream = 0) {
    return ::cuda_emulator::detail::radix_sort_pairs_i32(
        d_temp_storage, &temp_storage_bytes, d_keys_in, d_keys_out, d_values_in, d_values_out,
        num_items, begin_bit, end_bit, stream);
  }
};

}  // namespace cub
