// Incremental decoding's attention (nn/infer's key/value cache): the query of row pos of
// each (b, h) against the cached keys and values of rows 0..pos, 16-bit qkv/out (bf16 or
// f16: one source templated over the format H), fp32 arithmetic.
//
// v1: one block of 128 threads per (b, h). The query is staged in shared memory; threads
// take keys in turn for the scores (kept in shared memory, pos + 1 floats), the block
// reduces max and sum (warp shuffles, then one word per warp), and the output channels
// are split over groups of threads that each sum a stride of the keys, combined in shared
// memory. Reference version: one thread per output element, recomputing every score
// (max, sum and product) on its own, no shared memory.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace gpumix::kernels::cuda {

namespace {

using detail::to_f32;
using detail::from_f32;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHS = 256;
constexpr int kMaxRows = 8192;  // cached rows: pos + 1 scores in shared memory (32 KiB)

void check_decode(const char* what, int B, int Tc, int C, int NH, int pos) {
  if (B < 0 || Tc <= 0 || C <= 0 || NH <= 0 || C % NH != 0 || pos < 0 || pos >= Tc)
    throw std::invalid_argument(std::string(what) + ": bad shape B=" + std::to_string(B) + " Tc=" +
                                std::to_string(Tc) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                                " pos=" + std::to_string(pos) + " (C a positive multiple of NH, 0 <= pos < Tc)");
}

__device__ float block_reduce(float v, float* red, bool is_max) {
  v = is_max ? detail::warp_max(v) : detail::warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kWarps; w++) r = is_max ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

// grid (B*NH), block kThreads; dynamic shared memory: HS + pos + 1 + groups * HS floats.
template <class H>
__global__ void decode_kernel(H* out, const H* qkv, int Tc, int C, int NH, int pos, float scale) {
  GPUMIX_SHARED_DYNAMIC(float, sm);
  const int HS = C / NH, b = blockIdx.x / NH, h = blockIdx.x % NH;
  const int64_t C3 = 3 * (int64_t)C;
  float* q = sm;              // (HS)
  float* s = q + HS;          // (pos + 1) scores, then probabilities
  float* part = s + pos + 1;  // (groups, HS) partial outputs
  GPUMIX_SHARED(float, red, [kWarps]);
  const H* base = qkv + (int64_t)b * Tc * C3 + h * HS;
  for (int d = threadIdx.x; d < HS; d += kThreads) q[d] = to_f32(base[pos * C3 + d]);
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= pos; j += kThreads) {
    const H* k = base + j * C3 + C;
    float acc = 0.0f;
    for (int d = 0; d < HS; d++) acc = fmaf(q[d], to_f32(k[d]), acc);
    s[j] = acc * scale;
    mx = fmaxf(mx, s[j]);
  }
  mx = block_reduce(mx, red, true);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= pos; j += kThreads) {
    s[j] = __expf(s[j] - mx);
    sum += s[j];
  }
  sum = block_reduce(sum, red, false);  // its __syncthreads also publishes s
  // Output: groups of HS threads (at least one group), group g summing keys g, g+G, ...
  const int groups = HS >= kThreads ? 1 : kThreads / HS;
  const int g = threadIdx.x / HS;
  if (g < groups) {
    for (int d = threadIdx.x % HS; d < HS; d += kThreads) {
      float acc = 0.0f;
      for (int j = g; j <= pos; j += groups) acc = fmaf(s[j], to_f32(base[j * C3 + 2 * C + d]), acc);
      part[g * HS + d] = acc;
    }
  }
  __syncthreads();
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < HS; d += kThreads) {
    float acc = 0.0f;
    for (int gg = 0; gg < groups; gg++) acc += part[gg * HS + d];
    out[(int64_t)b * C + h * HS + d] = from_f32<H>(acc * inv);
  }
}

