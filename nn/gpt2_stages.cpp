// GPT-2's stages (nn/model_stages.h): its parameter layout, its block on the tape, the
// key/value cache's step and the kernels of its training step. Its shape: nn/gpt2_family.cpp.
#include <cmath>

#include "autograd/functions.h"
#include "core/ops.h"
#include "nn/gpt.h"
#include "nn/model_stages.h"

namespace gpumix {

namespace {

int param_index(const GPT& model, const std::string& name) {
  const std::vector<ParamInfo>& layout = model.layout();
  for (size_t i = 0; i < layout.size(); ++i)
    if (layout[i].name == name) return (int)i;
  GPUMIX_CHECK(false, "KVCache: the model has no parameter '", name, "'");
}

// Incremental decoding: per layer, the qkv rows (1, T, 3C) of the positions seen (the q part
// kept so that the prompt's attention runs on the cache itself, with no copy), in the
// model's compute dtype: L x T x 3C values (gpt2, fp32: 113 MB).
class Gpt2Decoder final : public DecodeState {
 public:
  explicit Gpt2Decoder(const GPT& model) : model_(model) {
    const GPTConfig& c = model.config();
    for (int l = 0; l < c.L; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      const auto at = [&](const char* suffix) { return param_index(model, h + suffix); };
      layers_.push_back({at("ln_1.weight"), at("ln_1.bias"), at("attn.c_attn.weight"), at("attn.c_attn.bias"),
                         at("attn.c_proj.weight"), at("attn.c_proj.bias"), at("ln_2.weight"), at("ln_2.bias"),
                         at("mlp.c_fc.weight"), at("mlp.c_fc.bias"), at("mlp.c_proj.weight"), at("mlp.c_proj.bias")});
      qkv_.push_back(Tensor::empty({1, c.T, 3 * c.C}, model.compute_dtype(), model.device()));
    }
    wte_ = param_index(model, "wte");
    wpe_ = param_index(model, "wpe");
    lnf_w_ = param_index(model, "ln_f.weight");
    lnf_b_ = param_index(model, "ln_f.bias");
  }

  std::vector<float> forward(const Tensor& tokens, int64_t rows, int64_t p0) override;

 private:
  struct Layer {
    int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
  };
  const Tensor& w(int i) const {
    const Tensor& t = model_.param(i).value();
    GPUMIX_CHECK(t.defined(), "KVCache: parameter ", model_.layout()[i].name, " is not bound");
    return t;
  }

