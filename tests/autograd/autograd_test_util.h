// Helpers of the autograd tests: random variables, and a tiny two-layer GPT built from
// the differentiable functions (embedding, layernorm, linear, attention, gelu, add,
// cross_entropy), its parameters in a stable order so that a test can hand them to the
// gradient checker or compare them between runs.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../core/test_util.h"
#include "autograd/functions.h"
#include "autograd/gradcheck.h"

namespace gpumix::test {

// Uniform values in [lo, hi), reproducible from the seed.
inline Tensor random_tensor(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v((size_t)shape.numel());
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

inline Var random_var(const Shape& shape, uint32_t seed, const std::string& name,
                      float lo = -1.0f, float hi = 1.0f, bool requires_grad = true) {
  return Var(random_tensor(shape, seed, lo, hi), requires_grad, name);
}

// The same in bf16 (values rounded once): an activation, or a parameter (fp32 gradient).
inline Var bf16_var(const Shape& shape, uint32_t seed, const std::string& name, float lo = -1.0f,
                    float hi = 1.0f, bool requires_grad = true) {
  return Var(random_tensor(shape, seed, lo, hi).to(DType::bf16), requires_grad, name);
}
inline Var bf16_param(const Shape& shape, uint32_t seed, const std::string& name,
                      float lo = -1.0f, float hi = 1.0f) {
  return Var::parameter(random_tensor(shape, seed, lo, hi).to(DType::bf16), name);
}
// bf16 parameters holding the values of `params` rounded once.
inline std::vector<Var> to_bf16_params(const std::vector<Var>& params) {
  std::vector<Var> out;
  for (const Var& p : params) out.push_back(Var::parameter(p.value().to(DType::bf16), p.name()));
  return out;
}

inline std::vector<float> grad_of(const Var& v) {
  EXPECT_TRUE(v.grad().defined()) << v.name() << " received no gradient";
  return v.grad().defined() ? v.grad().to_vector() : std::vector<float>();
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Checks every element of every input (the tensors are small).
inline GradCheckOptions check_all() {
  GradCheckOptions o;
  o.max_checks_per_input = 1 << 20;
  return o;
}

// ---- a tiny GPT --------------------------------------------------------------------------

struct TinyConfig {
  int V = 11, C = 8, NH = 2, L = 2, Tmax = 6;
};

constexpr int kBlockParams = 12;  // per block, in this order:
// ln1.w, ln1.b, qkv.w (3C, C), qkv.b, proj.w (C, C), proj.b, ln2.w, ln2.b,
// fc.w (4C, C), fc.b, fc2.w (C, 4C), fc2.b

// wte (V, C), wpe (Tmax, C), the blocks, lnf.w, lnf.b, head (V, C).
inline std::vector<Var> tiny_params(const TinyConfig& c, uint32_t seed) {
  std::vector<Var> p;
  auto add = [&](const Shape& s, const std::string& name, float lo, float hi) {
    p.push_back(random_var(s, seed + (uint32_t)p.size() * 101, name, lo, hi));
  };
  const int64_t C = c.C;
  add({c.V, C}, "wte", -1.0f, 1.0f);
  add({c.Tmax, C}, "wpe", -0.5f, 0.5f);
  for (int l = 0; l < c.L; ++l) {
    const std::string b = "block" + std::to_string(l) + ".";
    add({C}, b + "ln1.w", 0.5f, 1.5f);
    add({C}, b + "ln1.b", -0.2f, 0.2f);
    add({3 * C, C}, b + "attn.qkv.w", -0.5f, 0.5f);
    add({3 * C}, b + "attn.qkv.b", -0.2f, 0.2f);
    add({C, C}, b + "attn.proj.w", -0.5f, 0.5f);
    add({C}, b + "attn.proj.b", -0.2f, 0.2f);
    add({C}, b + "ln2.w", 0.5f, 1.5f);
    add({C}, b + "ln2.b", -0.2f, 0.2f);
    add({4 * C, C}, b + "mlp.fc.w", -0.5f, 0.5f);
    add({4 * C}, b + "mlp.fc.b", -0.2f, 0.2f);
    add({C, 4 * C}, b + "mlp.fc2.w", -0.3f, 0.3f);
    add({C}, b + "mlp.fc2.b", -0.2f, 0.2f);
  }
  add({C}, "lnf.w", 0.5f, 1.5f);
  add({C}, "lnf.b", -0.2f, 0.2f);
  add({c.V, C}, "head", -0.5f, 0.5f);
  return p;
}

// x + attn(ln1(x)), then + mlp(ln2(.)), with the block's 12 parameters at p.
inline Var tiny_block(const Var& x, const Var* p, int NH) {
  Var h = attention(linear(layernorm(x, p[0], p[1]), p[2], p[3]), NH);
  Var x1 = add(x, linear(h, p[4], p[5]));
  Var m = mlp(layernorm(x1, p[6], p[7]), p[8], p[9], p[10], p[11]);  // as nn::GPT::block
  return add(x1, m);
}

// The mean token loss of the tiny GPT (rows whose target is -1 are ignored); with
// `checkpoint`, each block runs through recompute().
inline Var tiny_forward(const std::vector<Var>& p, const Tensor& tokens, const Tensor& targets,
                        const TinyConfig& c, bool checkpoint = false) {
  Var x = embedding(tokens, p[0], p[1]);
  for (int l = 0; l < c.L; ++l) {
    const Var* bp = &p[2 + l * kBlockParams];
    const int NH = c.NH;
    if (checkpoint)
      x = recompute([bp, NH](const std::vector<Var>& in) { return tiny_block(in[0], bp, NH); }, {x});
    else
      x = tiny_block(x, bp, NH);
  }
  const size_t f = 2 + (size_t)c.L * kBlockParams;
  Var logits = linear(layernorm(x, p[f], p[f + 1]), p[f + 2], Var());
  int64_t counted = 0;
  for (int32_t t : targets.to_int_vector()) counted += t != -1;
  return cross_entropy(logits, targets, 1.0f / (float)counted, -1);
}

// Tokens (B, T) with repeats and targets with one ignored position, from a seed.
inline void tiny_batch(const TinyConfig& c, int B, int T, uint32_t seed, Tensor* tokens,
                       Tensor* targets) {
  std::mt19937 gen(seed);
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) {
    tok[i] = (int32_t)(gen() % 5);  // a small alphabet: repeated tokens
    tgt[i] = (int32_t)(gen() % c.V);
  }
  tgt[1] = -1;
  *tokens = Tensor::from_vector(tok, {B, T});
  *targets = Tensor::from_vector(tgt, {B * T});
}

}  // namespace gpumix::test