// One thread per output element (b, channel c): every score of its head recomputed.
template <class H>
__global__ void decode_ref_kernel(H* out, const H* qkv, int B, int Tc, int C, int NH, int pos,
                                  float scale) {
  const int HS = C / NH;
  const int64_t C3 = 3 * (int64_t)C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (int64_t)B * C;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int b = (int)(i / C), c = (int)(i % C), h = c / HS;
    const H* base = qkv + (int64_t)b * Tc * C3 + h * HS;
    const H* q = base + pos * C3;
    auto score = [&](int j) {
      float acc = 0.0f;
      for (int d = 0; d < HS; d++) acc += to_f32(q[d]) * to_f32(base[j * C3 + C + d]);
      return acc * scale;
    };
    float mx = -INFINITY;
    for (int j = 0; j <= pos; j++) mx = fmaxf(mx, score(j));
    float sum = 0.0f, acc = 0.0f;
    for (int j = 0; j <= pos; j++) {
      const float p = expf(score(j) - mx);
      sum += p;
      acc += p * to_f32(base[j * C3 + 2 * C + (c - h * HS)]);
    }
    out[i] = from_f32<H>(acc / sum);
  }
}

template <class H>
void attention_decode_t(H* out, const H* qkv, int B, int Tc, int C, int NH, int pos, cudaStream_t stream) {
  check_decode("attention_decode", B, Tc, C, NH, pos);
  const int HS = C / NH;
  if (HS > kMaxHS || pos + 1 > kMaxRows)
    throw std::invalid_argument("attention_decode: head size " + std::to_string(HS) + " (at most " +
                                std::to_string(kMaxHS) + ") or " + std::to_string(pos + 1) +
                                " cached rows (at most " + std::to_string(kMaxRows) +
                                ") beyond this kernel; use attention_decode_ref");
  if (B == 0) return;
  const int groups = HS >= kThreads ? 1 : kThreads / HS;
  const size_t smem = sizeof(float) * ((size_t)HS + pos + 1 + (size_t)groups * HS);
  auto* decode = &decode_kernel<H>;
  GPUMIX_LAUNCH(decode, B * NH, kThreads, smem, stream, out, qkv, Tc, C, NH, pos,
      1.0f / sqrtf((float)HS));
  CUDA_CHECK_LAST();
}

template <class H>
void attention_decode_ref_t(H* out, const H* qkv, int B, int Tc, int C, int NH, int pos,
                          cudaStream_t stream) {
  check_decode("attention_decode_ref", B, Tc, C, NH, pos);
  if (B == 0) return;
  auto* decode_ref = &decode_ref_kernel<H>;
  GPUMIX_LAUNCH(decode_ref, detail::grid_for((int64_t)B * C, 128), 128, 0, stream, out, qkv, B, Tc, C,
      NH, pos, 1.0f / sqrtf((float)(C / NH)));
  CUDA_CHECK_LAST();
}

}  // namespace

void attention_decode(bf16* out, const bf16* qkv, int B, int Tc, int C, int NH, int pos, cudaStream_t stream) {
  attention_decode_t(out, qkv, B, Tc, C, NH, pos, stream);
}
void attention_decode(f16* out, const f16* qkv, int B, int Tc, int C, int NH, int pos, cudaStream_t stream) {
  attention_decode_t(out, qkv, B, Tc, C, NH, pos, stream);
}
void attention_decode_ref(bf16* out, const bf16* qkv, int B, int Tc, int C, int NH, int pos,
                          cudaStream_t stream) {
  attention_decode_ref_t(out, qkv, B, Tc, C, NH, pos, stream);
}
void attention_decode_ref(f16* out, const f16* qkv, int B, int Tc, int C, int NH, int pos,
                          cudaStream_t stream) {
  attention_decode_ref_t(out, qkv, B, Tc, C, NH, pos, stream);
}

bool attention_decode_supported(int HS, int rows) { return HS <= kMaxHS && rows <= kMaxRows; }

}  // namespace gpumix::kernels::cuda
