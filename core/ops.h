// The tensor op API. Every op checks its arguments here, once, for every device (shapes,
// dtypes, devices: a mismatch names the op and the shapes), then dispatches on the device
// in exactly one place (ops.cpp) to that device's op table (core/op_table.h), which calls
// kernels/ on the device's compute stream.
//
// Dtypes: each op computes in the dtype of its main input (f32, bf16 or f16), and every other
// argument's dtype follows from its role (core/precision.h; core/op_table.h lists the roles
// op by op): activations, weights as used in compute and activation gradients in the
// compute dtype; parameter gradients, losses, lse, mean and rstd always fp32. A wrong
// dtype is an error naming the op, the argument, its dtype and the expected one.
//
// Out-parameter style: the caller allocates outputs (the engine reuses buffers); backward
// ops ACCUMULATE into gradients, and an undefined gradient tensor means "not needed".
//
// Glossary: B batch, T sequence, C channels, NH heads, V vocabulary, N rows, OC outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"

namespace gpumix {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

namespace ops {

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); inp may be (B,T,C).
void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight);
// Batched general matrix product on the last two dimensions: c = alpha op(a) op(b) + beta c.
void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
          float alpha = 1.0f, float beta = 0.0f);

// LayerNorm over the last dimension; mean and rstd (N) saved for backward.
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias);
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);

void gelu_forward(Tensor& out, const Tensor& inp);
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);

// Causal self-attention: qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T).
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int NH);
// Incremental decoding (nn/infer's key/value cache): qkv (B,Tc,3C) with rows 0..pos filled;
// the query of row pos attends to rows 0..pos -> out (B,1,C), row pos of what
// attention_forward gives on the first pos + 1 rows (up to the order of the fp32 sums).
void attention_decode(Tensor& out, const Tensor& qkv, int64_t pos, int NH);

// Fused softmax + cross-entropy: logits (N,V) (or (B,T,V)), targets i32 (N) -> losses (N),
// lse (N). Backward: dlogits += dloss * (softmax - onehot) on non-ignored rows.
void crossentropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets,
                          int32_t ignore_index = -1);
void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                           const Tensor& targets, float dloss, int32_t ignore_index = -1);
// The same with the factor scale x dloss, dloss a one-element f32 tensor on the op's device
// (the loss's gradient in autograd): on a GPU it is read by the kernel, not the host.
void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                           const Tensor& targets, const Tensor& dloss, float scale,
                           int32_t ignore_index = -1);

// The fused classifier: logits (N,Vp) (or (B,T,Vp)) whose first V columns are the classes
// and the rest padding (no class, no probability), targets i32 (N) in [0, V) or
// ignore_index -> losses (N), lse (N) as crossentropy_forward's; with grad, logits is then
// overwritten in place by dlogits = scale * (softmax - onehot) (zeros on ignored rows and
// padding columns), row by row: no second (N,Vp) array. rescale: dlogits *= dloss's one
// element, read on the op's device (nothing written where it is 1).
void classifier_forward(Tensor& losses, Tensor& lse, Tensor& logits, const Tensor& targets, int64_t V,
                        float scale, bool grad, int32_t ignore_index = -1);
void classifier_rescale(Tensor& dlogits, const Tensor& dloss);

// tokens i32 (B,T); wte (V,C); wpe (Tmax,C), T <= Tmax -> out (B,T,C).
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens);

// One AdamW step (step counts from 1) on fp32 master weights `param`, grad, m, v of equal
// size. The second form also writes the updated weights' bf16 compute copy `param_copy`
// (same size; undefined: none) in the same pass.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg,
                int step);
void adamw_step(Tensor& param, Tensor& param_copy, const Tensor& grad, Tensor& m, Tensor& v,
                const AdamWConfig& cfg, int step);

// Elementwise (out may alias an input), all of a's dtype: out = a + b; out = s a; out += s a
// (axpy's out may also be an fp32 accumulator of a bf16 a). add may run on another stream
// of a's device than compute (the local collectives' reductions, on comm): no emulated
// slowdown is charged for it there (core/slowdown.h).
void add(Tensor& out, const Tensor& a, const Tensor& b, Stream stream = Stream::compute);
void scale(Tensor& out, const Tensor& a, float s);
void axpy(Tensor& out, const Tensor& a, float s);

// Reductions over all elements (f32, bf16 or f16), accumulated in double.
double sum(const Tensor& a);
double sum_squares(const Tensor& a);
// out (one f32 element on a's device) = (float)(scale * sum(a)), bit for bit, without a
// host read (a loss from its per-row losses).
void sum_to(Tensor& out, const Tensor& a, double scale);

// For one host synchronisation per step: each tensor's sum_squares (exactly the values
// that sum_squares gives, bit for bit), and each one-element tensor's value (f32, bf16 or f16).
// All tensors on one device; on a cuda device every result lands in one device array,
// copied back with one synchronisation.
std::vector<double> sum_squares_many(const std::vector<Tensor>& ts);
std::vector<float> read_scalars(const std::vector<Tensor>& ts);

// Data movement.
void fill(Tensor& t, float value);
// Same numel and dtype, any devices; synchronous for the caller, through the cuda side's
// op table and its compute stream: host -> cuda goes through pinned staging buffers, the
// host memory may be reused when copy returns and the data is in place for all later work
// on the compute stream; cuda -> host has completed when copy returns (after the device's
// earlier compute-stream work); cuda -> cuda is ordered on both devices' compute streams
// (events, no host wait).
void copy(Tensor& dst, const Tensor& src);
void convert(Tensor& out, const Tensor& in);     // f32 <-> bf16, same device and numel

// Random numbers: element i of `t` is element (offset + i) of the stream `key` (see
// core/rng.h), whatever the device or how the tensor was split.
void uniform_(Tensor& t, uint64_t key, uint64_t offset, float low, float high);
void normal_(Tensor& t, uint64_t key, uint64_t offset, float mean, float std);

// ---- fused GEMM epilogues and first writes ----
// Linear + GELU in one product: pre (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC), the
// GELU input kept for the backward, and out (N,OC) = gelu(pre). As matmul_forward followed
// by gelu_forward (on a GPU, one cuBLASLt GELU_AUX_BIAS product rounding once).
void matmul_gelu_forward(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias);
// The input gradient of a linear whose input was gelu(pre), through the GELU:
// dpre (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(pre (N,C)), WRITTEN, not accumulated
// (on a GPU, one cuBLASLt DGELU product). C must be a multiple of fused_gelu_multiple.
void matmul_backward_dgelu(Tensor& dpre, const Tensor& dout, const Tensor& weight,
                           const Tensor& pre);
constexpr int64_t fused_gelu_multiple = 8;  // cuBLASLt's EPILOGUE_AUX_LD: divisible by 8
// matmul_backward whose first writes overwrite: dinp when overwrite_dinp, dweight and dbias
// when overwrite_params; what they held is never read (no zero-fill needed). Without
// the flags, exactly matmul_backward (which accumulates).
void matmul_backward_write(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                           const Tensor& inp, const Tensor& weight, bool overwrite_dinp,
                           bool overwrite_params);

}  // namespace ops
}  // namespace gpumix