  const GPT& model_;
  std::vector<Layer> layers_;
  int wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Tensor> qkv_;  // per layer (1, T, 3C), rows 0..p0-1 filled
};

// The ops of GPT::block and GPT::head (nn/gpt.cpp), without the tape, on `rows` new rows at
// positions n_.. : their qkv go into the cache's rows, their attention reads rows 0..n_+rows-1.
std::vector<float> Gpt2Decoder::forward(const Tensor& tokens, int64_t rows, int64_t p0) {
  const GPTConfig& c = model_.config();
  const int64_t C = c.C, T = c.T;
  const DType dt = model_.compute_dtype();
  const Device dev = model_.device();
  const auto act = [&](int64_t width) { return Tensor::empty({1, rows, width}, dt, dev); };
  Tensor mean = Tensor::empty({rows}, DType::f32, dev), rstd = Tensor::empty({rows}, DType::f32, dev);
  // Positions p0..: wpe from row p0 on (the kernel reads wpe[t] for the t-th row).
  const Tensor wpe = w(wpe_).flat_slice(p0 * C, (T - p0) * C).view({T - p0, C});
  // wte's V rows (the rest is the padding of GPTConfig::Vp): the lookup and the V logits.
  const Tensor wte = w(wte_).flat_slice(0, (int64_t)c.V * C).view({c.V, C});
  Tensor x = act(C), h = act(C), att = act(C), fc = act(4 * C);
  ops::embedding_forward(x, tokens, wte, wpe);
  for (int l = 0; l < c.L; ++l) {
    const Layer& y = layers_[l];
    ops::layernorm_forward(h, mean, rstd, x, w(y.ln1_w), w(y.ln1_b));
    Tensor qkv_rows = qkv_[l].flat_slice(p0 * 3 * C, rows * 3 * C).view({1, rows, 3 * C});
    ops::matmul_forward(qkv_rows, h, w(y.qkv_w), w(y.qkv_b));
    if (p0 == 0) {  // the prompt: attention over its own rows, the cache's first ones
      Tensor lse = Tensor::empty({1, c.NH, rows}, DType::f32, dev);
      ops::attention_forward(att, lse, qkv_rows, c.NH);
    } else {
      GPUMIX_CHECK(rows == 1, "KVCache: ", rows, " rows after ", p0, " cached ones; steps take one");
      ops::attention_decode(att, qkv_[l], p0, c.NH);
    }
    ops::matmul_forward(h, att, w(y.proj_w), w(y.proj_b));
    ops::add(x, x, h);
    ops::layernorm_forward(h, mean, rstd, x, w(y.ln2_w), w(y.ln2_b));
    ops::matmul_forward(fc, h, w(y.fc_w), w(y.fc_b));
    ops::gelu_forward(fc, fc);
    ops::matmul_forward(h, fc, w(y.fc2_w), w(y.fc2_b));
    ops::add(x, x, h);
  }
  // The head on the last row only: the next id's logits.
  const Tensor last = x.flat_slice((rows - 1) * C, C).view({1, 1, C});
  Tensor hl = Tensor::empty({1, 1, C}, dt, dev);
  Tensor m1 = Tensor::empty({1}, DType::f32, dev), r1 = Tensor::empty({1}, DType::f32, dev);
  ops::layernorm_forward(hl, m1, r1, last, w(lnf_w_), w(lnf_b_));
  Tensor logits = Tensor::empty({1, 1, c.V}, dt, dev);
  ops::matmul_forward(logits, hl, wte, Tensor());
  return logits.to(Device::cpu()).to_vector();
}


using Run = std::function<void()>;

class Gpt2Stages final : public ModelStages {
 public:
  std::vector<ParamInfo> param_layout(const GPTConfig& config) const override {
    const int64_t C = config.C, V = config.V, T = config.T;
    const float std_w = 0.02f;
    const float std_residual = 0.02f / std::sqrt(2.0f * config.L);
    std::vector<ParamInfo> layout;
    int64_t offset = 0;
    auto add = [&](std::string name, Shape shape, int unit, bool decay, float init_std) {
      layout.push_back({std::move(name), shape, offset, unit, decay, init_std, shape.numel()});
      offset += shape.numel();
    };
    add("wte", {config.Vp(), C}, 0, true, std_w);  // (Vp, C), also the LM head
    layout.back().used = V * C;                     // rows V..Vp-1: padding
    add("wpe", {T, C}, 0, true, std_w);  // (T, C)
    for (int l = 0; l < config.L; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      const int unit = l + 1;
      add(h + "ln_1.weight", {C}, unit, false, -1);
      add(h + "ln_1.bias", {C}, unit, false, 0);
      add(h + "attn.c_attn.weight", {3 * C, C}, unit, true, std_w);
      add(h + "attn.c_attn.bias", {3 * C}, unit, false, 0);
      add(h + "attn.c_proj.weight", {C, C}, unit, true, std_residual);
      add(h + "attn.c_proj.bias", {C}, unit, false, 0);
      add(h + "ln_2.weight", {C}, unit, false, -1);
      add(h + "ln_2.bias", {C}, unit, false, 0);
      add(h + "mlp.c_fc.weight", {4 * C, C}, unit, true, std_w);
      add(h + "mlp.c_fc.bias", {4 * C}, unit, false, 0);
      add(h + "mlp.c_proj.weight", {C, 4 * C}, unit, true, std_residual);
      add(h + "mlp.c_proj.bias", {C}, unit, false, 0);
    }
    add("ln_f.weight", {C}, config.L + 1, false, -1);
    add("ln_f.bias", {C}, config.L + 1, false, 0);
    GPUMIX_CHECK(offset == config.total_params(), "parameter layout has ", offset,
                 " elements but the config counts ", config.total_params());
    return layout;
  }

