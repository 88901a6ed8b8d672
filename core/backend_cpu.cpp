// The CPU op table: every op in f32 and bf16 through kernels/cpu (the fp32 kernels or their
// bf16 overloads, whose per-argument dtypes are core/op_table.h's). Tensors arrive
// validated by ops.cpp.
#include <algorithm>
#include <cstring>

#include "core/op_table.h"
#include "core/precision.h"
#include "core/runtime.h"
#include "kernels/cpu/cpu.h"
#include "kernels/philox.h"

namespace gpumix {

namespace {

namespace k = kernels::cpu;

// Pointer of an optional fp32 tensor: nullptr when undefined ("not needed").
float* opt(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* f32(const Tensor& t) { return t.data<float>(); }
const int32_t* i32(const Tensor& t) { return t.data<int32_t>(); }
bf16* bf(const Tensor& t) { return t.data<bf16>(); }

// The pointers of compute-dtype tensors as the kernels take them: `float` for f32, `bf16`
// for bf16. Each op's body is written once over a Compute<T> and the
// kernels' overloads pick the fp32 or the bf16 kernel.
template <class T> struct Compute;
template <> struct Compute<float> {
  float* operator()(const Tensor& t) const { return f32(t); }
  float* opt(const Tensor& t) const { return gpumix::opt(t); }
};
template <> struct Compute<bf16> {
  bf16* operator()(const Tensor& t) const { return bf(t); }
  bf16* opt(const Tensor& t) const { return t.defined() ? bf(t) : nullptr; }
};

// Runs fn(Compute<T>{}) for the dtype of `anchor`, the op's compute dtype (ops.cpp checked
// that it is f32 or bf16 and that the other compute arguments agree).
template <class F>
void in_compute_dtype(const Tensor& anchor, F&& fn) {
  GPUMIX_CHECK_INPUT(anchor.dtype() != DType::f16, "f16 ", anchor.shape().str(), " on ", anchor.device().str(),
                     ": the CPU backend computes in f32 and bf16 only (f16 is a storage dtype there: "
                     "convert it with Tensor::to); compute in bf16 or f32, or on a CUDA device");
  if (anchor.dtype() == DType::bf16)
    fn(Compute<bf16>{});
  else
    fn(Compute<float>{});
}

class CpuOps final : public OpTable {
 public:
  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor& bias) const override {
    const int OC = (int)weight.size(0), C = (int)weight.size(1);
    in_compute_dtype(inp, [&](auto c) {
      k::matmul_forward(c(out), c(inp), c(weight), c.opt(bias), (int)(inp.numel() / C), C, OC);
    });
  }
  void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) const override {
    const int OC = (int)weight.size(0), C = (int)weight.size(1);
    in_compute_dtype(inp, [&](auto c) {
      k::matmul_backward(c.opt(dinp), opt(dweight), opt(dbias), c(dout), c(inp), c(weight),
                         (int)(inp.numel() / C), C, OC);
    });
  }
  void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta) const override {
    const int m = (int)c.size(-2), n = (int)c.size(-1);
    const int k_dim = (int)(trans_a ? a.size(-2) : a.size(-1));
    const int batch = (int)(c.numel() / ((int64_t)m * n));
    const int lda = (int)a.size(-1), ldb = (int)b.size(-1);
    const int64_t sa = (int64_t)m * k_dim, sb = (int64_t)k_dim * n, sc = (int64_t)m * n;
    in_compute_dtype(a, [&](auto e) {
      if (c.dtype() == DType::f32)  // also an fp32 result of bf16 operands
        k::gemm(trans_a, trans_b, m, n, k_dim, alpha, e(a), lda, e(b), ldb, beta, f32(c), n, batch,
                sa, sb, sc);
      else
        k::gemm(trans_a, trans_b, m, n, k_dim, alpha, e(a), lda, e(b), ldb, beta, e(c), n, batch,
                sa, sb, sc);
    });
  }
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) const override {
    const int C = (int)inp.size(-1);
    in_compute_dtype(inp, [&](auto c) {
      k::layernorm_forward(c(out), f32(mean), f32(rstd), c(inp), c(weight), c(bias),
                           (int)(inp.numel() / C), C);
    });
  }
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd) const override {
    const int C = (int)inp.size(-1);
    in_compute_dtype(inp, [&](auto c) {
      k::layernorm_backward(c.opt(dinp), opt(dweight), opt(dbias), c(dout), c(inp), c(weight),
                            f32(mean), f32(rstd), (int)(inp.numel() / C), C);
    });
  }
  void gelu_forward(Tensor& out, const Tensor& inp) const override {
    in_compute_dtype(inp, [&](auto c) { k::gelu_forward(c(out), c(inp), inp.numel()); });
  }
  void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const override {
    in_compute_dtype(inp, [&](auto c) { k::gelu_backward(c(dinp), c(inp), c(dout), inp.numel()); });
  }
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH) const override {
    in_compute_dtype(qkv, [&](auto c) {
      k::attention_forward(c(out), f32(lse), c(qkv), (int)qkv.size(0), (int)qkv.size(1),
                           (int)(qkv.size(2) / 3), NH);
    });
  }
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int NH) const override {
    in_compute_dtype(qkv, [&](auto c) {
      k::attention_backward(c(dqkv), c(dout), c(qkv), c(out), f32(lse), (int)qkv.size(0),
                            (int)qkv.size(1), (int)(qkv.size(2) / 3), NH);
    });
  }
  void attention_decode(Tensor& out, const Tensor& qkv, int64_t pos, int NH) const override {
    in_compute_dtype(qkv, [&](auto c) {
      k::attention_decode(c(out), c(qkv), (int)qkv.size(0), (int)qkv.size(1), (int)(qkv.size(2) / 3), NH,
                          (int)pos);
    });
  }
  void crossentropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits,
                            const Tensor& targets, int32_t ignore_index) const override {
    const int V = (int)logits.size(-1);
    in_compute_dtype(logits, [&](auto c) {
      k::crossentropy_forward(f32(losses), f32(lse), c(logits), i32(targets),
                              (int)(logits.numel() / V), V, ignore_index);
    });
  }
  void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                             const Tensor& targets, const Tensor& dloss, float scale,
                             int32_t ignore_index) const override {
    const int V = (int)logits.size(-1);
    const float factor = dloss.defined() ? scale * f32(dloss)[0] : scale;
    in_compute_dtype(logits, [&](auto c) {
      k::crossentropy_backward(c(dlogits), c(logits), f32(lse), i32(targets), factor,
                               (int)(logits.numel() / V), V, ignore_index);
    });
  }
  void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe) const override {
    const int V = (int)wte.size(0);
    const int32_t* tok = i32(tokens);
    for (int64_t i = 0; i < tokens.numel(); ++i)
      GPUMIX_CHECK(tok[i] >= 0 && tok[i] < V, "embedding_forward: token ", tok[i], " at position ",
                   i, " is outside the vocabulary of ", V, "; the data does not match this model");
    in_compute_dtype(wte, [&](auto c) {
      k::embedding_forward(c(out), tok, c(wte), c(wpe), (int)tokens.size(0), (int)tokens.size(1),
                           (int)wte.size(1));
    });
  }
  void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) const override {
    in_compute_dtype(dout, [&](auto c) {
      k::embedding_backward(opt(dwte), opt(dwpe), c(dout), i32(tokens), (int)tokens.size(0),
                            (int)tokens.size(1), (int)dout.size(2));
    });
  }
  void adamw_step(Tensor& param, Tensor& param_copy, const Tensor& grad, Tensor& m, Tensor& v,
                  const AdamWConfig& cfg, int step) const override {
    if (param_copy.defined())
      k::adamw_step(f32(param), bf(param_copy), f32(grad), f32(m), f32(v), param.numel(), cfg.lr,
                    cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step);
    else
      k::adamw_step(f32(param), f32(grad), f32(m), f32(v), param.numel(), cfg.lr, cfg.beta1,
                    cfg.beta2, cfg.eps, cfg.weight_decay, step);
  }
  void add(Tensor& out, const Tensor& a, const Tensor& b, Stream) const override {
    in_compute_dtype(a, [&](auto c) { k::add(c(out), c(a), c(b), a.numel()); });
  }
  void scale(Tensor& out, const Tensor& a, float s) const override {
    in_compute_dtype(a, [&](auto c) { k::scale(c(out), c(a), s, a.numel()); });
  }
  void axpy(Tensor& out, const Tensor& a, float s) const override {
    in_compute_dtype(a, [&](auto c) {
      if (out.dtype() == DType::f32)  // also fp32 accumulation of bf16 values
        k::axpy(f32(out), c(a), s, a.numel());
      else
        k::axpy(c(out), c(a), s, a.numel());
    });
  }
  void sum_to(Tensor& out, const Tensor& a, double scale) const override {
    f32(out)[0] = (float)(scale * sum(a));
  }
  double sum(const Tensor& a) const override {
    double total = 0;
    in_compute_dtype(a, [&](auto c) { total = k::sum(c(a), a.numel()); });
    return total;
  }
  double sum_squares(const Tensor& a) const override {
    double total = 0;
    in_compute_dtype(a, [&](auto c) { total = k::sum_squares(c(a), a.numel()); });
    return total;
  }

  std::vector<double> sum_squares_many(const std::vector<Tensor>& ts) const override {
    std::vector<double> out;
    for (const Tensor& t : ts) out.push_back(sum_squares(t));
    return out;
  }
  std::vector<float> read_scalars(const std::vector<Tensor>& ts) const override {
    std::vector<float> out;
    for (const Tensor& t : ts)
      out.push_back(t.dtype() == DType::f32    ? *f32(t)
                    : t.dtype() == DType::f16 ? (float)*t.data<f16>()
                                              : (float)*t.data<bf16>());
    return out;
  }

  void fill(Tensor& t, float value) const override {
    if (t.dtype() == DType::f16) {  // storage only on the CPU: the value rounded once
      std::fill(t.data<f16>(), t.data<f16>() + t.numel(), f16(value));
      return;
    }
    if (t.dtype() != DType::i32) {
      in_compute_dtype(t, [&](auto c) { k::fill(c(t), value, t.numel()); });
      return;
    }
    int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = (int32_t)value;
  }
  void copy(Tensor& dst, const Tensor& src) const override {
    if (dst.nbytes() && dst.raw_data() != src.raw_data())
      std::memmove(dst.raw_data(), src.raw_data(), (size_t)dst.nbytes());
  }
  void convert(Tensor& out, const Tensor& in) const override {
    if (out.dtype() == in.dtype()) return copy(out, in);
    if (in.dtype() != DType::f32 && out.dtype() != DType::f32) {  // bf16 <-> f16, through fp32
      Tensor wide = Tensor::empty(in.shape(), DType::f32, in.device());
      convert(wide, in);
      return convert(out, wide);
    }
    if (out.dtype() == DType::bf16)
      k::f32_to_bf16(bf(out), f32(in), in.numel());
    else if (out.dtype() == DType::f16)
      k::f32_to_f16(out.data<f16>(), f32(in), in.numel());
    else if (in.dtype() == DType::bf16)
      k::bf16_to_f32(f32(out), bf(in), in.numel());
    else
      k::f16_to_f32(f32(out), in.data<f16>(), in.numel());
  }
  void uniform_(Tensor& t, uint64_t key, uint64_t offset, float low, float high) const override {
    generate(t, [&](int64_t i) { return low + (high - low) * philox_uniform_at(key, offset + i); });
  }
  void normal_(Tensor& t, uint64_t key, uint64_t offset, float mean, float std) const override {
    generate(t, [&](int64_t i) { return mean + std * philox_normal_at(key, offset + i); });
  }

  // ---- fused GEMM epilogues and first writes ----
  // The CPU runs the passes the GPU fuses, so its results are bitwise those of the separate
  // ops (each with its reference twin in kernels/cpu/ref.cpp).
  void matmul_gelu_forward(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) const override {
    matmul_forward(pre, inp, weight, bias);
    gelu_forward(out, pre);
  }
  void matmul_backward_dgelu(Tensor& dpre, const Tensor& dout, const Tensor& weight,
                             const Tensor& pre) const override {
    Tensor dgelu = Tensor::zeros(pre.shape(), pre.dtype(), pre.device());  // d(gelu(pre))
    Tensor none;
    matmul_backward(dgelu, none, none, dout, pre, weight);
    fill(dpre, 0.0f);
    gelu_backward(dpre, pre, dgelu);
  }
  void matmul_backward_write(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                             const Tensor& inp, const Tensor& weight, bool overwrite_dinp,
                             bool overwrite_params) const override {
    if (overwrite_dinp && dinp.defined()) fill(dinp, 0.0f);
    if (overwrite_params && dweight.defined()) fill(dweight, 0.0f);
    if (overwrite_params && dbias.defined()) fill(dbias, 0.0f);
    matmul_backward(dinp, dweight, dbias, dout, inp, weight);
  }

  // ---- the fused classifier ----
  void classifier_forward(Tensor& losses, Tensor& lse, Tensor& logits, const Tensor& targets, int64_t V,
                          float scale, bool grad, int32_t ignore_index) const override {
    const int Vp = (int)logits.size(-1);
    in_compute_dtype(logits, [&](auto c) {
      k::classifier_forward(f32(losses), f32(lse), c(logits), i32(targets), scale, (int)(logits.numel() / Vp),
                            (int)V, Vp, ignore_index, grad);
    });
  }
  void classifier_rescale(Tensor& dlogits, const Tensor& dloss) const override {
    const float f = f32(dloss)[0];  // host memory: the device's own
    if (f != 1.0f) scale(dlogits, dlogits, f);
  }

 private:
  template <class F>
  static void generate(Tensor& t, F&& value_at) {
    const int64_t n = t.numel();
    if (t.dtype() == DType::f32) {
      float* p = f32(t);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = value_at(i);
    } else if (t.dtype() == DType::f16) {
      f16* p = t.data<f16>();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = f16(value_at(i));
    } else {
      bf16* p = t.data<bf16>();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = bf16(value_at(i));
    }
  }
};

}  // namespace

const OpTable& cpu_ops() {
  static const CpuOps ops;
  return ops;
}

const OpTable& device_ops(Device device) {
#ifdef GPUMIX_CORE_CUDA
  if (device.is_cuda()) return cuda_ops();
#endif
  device_runtime(device);  // throws for a device kind this build lacks (one error, runtime.h's)
  return cpu_ops();
}

}  // namespace gpumix
