// The op table: the small explicit contract between core/ops (which validates) and a device
// kind's kernels. One OpTable per device kind (core/backend_cpu.cpp,
// core/cuda/backend_cuda.cpp); core/ops.cpp, the one dispatch point, is its only caller. An
// entry receives tensors already checked for shape, dtype and device, reads the sizes it
// needs and calls kernels/ on the device's compute stream. What a device kind offers below
// the ops (memory, streams, events, raw copies, properties) is its runtime, core/runtime.h.
//
// Every op table implements every op in both compute dtypes, f32 and bf16, with the
// per-argument dtypes of core/precision.h (the same as kernels/cuda/cuda.h and the bf16
// declarations of kernels/cpu/kernels.inc). Below, [c] marks an argument in the op's compute
// dtype (that of its first input: activations, weights as used in compute, activation
// gradients) and [f32] one that is fp32 in every compute dtype (parameter gradients,
// master weights, moments, losses, lse, mean, rstd). Kernels accumulate in fp32 and round
// a bf16 result once. Backward ops accumulate (+=) into gradients; an undefined gradient
// (or bias) means "not needed".
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "core/stream.h"

namespace gpumix {

class OpTable {
 public:
  virtual ~OpTable() = default;

  // out [c], inp [c], weight [c], bias [c].
  virtual void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight,
                              const Tensor& bias) const = 0;
  // dinp [c], dweight [f32], dbias [f32], dout [c], inp [c], weight [c].
  virtual void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& weight) const = 0;
  // a [c], b [c]; c [c] or [f32] (an fp32 result of bf16 operands).
  virtual void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                    float alpha, float beta) const = 0;
  // The fused GEMM epilogues and first writes (core/ops.h says what each computes).
  // out [c], pre [c], inp [c], weight [c], bias [c].
  virtual void matmul_gelu_forward(Tensor& out, Tensor& pre, const Tensor& inp,
                                   const Tensor& weight, const Tensor& bias) const = 0;
  // dpre [c] (written), dout [c], weight [c], pre [c].
  virtual void matmul_backward_dgelu(Tensor& dpre, const Tensor& dout, const Tensor& weight,
                                     const Tensor& pre) const = 0;
  // As matmul_backward; the flagged gradients are written, not accumulated.
  virtual void matmul_backward_write(Tensor& dinp, Tensor& dweight, Tensor& dbias,
                                     const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                     bool overwrite_dinp, bool overwrite_params) const = 0;

  // out [c], mean [f32], rstd [f32], inp [c], weight [c], bias [c].
  virtual void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                 const Tensor& weight, const Tensor& bias) const = 0;
  // dinp [c], dweight [f32], dbias [f32], dout [c], inp [c], weight [c], mean, rstd [f32].
  virtual void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd) const = 0;
  // All [c].
  virtual void gelu_forward(Tensor& out, const Tensor& inp) const = 0;
  virtual void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const = 0;
  // out [c], lse [f32], qkv [c].
  virtual void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH) const = 0;
  // dqkv [c], dout [c], qkv [c], out [c], lse [f32].
  virtual void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, int NH) const = 0;
  // out [c] (B,1,C), qkv [c] (B,Tc,3C): the query of row pos against rows 0..pos.
  virtual void attention_decode(Tensor& out, const Tensor& qkv, int64_t pos, int NH) const = 0;
  // losses [f32], lse [f32], logits [c], targets i32.
  virtual void crossentropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits,
                                    const Tensor& targets, int32_t ignore_index) const = 0;
  // dlogits [c], logits [c], lse [f32], targets i32; the gradient factor is scale x dloss's
  // one element (f32, on the device: read there, never by the host) or, with dloss
  // undefined, scale itself.
  virtual void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                     const Tensor& targets, const Tensor& dloss, float scale,
                                     int32_t ignore_index) const = 0;
  // The fused classifier (the LM head's softmax, loss and gradient in one pass):
  // losses [f32] (N), lse [f32] (N), logits [c] (N, Vp), targets i32 (N): the first V <= Vp
  // columns are the classes, the rest padding that enters no softmax. With grad, each row
  // of logits is then overwritten by its dlogits = scale * (softmax - onehot), zeros on
  // ignored rows and on the padding.
  virtual void classifier_forward(Tensor& losses, Tensor& lse, Tensor& logits, const Tensor& targets,
                                  int64_t V, float scale, bool grad, int32_t ignore_index) const = 0;
  // dlogits [c] *= dloss's one element (f32, read on the device, never by the host);
  // nothing is written where it is 1 (the loss was backward's root).
  virtual void classifier_rescale(Tensor& dlogits, const Tensor& dloss) const = 0;

  // out [c], tokens i32, wte [c], wpe [c].
  virtual void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe) const = 0;
  // dwte [f32], dwpe [f32], dout [c], tokens i32.
  virtual void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens) const = 0;
  // param, grad, m, v [f32]; param_copy: the updated weights' bf16 compute copy, written
  // in the same pass (undefined: none, as in an f32 run, whose master is its compute copy).
  virtual void adamw_step(Tensor& param, Tensor& param_copy, const Tensor& grad, Tensor& m,
                          Tensor& v, const AdamWConfig& cfg, int step) const = 0;
  // All [c], except axpy's out, which may also be [f32] (fp32 accumulation of bf16 a). add
  // runs on `stream` (the local collectives' reductions run on the comm stream).
  virtual void add(Tensor& out, const Tensor& a, const Tensor& b, Stream stream) const = 0;
  virtual void scale(Tensor& out, const Tensor& a, float s) const = 0;
  virtual void axpy(Tensor& out, const Tensor& a, float s) const = 0;
  // a f32 or bf16; accumulated in double.
  // out [f32] one element = (float)(scale * sum(a)), the sum as sum() gives it, left on the
  // device (a loss without a host read).
  virtual void sum_to(Tensor& out, const Tensor& a, double scale) const = 0;
  virtual double sum(const Tensor& a) const = 0;
  virtual double sum_squares(const Tensor& a) const = 0;
  // Each tensor's sum_squares (f32 or bf16, all on one device of this kind) / value (one
  // element each, f32 or bf16), with one host synchronisation for all of them.
  virtual std::vector<double> sum_squares_many(const std::vector<Tensor>& ts) const = 0;
  virtual std::vector<float> read_scalars(const std::vector<Tensor>& ts) const = 0;
  // Any dtype.
  virtual void fill(Tensor& t, float value) const = 0;
  // Copies a tensor where at least one side is on a device of this kind, synchronously for
  // the caller where one side is host memory (ops::copy says how; the runtime's
  // copy_async is the raw copy on a chosen stream).
  virtual void copy(Tensor& dst, const Tensor& src) const = 0;
  // f32 <-> bf16 (round to nearest even), or a copy when the dtypes agree.
  virtual void convert(Tensor& out, const Tensor& in) const = 0;
  virtual void uniform_(Tensor& t, uint64_t key, uint64_t offset, float low, float high) const = 0;
  virtual void normal_(Tensor& t, uint64_t key, uint64_t offset, float mean, float std) const = 0;
};

const OpTable& cpu_ops();
#ifdef GPUMIX_CORE_CUDA
const OpTable& cuda_ops();
#endif

// The op table of a device: throws Error when the device kind is not built in.
const OpTable& device_ops(Device device);

}  // namespace gpumix
