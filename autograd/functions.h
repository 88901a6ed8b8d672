// Differentiable functions: each computes through core ops and records one tape node that
// keeps only what its backward needs. Shapes: B batch, T sequence, C channels, NH heads,
// V vocabulary, OC output channels.
#pragma once

#include <cstdint>

#include "autograd/tape.h"

namespace gpumix {

// x (..., C) @ w (OC, C)^T + b (OC) -> (..., OC); b may be an undefined Var.
Var linear(const Var& x, const Var& w, const Var& b);
// LayerNorm over the last dimension with weight and bias (C).
Var layernorm(const Var& x, const Var& w, const Var& b);
Var gelu(const Var& x);
// The MLP of a block, linear(gelu(linear(x, w_fc, b_fc)), w_proj, b_proj), with the GELU in
// the products' epilogues (ops::matmul_gelu_forward, ops::matmul_backward_dgelu) when the
// hidden width (w_fc's rows) is a multiple of ops::fused_gelu_multiple and b_fc is defined;
// otherwise as those three functions. b_proj may be undefined.
Var mlp(const Var& x, const Var& w_fc, const Var& b_fc, const Var& w_proj, const Var& b_proj);
// Causal self-attention: qkv (B, T, 3C) -> (B, T, C).
Var attention(const Var& qkv, int NH);
// a + b, same shape (the residual connection).
Var add(const Var& a, const Var& b);
// wte[tokens] + wpe[0..T): tokens i32 (B, T), wte (V, C), wpe (Tmax, C) -> (B, T, C).
Var embedding(const Tensor& tokens, const Var& wte, const Var& wpe);
// scale * sum over rows of -log softmax(logits)[target], skipping ignore_index targets:
// logits (..., V), targets i32 with one element per row -> a one-element loss. With
// scale = 1 / (tokens in the global batch) every rank's loss adds up to the global mean.
Var cross_entropy(const Var& logits, const Tensor& targets, float scale,
                  int32_t ignore_index = -1);
// The same loss through the fused classifier, on logits (..., Vp) whose first V columns
// are the classes (the rest padding, kept out of the softmax). When a gradient is needed,
// the forward writes dlogits (for a loss gradient of 1) over the logits' value, which then
// serves as their gradient: no (N, Vp) buffer besides the logits, no second pass. So the
// logits must have no other consumer; backward multiplies by the loss's gradient, read
// on the device, and writes nothing when it is 1 (the loss is backward's root).
Var classifier_loss(const Var& logits, const Tensor& targets, float scale, int64_t V,
                    int32_t ignore_index = -1);

}  // namespace gpumix
