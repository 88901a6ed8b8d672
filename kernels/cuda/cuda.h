// CUDA kernels: compute on raw device pointers and sizes, asynchronously on the given
// stream. Nothing here knows tensors or gradients. The semantics are those of the CPU
// kernels (kernels/cpu/kernels.inc), op by op, with these storage types:
//
// - a 16-bit format, bf16 or f16 (IEEE binary16; kernels/half_types.h), for activations,
//   parameters used in compute, and activation gradients (dinp, dqkv, dlogits): each such
//   kernel has one overload per format, from one source;
// - fp32 for parameter gradients (dweight, dbias, dwte, dwpe: they are summed over
//   micro-batches and reduced across ranks), master weights, AdamW moments, losses, lse,
//   mean and rstd.
// Every kernel accumulates in fp32; 16-bit outputs are rounded to nearest even once, at the
// end (f16 overflowing to inf past 65504: an f16 run needs loss scaling).
//
// Glossary: B batch, T sequence, C channels, NH heads, HS = C / NH head size,
// V vocabulary, N rows (often B*T), OC output channels.
//
// Conventions (as on the CPU):
// - Row-major, contiguous; device pointers; 16-bit buffers 2-byte aligned (16-byte
//   alignment and sizes that are multiples of 8 take the vectorised paths).
// - Backward kernels ACCUMULATE (+=) into every gradient they write; any gradient
//   pointer may be null, meaning "not needed".
// - Every function is asynchronous on `stream` (nullptr: the legacy default stream),
//   except those named *_sync, and throws gpumix::kernels::cuda::Error (check.h) on a
//   CUDA or cuBLASLt failure.
// - Deterministic: the same inputs give the same bits (no floating-point atomics).
// - Scratch memory some kernels need comes from a private stream-ordered pool per device
//   and stream (cudaMallocFromPoolAsync), outside core's allocator: logical devices sharing
//   a GPU never share a pool, so one never waits on another's stream to reuse a block.
//
// This header needs no CUDA header: plain C++ translation units can include it.
#pragma once

#include <cstdint>

#include "kernels/cuda/device.h"
#include "kernels/half_types.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // the same declaration as CUDA's driver_types.h

namespace gpumix::kernels::cuda {

// bf16 and f16 (kernels/half_types.h): every kernel with 16-bit storage exists for both
// formats, one source templated over the format (the f16 twin follows each bf16 declaration).
using gpumix::bf16;
using gpumix::f16;

// ---- matmul.cu: cuBLASLt, bf16 operands, fp32 compute ----------------------------------
// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be null (then the
// plain epilogue), else cuBLASLt's BIAS epilogue.
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                    int N, int C, int OC, cudaStream_t stream = nullptr);
void matmul_forward(f16* out, const f16* inp, const f16* weight, const f16* bias,
                    int N, int C, int OC, cudaStream_t stream = nullptr);
// dinp (N,C) += dout (N,OC) @ weight (OC,C)           bf16, fp32 accumulate, beta = 1
// dweight (OC,C) += dout^T @ inp                       fp32 buffer, beta = 1
// dbias (OC) += column sums of dout                    fp32
// overwrite_dinp / overwrite_params: the first write of those gradients, beta = 0 (no
// zero-fill, no read). dbias comes from the dweight product's BGRADB epilogue, which
// writes: into dbias itself when overwrite_params, else into dbias_scratch (OC fp32,
// device), then added; without a scratch (or dweight, or an algorithm for it), from the
// column-reduction kernel.
void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC,
                     cudaStream_t stream = nullptr, bool overwrite_dinp = false,
                     bool overwrite_params = false, float* dbias_scratch = nullptr);
void matmul_backward(f16* dinp, float* dweight, float* dbias, const f16* dout,
                     const f16* inp, const f16* weight, int N, int C, int OC,
                     cudaStream_t stream = nullptr, bool overwrite_dinp = false,
                     bool overwrite_params = false, float* dbias_scratch = nullptr);