  Var embed(const GPT& m, const Tensor& tokens) const override {
    return embedding(tokens, m.param_used(0), m.param(1));  // wte's V rows, wpe
  }

  Var block(const GPT& m, int l, const Var& x) const override {
    const int u = l + 1;
    auto p = [&](const char* suffix) -> const Var& { return m.param_named(u, suffix); };
    // Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
    Var h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"));
    h = linear(h, p("attn.c_attn.weight"), p("attn.c_attn.bias"));  // (B, T, 3C)
    h = attention(h, m.config().NH);                                  // (B, T, C)
    h = linear(h, p("attn.c_proj.weight"), p("attn.c_proj.bias"));
    Var x1 = add(x, h);
    h = layernorm(x1, p("ln_2.weight"), p("ln_2.bias"));
    // (B, T, 4C) in the middle, GELU in the products' epilogues
    h = mlp(h, p("mlp.c_fc.weight"), p("mlp.c_fc.bias"), p("mlp.c_proj.weight"), p("mlp.c_proj.bias"));
    return add(x1, h);
  }

  Var head(const GPT& m, const Var& x, bool padded) const override {
    const int u = m.config().L + 1;
    Var h = layernorm(x, m.param_named(u, "ln_f.weight"), m.param_named(u, "ln_f.bias"));
    // tied: logits = h @ wte^T, (B, T, Vp), or on wte's V rows (no padding column to mask)
    return linear(h, padded ? m.param(0) : m.param_used(0), Var());
  }

  // wte's first V rows (the rest is the vocabulary's padding, GPTConfig::Vp), then wpe.
  void embed_backward(const GPTConfig& c, const Tensor& g0, const Tensor& dx, const Tensor& tokens) const override {
    const int64_t C = c.C;
    Tensor dwte = g0.flat_slice(0, (int64_t)c.V * C).view({c.V, C});
    Tensor dwpe = g0.flat_slice(c.Vp() * C, (int64_t)c.T * C).view({c.T, C});
    ops::embedding_backward(dwte, dwpe, dx, tokens);
  }

  std::unique_ptr<DecodeState> decoder(const GPT& model) const override {
    return std::make_unique<Gpt2Decoder>(model);
  }

