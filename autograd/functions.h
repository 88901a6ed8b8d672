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

}  // namespace gpumix