// Linear + GELU in one product (cuBLASLt GELU_AUX_BIAS): pre (N,OC) = inp @ weight^T + bias
// (the GELU input, kept for the backward), out (N,OC) = gelu(pre) from its fp32 value.
// OC not a multiple of 8 (or no algorithm): matmul_forward and gelu_forward.
void matmul_gelu_forward(bf16* out, bf16* pre, const bf16* inp, const bf16* weight,
                         const bf16* bias, int N, int C, int OC, cudaStream_t stream = nullptr);
void matmul_gelu_forward(f16* out, f16* pre, const f16* inp, const f16* weight,
                         const f16* bias, int N, int C, int OC, cudaStream_t stream = nullptr);
// The input gradient of a linear whose input was gelu(pre), through the GELU (cuBLASLt
// DGELU): dpre (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(pre (N,C)), written (beta 0)
// from the fp32 product. C must be a multiple of 8.
void matmul_backward_dgelu(bf16* dpre, const bf16* dout, const bf16* weight, const bf16* pre,
                           int N, int C, int OC, cudaStream_t stream = nullptr);
void matmul_backward_dgelu(f16* dpre, const f16* dout, const f16* weight, const f16* pre,
                           int N, int C, int OC, cudaStream_t stream = nullptr);
// General batched GEMM, row-major, as cpu::gemm: C = alpha * op(A) @ op(B) + beta * C
// with op(A) (m,k), op(B) (k,n), C (m,n); batch matrices at strides stride_* (elements).
// C in bf16 or (second overload) fp32.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, bf16* c, int ldc, int batch = 1,
          int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0,
          cudaStream_t stream = nullptr);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const f16* a,
          int lda, const f16* b, int ldb, float beta, f16* c, int ldc, int batch = 1,
          int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0,
          cudaStream_t stream = nullptr);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, float* c, int ldc, int batch = 1,
          int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0,
          cudaStream_t stream = nullptr);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const f16* a,
          int lda, const f16* b, int ldb, float beta, float* c, int ldc, int batch = 1,
          int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0,
          cudaStream_t stream = nullptr);
// out (N,C) = inp (N,C) + bias (C); out may alias inp.
void bias_add(bf16* out, const bf16* inp, const bf16* bias, int N, int C,
              cudaStream_t stream = nullptr);
void bias_add(f16* out, const f16* inp, const f16* bias, int N, int C,
              cudaStream_t stream = nullptr);
// dbias (C) += column sums of dout (N,C), fp32.
void bias_backward(float* dbias, const bf16* dout, int N, int C, cudaStream_t stream = nullptr);
void bias_backward(float* dbias, const f16* dout, int N, int C, cudaStream_t stream = nullptr);
// Number of distinct GEMM shapes whose cuBLASLt algorithm is cached (for tests).
int matmul_cached_algos();

// ---- layernorm.cu --------------------------------------------------------------------------
// out (N,C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N) (either may
// be null). eps 1e-5.
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C,
                       cudaStream_t stream = nullptr);
void layernorm_forward(f16* out, float* mean, float* rstd, const f16* inp,
                       const f16* weight, const f16* bias, int N, int C,
                       cudaStream_t stream = nullptr);
// dinp (N,C) bf16 +=; dweight, dbias (C) fp32 +=.
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream = nullptr);
void layernorm_backward(f16* dinp, float* dweight, float* dbias, const f16* dout,
                        const f16* inp, const f16* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream = nullptr);

// ---- gelu.cu (tanh approximation) -----------------------------------------------------------
void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream = nullptr);
void gelu_forward(f16* out, const f16* inp, int64_t n, cudaStream_t stream = nullptr);
// dinp += dout * gelu'(inp)
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n,
                   cudaStream_t stream = nullptr);
void gelu_backward(f16* dinp, const f16* inp, const f16* dout, int64_t n,
                   cudaStream_t stream = nullptr);