  // The kernels of one step, in step order. Counts (per_block, outside) follow
  // autograd/functions.cpp and block() above: a Linear's backward is one
  // matmul_backward_write call that computes both products (timed here apart: the
  // activation gradient, written with beta 0 as its first contribution, and the weight
  // gradient, with the bias gradient in its BGRADB epilogue); the MLP's GELU rides in
  // mlp_up's forward (GELU_AUX_BIAS) and mlp_down's activation gradient (DGELU); add_grad
  // copies a first contribution; only attention's dqkv is still a zeroed buffer; the step
  // runs each block once forward and once backward.
  std::vector<StepKernel> step_kernels(const GPTConfig& m, int64_t B, int64_t T, DType dt, Device dev) const override {
    const int64_t C = m.C, V = m.V, N = B * T, NH = m.NH;
    const double e = (double)dtype_size(dt), f4 = 4;  // bytes of a compute element, of an fp32 one
    const DType f32 = DType::f32;
    std::vector<StepKernel> cases;
    auto add = [&](std::string role, std::string group, std::string what, int per_block, int outside, double flops,
                   double bytes, std::function<Run()> make) {
      cases.push_back({std::move(role), std::move(group), std::move(what), per_block, outside, flops, bytes,
                       std::move(make)});
    };
    auto shape3 = [&](int64_t k) { return str("(", B, ",", T, ",", k, ")"); };

    // A Linear of K inputs and OC outputs: forward, the activation gradient, the weight (and
    // bias) gradient. The LM head has no bias and its weight is wte (tied).
    // gelu_out: its output goes through a GELU (mlp_up); dgelu_in: its input came out of one
    // (mlp_down), so its activation gradient goes back through it.
    auto linear = [&](const std::string& name, const std::string& group, int64_t K, int64_t OC, bool bias,
                      int per_block, int outside, bool gelu_out = false, bool dgelu_in = false) {
      const double mm = 2.0 * N * K * OC;
      const std::string shape = str(shape3(K), "x(", OC, ",", K, ")");
      add(name + ".fwd", group, (gelu_out ? "matmul_gelu_forward " : "matmul_forward ") + shape, per_block, outside,
          mm + (bias ? N * OC : 0) + (gelu_out ? 12.0 * N * OC : 0),
          e * (N * K + OC * K + (bias ? OC : 0) + (gelu_out ? 2 : 1) * N * OC), [=] {
            Tensor x = named_random_tensor({B, T, K}, dev, "bench.x", dt), w = named_random_tensor({OC, K}, dev, "bench.w", dt);
            Tensor b = bias ? named_random_tensor({OC}, dev, "bench.b", dt) : Tensor();
            Tensor out = Tensor::empty({B, T, OC}, dt, dev), pre = Tensor::empty({B, T, OC}, dt, dev);
            return Run([=]() mutable {
              if (gelu_out)
                ops::matmul_gelu_forward(out, pre, x, w, b);
              else
                ops::matmul_forward(out, x, w, b);
            });
          });
      add(name + ".bwd_in", group, (dgelu_in ? "matmul_backward_dgelu " : "matmul_backward dinp (written) ") + shape,
          per_block, outside, mm + (dgelu_in ? 20.0 * N * K : 0), e * (N * OC + OC * K + (dgelu_in ? 2 : 1) * N * K), [=] {
            Tensor x = named_random_tensor({B, T, K}, dev, "bench.x", dt), w = named_random_tensor({OC, K}, dev, "bench.w", dt);
            Tensor dout = named_random_tensor({B, T, OC}, dev, "bench.dy", dt), dx = Tensor::empty({B, T, K}, dt, dev);
            return Run([=]() mutable {
              Tensor none_w, none_b;
              if (dgelu_in)  // x stands for the GELU's input
                ops::matmul_backward_dgelu(dx, dout, w, x);
              else
                ops::matmul_backward_write(dx, none_w, none_b, dout, x, w, true, false);
            });
          });
      // The bias gradient: BGRADB into an OC scratch, added (micro-batches accumulate).
      add(name + ".bwd_w", group, "matmul_backward dweight " + shape, per_block, outside, mm + (bias ? N * OC : 0),
          e * (N * OC + N * K) + f4 * 2 * (OC * K + (bias ? 2 * OC : 0)), [=] {
            Tensor x = named_random_tensor({B, T, K}, dev, "bench.x", dt), w = named_random_tensor({OC, K}, dev, "bench.w", dt);
            Tensor dout = named_random_tensor({B, T, OC}, dev, "bench.dy", dt), dw = Tensor::zeros({OC, K}, f32, dev);
            Tensor db = bias ? Tensor::zeros({OC}, f32, dev) : Tensor();
            return Run([=]() mutable {
              Tensor none_x;
              ops::matmul_backward(none_x, dw, db, dout, x, w);
            });
          });
    };
    auto layernorm = [&](int per_block, int outside) {
      add("ln.fwd", "block", "layernorm_forward " + shape3(C), per_block, outside, 8.0 * N * C,
          e * (2 * N * C + 2 * C) + f4 * 2 * N, [=] {
            Tensor x = named_random_tensor({B, T, C}, dev, "bench.x", dt), w = named_random_tensor({C}, dev, "bench.w", dt),
                   b = named_random_tensor({C}, dev, "bench.b", dt);
            Tensor out = Tensor::empty({B, T, C}, dt, dev), mean = Tensor::empty({N}, f32, dev),
                   rstd = Tensor::empty({N}, f32, dev);
            return Run([=]() mutable { ops::layernorm_forward(out, mean, rstd, x, w, b); });
          });
      add("ln.bwd", "block", "layernorm_backward " + shape3(C), per_block, outside, 14.0 * N * C,
          e * (4 * N * C + C) + f4 * (2 * N + 4 * C), [=] {
            Tensor x = named_random_tensor({B, T, C}, dev, "bench.x", dt), w = named_random_tensor({C}, dev, "bench.w", dt),
                   b = named_random_tensor({C}, dev, "bench.b", dt);
            Tensor out = Tensor::empty({B, T, C}, dt, dev), mean = Tensor::empty({N}, f32, dev),
                   rstd = Tensor::empty({N}, f32, dev);
            ops::layernorm_forward(out, mean, rstd, x, w, b);
            Tensor dout = named_random_tensor({B, T, C}, dev, "bench.dy", dt), dx = Tensor::zeros({B, T, C}, dt, dev),
                   dw = Tensor::zeros({C}, f32, dev), db = Tensor::zeros({C}, f32, dev);
            return Run([=]() mutable { ops::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd); });
          });
    };

