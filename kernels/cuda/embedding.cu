// Token + position embedding, 16-bit (bf16 or f16) tables and output, fp32 gradients; one
// source templated over the format H.
// Forward: one thread per 8 channels (16-byte accesses when C % 8 == 0 and aligned).
// Backward, deterministic and without atomics: dwpe by one thread per (t, c) summing over
// the batch in order; dwte by sorting the (token, row) pairs with CUB's radix sort, then
// one block per run of equal tokens summing its rows in sorted (= row) order.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/map.cuh"

namespace gpumix::kernels::cuda {

namespace {

using detail::to_f32;
using detail::from_f32;

template <class H, bool VEC>
__global__ void embedding_forward_kernel(H* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const H* __restrict__ wte,
                                         const H* __restrict__ wpe, int64_t N, int T, int C) {
  const int W = VEC ? 8 : 1;
  const int64_t per_row = C / W;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < N * per_row;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = idx / per_row;
    const int c = (int)(idx % per_row) * W;
    const int t = (int)(row % T);
    const H* e = wte + (int64_t)tokens[row] * C + c;
    const H* p = wpe + (int64_t)t * C + c;
    H* o = out + row * C + c;
    if (VEC) {
      float a[8], b[8];
      detail::loadv(e, a);
      detail::loadv(p, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] += b[j];
      detail::storev(o, a);
    } else {
      *o = from_f32<H>(to_f32(*e) + to_f32(*p));
    }
  }
}

template <class H>
__global__ void dwpe_kernel(float* __restrict__ dwpe, const H* __restrict__ dout, int B, int T,
                            int C) {
  const int64_t n = (int64_t)T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += to_f32(dout[b * n + i]);
    dwpe[i] += s;
  }
}

__global__ void iota_kernel(int32_t* v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = i;
}

// Block i handles the run of equal tokens starting at sorted position i (other blocks
// return at once).
template <class H>
__global__ void dwte_kernel(float* __restrict__ dwte, const H* __restrict__ dout,
                            const int32_t* __restrict__ keys, const int32_t* __restrict__ rows,
                            int N, int C) {
  const int i = blockIdx.x;
  const int32_t token = keys[i];
  if (i > 0 && keys[i - 1] == token) return;
  int end = i + 1;
  while (end < N && keys[end] == token) ++end;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int r = i; r < end; ++r) s += to_f32(dout[(int64_t)rows[r] * C + c]);
    dwte[(int64_t)token * C + c] += s;
  }
}

__global__ void check_tokens_kernel(int32_t* __restrict__ out, const int32_t* __restrict__ tokens,
                                    int64_t n, int V, unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t token = tokens[i];
    const bool ok = token >= 0 && token < V;
    out[i] = ok ? token : 0;
    if (!ok) atomicMin(first_bad, ((unsigned long long)i << 32) | (uint32_t)token);
  }
}

}  // namespace

void check_tokens(int32_t* out, const int32_t* tokens, int64_t n, int V,
                  unsigned long long* first_bad, cudaStream_t stream) {
  if (n <= 0) return;
  GPUMIX_LAUNCH(check_tokens_kernel, detail::grid_for(n, 256), 256, 0, stream, out, tokens, n, V, first_bad);
  CUDA_CHECK_LAST();
}

namespace {

template <class H>
void embedding_forward_t(H* out, const int32_t* tokens, const H* wte, const H* wpe, int B, int T, int C,
                         cudaStream_t stream) {
  const int64_t N = (int64_t)B * T;
  if (N <= 0 || C <= 0) return;
  const bool vec = C % 8 == 0 && detail::aligned16(out) && detail::aligned16(wte) &&
                   detail::aligned16(wpe);
  const int64_t work = N * (vec ? C / 8 : C);
  auto* embedding_forward = vec ? &embedding_forward_kernel<H, true> : &embedding_forward_kernel<H, false>;
  GPUMIX_LAUNCH(embedding_forward, detail::grid_for(work, 256), 256, 0, stream, out, tokens, wte, wpe, N, T, C);
  CUDA_CHECK_LAST();
}

template <class H>
void embedding_backward_t(float* dwte, float* dwpe, const H* dout, const int32_t* tokens, int B, int T, int C,
                          cudaStream_t stream) {
  const int N = B * T;
  if (N <= 0 || C <= 0) return;
  if (dwpe) {
    auto* dwpe_sum = &dwpe_kernel<H>;
    GPUMIX_LAUNCH(dwpe_sum, detail::grid_for((int64_t)T * C, 256), 256, 0, stream, dwpe, dout, B, T, C);
    CUDA_CHECK_LAST();
  }
  if (!dwte) return;
  int32_t* buf = (int32_t*)detail::scratch_alloc(sizeof(int32_t) * 3 * (size_t)N, stream);
  int32_t* rows_in = buf;
  int32_t* keys_out = buf + N;
  int32_t* rows_out = buf + 2 * (size_t)N;
  GPUMIX_LAUNCH(iota_kernel, detail::grid_for(N, 256), 256, 0, stream, rows_in, N);
  CUDA_CHECK_LAST();
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, keys_out, rows_in,
                                             rows_out, N, 0, 32, stream));
  void* temp = detail::scratch_alloc(temp_bytes, stream);
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys_out, rows_in, rows_out,
                                             N, 0, 32, stream));
  auto* dwte_runs = &dwte_kernel<H>;
  GPUMIX_LAUNCH(dwte_runs, N, 128, 0, stream, dwte, dout, keys_out, rows_out, N, C);
  CUDA_CHECK_LAST();
  detail::scratch_free(temp, stream);
  detail::scratch_free(buf, stream);
}

}  // namespace

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T, int C,
                       cudaStream_t stream) {
  embedding_forward_t(out, tokens, wte, wpe, B, T, C, stream);
}
void embedding_forward(f16* out, const int32_t* tokens, const f16* wte, const f16* wpe, int B, int T, int C,
                       cudaStream_t stream) {
  embedding_forward_t(out, tokens, wte, wpe, B, T, C, stream);
}
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T, int C,
                        cudaStream_t stream) {
  embedding_backward_t(dwte, dwpe, dout, tokens, B, T, C, stream);
}
void embedding_backward(float* dwte, float* dwpe, const f16* dout, const int32_t* tokens, int B, int T, int C,
                        cudaStream_t stream) {
  embedding_backward_t(dwte, dwpe, dout, tokens, B, T, C, stream);
}

}  // namespace gpumix::kernels::cuda