// ---- attention.cu: causal multi-head self-attention ----------------------------------------
// qkv (B,T,3C) = [q | k | v] along the last axis, head h owning channels h*HS..(h+1)*HS
// of each; out (B,T,C) bf16; lse (B,NH,T) fp32, natural log of the row sums of
// exp(q.k / sqrt(HS)).
// Flash style: tiles in shared memory, online softmax, no T x T matrix in device memory; the
// forward of head size 64 on tensor cores (probabilities rounded to bf16 before P V).
// Head sizes 16, 32, 64 and 128 (attention_flash_supported); others throw
// std::invalid_argument (use the reference).
bool attention_flash_supported(int HS);
void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream = nullptr);
void attention_forward(f16* out, float* lse, const f16* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream = nullptr);
// dqkv (B,T,3C) bf16 += gradient, given dout (B,T,C) and the forward's out and lse.
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                        const float* lse, int B, int T, int C, int NH,
                        cudaStream_t stream = nullptr);
void attention_backward(f16* dqkv, const f16* dout, const f16* qkv, const f16* out,
                        const float* lse, int B, int T, int C, int NH,
                        cudaStream_t stream = nullptr);
// Plain reference versions: materialise the (B,NH,T,T) scores in fp32 scratch memory;
// any head size. Same semantics.
void attention_forward_ref(bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                           int NH, cudaStream_t stream = nullptr);
void attention_forward_ref(f16* out, float* lse, const f16* qkv, int B, int T, int C,
                           int NH, cudaStream_t stream = nullptr);
void attention_backward_ref(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                            const float* lse, int B, int T, int C, int NH,
                            cudaStream_t stream = nullptr);
void attention_backward_ref(f16* dqkv, const f16* dout, const f16* qkv, const f16* out,
                            const float* lse, int B, int T, int C, int NH,
                            cudaStream_t stream = nullptr);

// ---- attention_decode.cu: one query row against a key/value cache ------------------------------
// qkv (B,Tc,3C) laid out as above, rows 0..pos filled; out (B,C) bf16 = the attention of the
// query of row pos over rows 0..pos (incremental decoding), fp32 arithmetic. The fast kernel
// takes head sizes up to 256 and up to 8192 cached rows (attention_decode_supported); others
// throw std::invalid_argument (use the reference, one thread per output element).
bool attention_decode_supported(int HS, int rows);
void attention_decode(bf16* out, const bf16* qkv, int B, int Tc, int C, int NH, int pos,
                      cudaStream_t stream = nullptr);
void attention_decode(f16* out, const f16* qkv, int B, int Tc, int C, int NH, int pos,
                      cudaStream_t stream = nullptr);
void attention_decode_ref(bf16* out, const bf16* qkv, int B, int Tc, int C, int NH, int pos,
                          cudaStream_t stream = nullptr);
void attention_decode_ref(f16* out, const f16* qkv, int B, int Tc, int C, int NH, int pos,
                          cudaStream_t stream = nullptr);

// ---- crossentropy.cu: fused softmax + cross-entropy ------------------------------------------
// logits (N,V) bf16. losses (N) = lse - logit[target]; lse (N) saved. A target equal to
// ignore_index gives loss 0 (lse still written). One pass over the logits.
void crossentropy_forward(float* losses, float* lse, const bf16* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index,
                          cudaStream_t stream = nullptr);
void crossentropy_forward(float* losses, float* lse, const f16* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index,
                          cudaStream_t stream = nullptr);
// dlogits (N,V) bf16: += dloss * (softmax - onehot(target)) for every non-ignored row
// (ignored rows are left as they are) when accumulate; when !accumulate the same values
// are written instead (ignored rows get zeros), saving the read of dlogits. dlogits may
// alias logits only when !accumulate. One pass over the logits, using the saved lse.
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index, bool accumulate = true,
                           cudaStream_t stream = nullptr);
void crossentropy_backward(f16* dlogits, const f16* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index, bool accumulate = true,
                           cudaStream_t stream = nullptr);
// The same with the factor scale * *dloss read on the device (dloss: one fp32 in device
// memory, e.g. autograd's loss gradient), so that no host read precedes the backward.
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse,
                           const int32_t* targets, const float* dloss, float scale, int N, int V,
                           int32_t ignore_index, bool accumulate = true,
                           cudaStream_t stream = nullptr);
void crossentropy_backward(f16* dlogits, const f16* logits, const float* lse,
                           const int32_t* targets, const float* dloss, float scale, int N, int V,
                           int32_t ignore_index, bool accumulate = true,
                           cudaStream_t stream = nullptr);