    // Embedding (unit 0).
    add("embed.fwd", "embed", str("embedding_forward tokens (", B, ",", T, "), wte (", V, ",", C, ")"), 0, 1, 1.0 * N * C,
        e * (3 * N * C) + f4 * N, [=] {
          Tensor tokens = hashed_random_tokens(B, T, (int)V, dev), wte = named_random_tensor({V, C}, dev, "bench.wte", dt),
                 wpe = named_random_tensor({m.T, C}, dev, "bench.wpe", dt), out = Tensor::empty({B, T, C}, dt, dev);
          return Run([=]() mutable { ops::embedding_forward(out, tokens, wte, wpe); });
        });
    // One block (nn/gpt.cpp GPT::block), forward then backward.
    layernorm(2, 1);  // ln_1, ln_2, and the head's ln_f
    linear("qkv", "block", C, 3 * C, true, 1, 0);
    const double attn_mm = 2.0 * B * T * T * C;  // QK^T and PV, causal (half the square)
    add("attn.fwd", "block", str("attention_forward qkv ", shape3(3 * C), ", NH ", NH), 1, 0, attn_mm,
        e * (4 * N * C) + f4 * B * NH * T, [=] {
          Tensor qkv = named_random_tensor({B, T, 3 * C}, dev, "bench.qkv", dt), out = Tensor::empty({B, T, C}, dt, dev),
                 lse = Tensor::empty({B, NH, T}, f32, dev);
          return Run([=]() mutable { ops::attention_forward(out, lse, qkv, (int)NH); });
        });
    add("attn.bwd", "block", str("attention_backward qkv ", shape3(3 * C), ", NH ", NH), 1, 0, 2.5 * attn_mm,
        e * (3 * N * C + 2 * N * C + 6 * N * C) + f4 * B * NH * T, [=] {
          Tensor qkv = named_random_tensor({B, T, 3 * C}, dev, "bench.qkv", dt), out = Tensor::empty({B, T, C}, dt, dev),
                 lse = Tensor::empty({B, NH, T}, f32, dev);
          ops::attention_forward(out, lse, qkv, (int)NH);
          Tensor dout = named_random_tensor({B, T, C}, dev, "bench.dy", dt), dqkv = Tensor::zeros({B, T, 3 * C}, dt, dev);
          return Run([=]() mutable { ops::attention_backward(dqkv, dout, qkv, out, lse, (int)NH); });
        });
    linear("attn_proj", "block", C, C, true, 1, 0);
    linear("mlp_up", "block", C, 4 * C, true, 1, 0, /*gelu_out=*/true);  // GELU_AUX_BIAS
    linear("mlp_down", "block", 4 * C, C, true, 1, 0, false, /*dgelu_in=*/true);  // DGELU
    add("residual.fwd", "block", "add " + shape3(C), 2, 0, 1.0 * N * C, e * 3 * N * C, [=] {
      Tensor a = named_random_tensor({B, T, C}, dev, "bench.a", dt), b = named_random_tensor({B, T, C}, dev, "bench.b", dt),
             out = Tensor::empty({B, T, C}, dt, dev);
      return Run([=]() mutable { ops::add(out, a, b); });
    });
    // add_grad (autograd/tape.cpp): each residual add's backward gives dout to both inputs'
    // gradients, in the block each one's first contribution: a copy.
    add("residual.bwd", "block", "copy (add_grad, first contribution) " + shape3(C), 4, 0, 0.0, e * 2 * N * C, [=] {
      Tensor g = named_random_tensor({B, T, C}, dev, "bench.dy", dt), acc = Tensor::empty({B, T, C}, dt, dev);
      return Run([=]() mutable { ops::convert(acc, g); });
    });
    // The activation gradient a block's backward still zeroes (grad_buffer): attention's dqkv,
    // which attention_backward accumulates into.
    add("grad_zero.act", "block", str("fill 1x", shape3(3 * C)), 1, 0, 0, e * 3.0 * N * C, [=] {
      Tensor t = Tensor::empty({B, T, 3 * C}, dt, dev);
      return Run([=]() mutable { ops::fill(t, 0.0f); });
    });
    // Head (unit L+1): ln_f (counted with ln above), the tied LM head, the loss.
    linear("lm_head", "head", C, V, false, 0, 1);
    add("xent.fwd", "head", str("crossentropy_forward + sum_to logits (", N, ",", V, ")"), 0, 1, 4.0 * N * V,
        e * N * V + f4 * 4 * N, [=] {
          Tensor logits = named_random_tensor({N, V}, dev, "bench.logits", dt), targets = hashed_random_tokens(B, T, (int)V, dev);
          Tensor flat_targets = targets.reshape({N});
          Tensor losses = Tensor::empty({N}, f32, dev), lse = Tensor::empty({N}, f32, dev),
                 loss = Tensor::empty({1}, f32, dev);
          const double scale = 1.0 / (double)N;
          return Run([=]() mutable {
            ops::crossentropy_forward(losses, lse, logits, flat_targets);
            ops::sum_to(loss, losses, scale);
          });
        });
    add("xent.bwd", "head", str("crossentropy_backward logits (", N, ",", V, ")"), 0, 1, 4.0 * N * V,
        e * 3 * N * V + f4 * 2 * N, [=] {
          Tensor logits = named_random_tensor({N, V}, dev, "bench.logits", dt), targets = hashed_random_tokens(B, T, (int)V, dev);
          Tensor flat_targets = targets.reshape({N});
          Tensor losses = Tensor::empty({N}, f32, dev), lse = Tensor::empty({N}, f32, dev);
          ops::crossentropy_forward(losses, lse, logits, flat_targets);
          Tensor dlogits = Tensor::zeros({N, V}, dt, dev), dloss = Tensor::full({1}, 1.0f, f32, dev);
          const float scale = 1.0f / (float)N;
          return Run([=]() mutable { ops::crossentropy_backward(dlogits, logits, lse, flat_targets, dloss, scale); });
        });
    // The head's zeroed activation gradients: the logits', ln_f's output's and its input's.
    add("grad_zero.head", "head", str("fill (", N, ",", V, ") 2x", shape3(C)), 0, 1, 0, e * (N * V + 2.0 * N * C), [=] {
      std::vector<Tensor> ts{Tensor::empty({N, V}, dt, dev), Tensor::empty({B, T, C}, dt, dev),
                             Tensor::empty({B, T, C}, dt, dev)};
      return Run([=]() mutable {
        for (Tensor& t : ts) ops::fill(t, 0.0f);
      });
    });
    add("embed.bwd", "embed", str("embedding_backward dwte (", V, ",", C, ") f32"), 0, 1, 2.0 * N * C,
        e * N * C + f4 * (2 * N * C + 2 * T * C + N), [=] {
          Tensor tokens = hashed_random_tokens(B, T, (int)V, dev), dout = named_random_tensor({B, T, C}, dev, "bench.dy", dt);
          Tensor dwte = Tensor::zeros({V, C}, f32, dev), dwpe = Tensor::zeros({m.T, C}, f32, dev);
          return Run([=]() mutable { ops::embedding_backward(dwte, dwpe, dout, tokens); });
        });

    return cases;
  }
};

}  // namespace

const ModelStages& gpt2_stages() {
  static const Gpt2Stages stages;
  return stages;
}

}  // namespace gpumix