// The fused classifier (the LM head's softmax, loss and gradient in one pass): logits (N,Vp)
// bf16, columns [0, V) the classes and [V, Vp) padding that enters no softmax. losses, lse
// as crossentropy_forward's; with grad, each row is then overwritten by its dlogits =
// scale * (softmax - onehot(target)), zeros on ignored rows and padding columns.
void classifier_forward(float* losses, float* lse, bf16* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad, cudaStream_t stream = nullptr);
void classifier_forward(float* losses, float* lse, f16* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad, cudaStream_t stream = nullptr);
// dlogits (n) *= *dloss (one fp32 in device memory, read by the kernel): nothing is written
// where it is 1.
void classifier_rescale(bf16* dlogits, const float* dloss, int64_t n, cudaStream_t stream = nullptr);
void classifier_rescale(f16* dlogits, const float* dloss, int64_t n, cudaStream_t stream = nullptr);

// ---- embedding.cu ------------------------------------------------------------------------------
// out (B,T,C) = wte[tokens[b,t]] (V,C) + wpe[t] (T,C); tokens must lie in [0, V).
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                       int B, int T, int C, cudaStream_t stream = nullptr);
void embedding_forward(f16* out, const int32_t* tokens, const f16* wte, const f16* wpe,
                       int B, int T, int C, cudaStream_t stream = nullptr);
// dwte (V,C) fp32 += scatter of dout rows by token (rows sorted by token with CUB, each
// token's rows summed in order by one block: no atomics, deterministic);
// dwpe (T,C) fp32 += sum over the batch.
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                        int B, int T, int C, cudaStream_t stream = nullptr);
void embedding_backward(float* dwte, float* dwpe, const f16* dout, const int32_t* tokens,
                        int B, int T, int C, cudaStream_t stream = nullptr);

// out (n) = tokens where 0 <= token < V, else 0, so that the embedding kernels above never
// index outside their tables; the lowest position i whose token lies outside [0, V) is
// reported as *first_bad = min(*first_bad, (i << 32) | (uint32_t)token), a word in device
// or mapped host memory that the caller set to UINT64_MAX and reads after a later
// synchronisation (no host wait here). n < 2^31.
void check_tokens(int32_t* out, const int32_t* tokens, int64_t n, int V,
                  unsigned long long* first_bad, cudaStream_t stream = nullptr);

// ---- adamw.cu ----------------------------------------------------------------------------------
// AdamW with decoupled weight decay and bias correction (step counts from 1) on fp32
// master weights `param` with fp32 grad, m, v; writes the bf16 copy param_bf16 (may be
// null) in the same pass.
void adamw_step(float* param, bf16* param_bf16, const float* grad, float* m, float* v,
                int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int step, cudaStream_t stream = nullptr);
void adamw_step(float* param, f16* param_f16, const float* grad, float* m, float* v,
                int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int step, cudaStream_t stream = nullptr);

// ---- elementwise.cu (out may alias an input) ---------------------------------------------------
void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream = nullptr);
void add(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream = nullptr);
void add(f16* out, const f16* a, const f16* b, int64_t n, cudaStream_t stream = nullptr);
void scale(float* out, const float* a, float s, int64_t n, cudaStream_t stream = nullptr);
void scale(bf16* out, const bf16* a, float s, int64_t n, cudaStream_t stream = nullptr);
void scale(f16* out, const f16* a, float s, int64_t n, cudaStream_t stream = nullptr);
// out += s * a
void axpy(float* out, const float* a, float s, int64_t n, cudaStream_t stream = nullptr);
void axpy(bf16* out, const bf16* a, float s, int64_t n, cudaStream_t stream = nullptr);
void axpy(f16* out, const f16* a, float s, int64_t n, cudaStream_t stream = nullptr);
void axpy(float* out, const bf16* a, float s, int64_t n, cudaStream_t stream = nullptr);
void axpy(float* out, const f16* a, float s, int64_t n, cudaStream_t stream = nullptr);
// fp32 <-> bf16 / f16, round to nearest even, NaN stays NaN, f16 overflowing to inf and
// keeping subnormals (exactly kernels/half_types.h).
void f32_to_bf16(bf16* out, const float* in, int64_t n, cudaStream_t stream = nullptr);
void f32_to_f16(f16* out, const float* in, int64_t n, cudaStream_t stream = nullptr);
void bf16_to_f32(float* out, const bf16* in, int64_t n, cudaStream_t stream = nullptr);
void f16_to_f32(float* out, const f16* in, int64_t n, cudaStream_t stream = nullptr);
void fill(float* out, float value, int64_t n, cudaStream_t stream = nullptr);
void fill(bf16* out, float value, int64_t n, cudaStream_t stream = nullptr);
void fill(f16* out, float value, int64_t n, cudaStream_t stream = nullptr);
void fill(int32_t* out, int32_t value, int64_t n, cudaStream_t stream = nullptr);

// ---- random.cu: counter-based random numbers (kernels/philox.h) -------------------------------
// out[i] = element offset + i of the stream `key`, exactly as the CPU computes it: uniform
// in [low, high) as low + (high - low) * u (bit for bit: no contraction into an FMA);
// normal as mean + std * z, z by Box-Muller with the device's logf / cosf / sqrtf (a few
// ulps from the host's libm). bf16 outputs round the fp32 value once.
void uniform(float* out, int64_t n, uint64_t key, uint64_t offset, float low, float high,
             cudaStream_t stream = nullptr);
void uniform(bf16* out, int64_t n, uint64_t key, uint64_t offset, float low, float high,
             cudaStream_t stream = nullptr);
void uniform(f16* out, int64_t n, uint64_t key, uint64_t offset, float low, float high,
             cudaStream_t stream = nullptr);
void normal(float* out, int64_t n, uint64_t key, uint64_t offset, float mean, float std,
            cudaStream_t stream = nullptr);
void normal(bf16* out, int64_t n, uint64_t key, uint64_t offset, float mean, float std,
            cudaStream_t stream = nullptr);
void normal(f16* out, int64_t n, uint64_t key, uint64_t offset, float mean, float std,
            cudaStream_t stream = nullptr);

// ---- spin.cu: emulated slowdown ------------------------------------------------------------------
// Occupies `stream` (one thread, sleeping in __nanosleep steps) for `ns` nanoseconds of the
// GPU's global timer, so that work enqueued after it on that stream starts that much later
// while the host and other streams go on.
void spin_ns(int64_t ns, cudaStream_t stream = nullptr);

// ---- reduce.cu: double accumulation, deterministic (fixed grid, fixed-order final sum) -------
// *out (one double in device memory) = sum / sum of squares of a.
void sum(double* out, const float* a, int64_t n, cudaStream_t stream = nullptr);
void sum(double* out, const bf16* a, int64_t n, cudaStream_t stream = nullptr);
void sum(double* out, const f16* a, int64_t n, cudaStream_t stream = nullptr);
void sum_squares(double* out, const float* a, int64_t n, cudaStream_t stream = nullptr);
void sum_squares(double* out, const bf16* a, int64_t n, cudaStream_t stream = nullptr);
void sum_squares(double* out, const f16* a, int64_t n, cudaStream_t stream = nullptr);
// *out = (float)(scale * *in) on the device: a reduction's double as an fp32 scalar.
void scale_to_f32(float* out, const double* in, double scale, cudaStream_t stream = nullptr);
// The same, returned to the host (synchronises the stream).
double sum_sync(const float* a, int64_t n, cudaStream_t stream = nullptr);
double sum_squares_sync(const float* a, int64_t n, cudaStream_t stream = nullptr);

// ---- resources -----------------------------------------------------------------------------------
// The scratch pool (a cudaMemPool_t) that kernels enqueued on `stream` of the current device
// allocate from, created on first use; for tests of which streams share one.
const void* scratch_pool(cudaStream_t stream);

// Frees the cuBLASLt handles and workspaces and trims the scratch pools of every device
// (after synchronising them). Kernels called later re-create what they need.
void release_resources();

}  // namespace gpumix::kernels::cuda
