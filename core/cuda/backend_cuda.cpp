// The CUDA op table: every op through kernels/cuda on the logical device's compute stream
// (core/cuda/logical.h), with its GPU (DeviceProps::ordinal) current. The kernels compute in
// a 16-bit format, bf16 or f16 (fp32 accumulation), with the per-argument dtypes of
// core/op_table.h, so a run computes in bf16 or f16 here, each op in its anchor's format
// (in_16bit below); fp32 tensors appear where the contract makes them fp32 (master
// weights, parameter gradients, moments, losses, lse, mean, rstd) and in the elementwise
// ops, reductions and conversions that handle them. Tensors arrive validated by ops.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

#include "core/cuda/logical.h"
#include "core/op_table.h"
#include "core/precision.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"

namespace gpumix {

namespace {

namespace cu = kernels::cuda;
using cuda_state::kStagingBytes;
using cuda_state::Logical;
using cuda_state::logical;
using cuda_state::wait_unless_done;

float* f32(const Tensor& t) { return t.data<float>(); }
float* opt(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
int32_t* i32(const Tensor& t) { return t.data<int32_t>(); }

// The pointers of one dtype's tensors as the kernels take them (T: float, bf16 or f16); each
// op's body is written once over a Ptr<T> and the kernels' overloads pick the format.
template <class T>
struct Ptr {
  T* operator()(const Tensor& t) const { return t.data<T>(); }
  T* opt(const Tensor& t) const { return t.defined() ? t.data<T>() : nullptr; }
};

// Runs fn(Ptr<H>{}) for the 16-bit format H of `anchor`, the op's compute dtype. The compute
// kernels exist in the 16-bit formats only: another dtype is refused, with the fix.
template <class F>
void in_16bit(const char* op, const Tensor& anchor, F&& fn) {
  if (anchor.dtype() == DType::f16) return fn(Ptr<f16>{});
  GPUMIX_CHECK_INPUT(anchor.dtype() == DType::bf16, op, " on ", anchor.device().str(), " in ",
                     dtype_name(anchor.dtype()), ": the CUDA backend computes in bf16 and f16: use "
                     "--dtype bf16");
  fn(Ptr<bf16>{});
}

// Runs fn(Ptr<T>{}) for any float dtype of t (f32 too): the elementwise ops, reductions,
// fills and random numbers.
template <class F>
void in_float(const Tensor& t, F&& fn) {
  switch (t.dtype()) {
    case DType::bf16: return fn(Ptr<bf16>{});
    case DType::f16: return fn(Ptr<f16>{});
    default: return fn(Ptr<float>{});
  }
}

class CudaOps final : public OpTable {
 public:
  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor& bias) const override {
    in_16bit("matmul_forward", inp, [&](auto h) {
      const int OC = (int)weight.size(0), C = (int)weight.size(1);
      cu::matmul_forward(h(out), h(inp), h(weight), h.opt(bias), (int)(inp.numel() / C), C, OC,
                         on(inp));
    });
  }
  void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight) const override {
    matmul_backward_write(dinp, dweight, dbias, dout, inp, weight, false, false);
  }
  void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta) const override {
    in_16bit("gemm", a, [&](auto h) {
      const int m = (int)c.size(-2), n = (int)c.size(-1);
      const int k = (int)(trans_a ? a.size(-2) : a.size(-1));
      const int batch = (int)(c.numel() / ((int64_t)m * n));
      const int lda = (int)a.size(-1), ldb = (int)b.size(-1);
      const int64_t sa = (int64_t)m * k, sb = (int64_t)k * n, sc = (int64_t)m * n;
      if (c.dtype() == DType::f32)  // an fp32 result of 16-bit operands
        cu::gemm(trans_a, trans_b, m, n, k, alpha, h(a), lda, h(b), ldb, beta, f32(c), n, batch,
                 sa, sb, sc, on(a));
      else
        cu::gemm(trans_a, trans_b, m, n, k, alpha, h(a), lda, h(b), ldb, beta, h(c), n, batch,
                 sa, sb, sc, on(a));
    });
  }
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias) const override {
    in_16bit("layernorm_forward", inp, [&](auto h) {
      const int C = (int)inp.size(-1);
      cu::layernorm_forward(h(out), f32(mean), f32(rstd), h(inp), h(weight), h(bias),
                            (int)(inp.numel() / C), C, on(inp));
    });
  }
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd) const override {
    in_16bit("layernorm_backward", inp, [&](auto h) {
      const int C = (int)inp.size(-1);
      cu::layernorm_backward(h.opt(dinp), opt(dweight), opt(dbias), h(dout), h(inp), h(weight),
                             f32(mean), f32(rstd), (int)(inp.numel() / C), C, on(inp));
    });
  }
  void gelu_forward(Tensor& out, const Tensor& inp) const override {
    in_16bit("gelu_forward", inp, [&](auto h) {
      cu::gelu_forward(h(out), h(inp), inp.numel(), on(inp));
    });
  }
  void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) const override {
    in_16bit("gelu_backward", inp, [&](auto h) {
      cu::gelu_backward(h(dinp), h(inp), h(dout), inp.numel(), on(inp));
    });
  }
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH) const override {
    in_16bit("attention_forward", qkv, [&](auto h) {
      const int B = (int)qkv.size(0), T = (int)qkv.size(1), C = (int)(qkv.size(2) / 3);
      // The flash kernels take head sizes 16..128 (powers of two); the reference any other.
      if (cu::attention_flash_supported(C / NH))
        cu::attention_forward(h(out), f32(lse), h(qkv), B, T, C, NH, on(qkv));
      else
        cu::attention_forward_ref(h(out), f32(lse), h(qkv), B, T, C, NH, on(qkv));
    });
  }
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, int NH) const override {
    in_16bit("attention_backward", qkv, [&](auto h) {
      const int B = (int)qkv.size(0), T = (int)qkv.size(1), C = (int)(qkv.size(2) / 3);
      if (cu::attention_flash_supported(C / NH))
        cu::attention_backward(h(dqkv), h(dout), h(qkv), h(out), f32(lse), B, T, C, NH, on(qkv));
      else
        cu::attention_backward_ref(h(dqkv), h(dout), h(qkv), h(out), f32(lse), B, T, C, NH, on(qkv));
    });
  }
  void attention_decode(Tensor& out, const Tensor& qkv, int64_t pos, int NH) const override {
    in_16bit("attention_decode", qkv, [&](auto h) {
      const int B = (int)qkv.size(0), Tc = (int)qkv.size(1), C = (int)(qkv.size(2) / 3);
      if (cu::attention_decode_supported(C / NH, (int)pos + 1))
        cu::attention_decode(h(out), h(qkv), B, Tc, C, NH, (int)pos, on(qkv));
      else
        cu::attention_decode_ref(h(out), h(qkv), B, Tc, C, NH, (int)pos, on(qkv));
    });
  }
  void crossentropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits,
                            const Tensor& targets, int32_t ignore_index) const override {
    in_16bit("crossentropy_forward", logits, [&](auto h) {
      const int V = (int)logits.size(-1);
      cu::crossentropy_forward(f32(losses), f32(lse), h(logits), i32(targets),
                               (int)(logits.numel() / V), V, ignore_index, on(logits));
    });
  }
  void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                             const Tensor& targets, const Tensor& dloss, float scale,
                             int32_t ignore_index) const override {
    in_16bit("crossentropy_backward", logits, [&](auto h) {
      const int V = (int)logits.size(-1);
      cu::crossentropy_backward(h(dlogits), h(logits), f32(lse), i32(targets),
                                dloss.defined() ? f32(dloss) : nullptr, scale,
                                (int)(logits.numel() / V), V, ignore_index, /*accumulate=*/true,
                                on(logits));
    });
  }
  void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte,
                         const Tensor& wpe) const override {
    in_16bit("embedding_forward", wte, [&](auto h) {
      const Tensor checked = checked_tokens(tokens, (int)wte.size(0));
      cu::embedding_forward(h(out), i32(checked), h(wte), h(wpe), (int)tokens.size(0),
                            (int)tokens.size(1), (int)wte.size(1), on(wte));
    });
  }
  void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens) const override {
    in_16bit("embedding_backward", dout, [&](auto h) {
      // dwte's rows bound the tokens (a scatter outside it would write past the buffer).
      const int V = dwte.defined() ? (int)dwte.size(0) : INT_MAX;
      const Tensor checked = checked_tokens(tokens, V);
      cu::embedding_backward(opt(dwte), opt(dwpe), h(dout), i32(checked), (int)tokens.size(0),
                             (int)tokens.size(1), (int)dout.size(2), on(dout));
    });
  }
  void adamw_step(Tensor& param, Tensor& param_copy, const Tensor& grad, Tensor& m, Tensor& v,
                  const AdamWConfig& cfg, int step) const override {
    auto step_with = [&](auto copy) {
      cu::adamw_step(f32(param), copy, f32(grad), f32(m), f32(v), param.numel(), cfg.lr, cfg.beta1, cfg.beta2,
                     cfg.eps, cfg.weight_decay, step, on(param));
    };
    // The compute copy in its 16-bit format; an fp32 run passes none (ops.cpp checked).
    if (param_copy.defined() && param_copy.dtype() == DType::f16)
      step_with(param_copy.data<f16>());
    else
      step_with(Ptr<bf16>{}.opt(param_copy));
  }
  void add(Tensor& out, const Tensor& a, const Tensor& b, Stream stream) const override {
    const cudaStream_t s = logical(a.device()).use(stream);
    in_float(a, [&](auto p) { cu::add(p(out), p(a), p(b), a.numel(), s); });
  }
  void scale(Tensor& out, const Tensor& a, float s) const override {
    in_float(a, [&](auto p) { cu::scale(p(out), p(a), s, a.numel(), on(a)); });
  }
  void axpy(Tensor& out, const Tensor& a, float s) const override {
    in_float(a, [&](auto p) {
      if (out.dtype() == DType::f32)  // also fp32 accumulation of 16-bit values
        cu::axpy(f32(out), p(a), s, a.numel(), on(a));
      else
        cu::axpy(p(out), p(a), s, a.numel(), on(a));
    });
  }
  double sum(const Tensor& a) const override { return reduce({a}, false)[0]; }
  void sum_to(Tensor& out, const Tensor& a, double scale) const override {
    const cudaStream_t s = logical(a.device()).use();
    Tensor total = Tensor::empty({2}, DType::f32, a.device());  // one double
    double* d = (double*)total.raw_data();
    in_float(a, [&](auto p) { cu::sum(d, p(a), a.numel(), s); });
    cu::scale_to_f32(f32(out), d, scale, s);
  }
  double sum_squares(const Tensor& a) const override { return reduce({a}, true)[0]; }
  std::vector<double> sum_squares_many(const std::vector<Tensor>& ts) const override {
    return reduce(ts, true);
  }
  std::vector<float> read_scalars(const std::vector<Tensor>& ts) const override {
    Logical& d = logical(ts[0].device());
    const cudaStream_t s = d.use();
    std::lock_guard<std::mutex> lock(d.host_mutex);
    char* host = (char*)d.results_of(4 * (int64_t)ts.size());
    for (size_t i = 0; i < ts.size(); ++i)
      CUDA_CHECK(cudaMemcpyAsync(host + 4 * i, ts[i].raw_data(), dtype_size(ts[i].dtype()),
                                 cudaMemcpyDeviceToHost, s));
    d.fetch_bad_token();
    CUDA_CHECK(cudaStreamSynchronize(s));
    d.raise_bad_token();
    std::vector<float> out(ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      if (ts[i].dtype() == DType::f32) {
        std::memcpy(&out[i], host + 4 * i, 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, host + 4 * i, 2);
        out[i] = ts[i].dtype() == DType::f16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
      }
    }
    return out;
  }

  void fill(Tensor& t, float value) const override {
    if (t.dtype() == DType::i32)
      cu::fill(i32(t), (int32_t)value, t.numel(), on(t));
    else
      in_float(t, [&](auto p) { cu::fill(p(t), value, t.numel(), on(t)); });
  }
  void copy(Tensor& dst, const Tensor& src) const override {
    const int64_t bytes = dst.nbytes();
    if (bytes == 0 || (dst.device() == src.device() && dst.raw_data() == src.raw_data())) return;
    if (src.device().is_cpu()) return upload(dst.raw_data(), logical(dst.device()), src.raw_data(), bytes);
    if (dst.device().is_cpu()) return download(dst.raw_data(), logical(src.device()), src.raw_data(), bytes);
    if (dst.device() == src.device()) {
      CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), (size_t)bytes,
                                 cudaMemcpyDeviceToDevice, on(dst)));
      return;
    }
    copy_between(dst, src, bytes);
  }
  void convert(Tensor& out, const Tensor& in) const override {
    if (out.dtype() == in.dtype()) return copy(out, in);
    if (in.dtype() != DType::f32 && out.dtype() != DType::f32) {  // bf16 <-> f16, through fp32
      Tensor wide = Tensor::empty(in.shape(), DType::f32, in.device());
      convert(wide, in);
      return convert(out, wide);
    }
    if (out.dtype() == DType::bf16)
      cu::f32_to_bf16(out.data<bf16>(), f32(in), in.numel(), on(in));
    else if (out.dtype() == DType::f16)
      cu::f32_to_f16(out.data<f16>(), f32(in), in.numel(), on(in));
    else if (in.dtype() == DType::bf16)
      cu::bf16_to_f32(f32(out), in.data<bf16>(), in.numel(), on(in));
    else
      cu::f16_to_f32(f32(out), in.data<f16>(), in.numel(), on(in));
  }
  void uniform_(Tensor& t, uint64_t key, uint64_t offset, float low, float high) const override {
    in_float(t, [&](auto p) { cu::uniform(p(t), t.numel(), key, offset, low, high, on(t)); });
  }
  void normal_(Tensor& t, uint64_t key, uint64_t offset, float mean, float std) const override {
    in_float(t, [&](auto p) { cu::normal(p(t), t.numel(), key, offset, mean, std, on(t)); });
  }

  // ---- fused GEMM epilogues and first writes ----
  void matmul_gelu_forward(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) const override {
    in_16bit("matmul_gelu_forward", inp, [&](auto h) {
      const int OC = (int)weight.size(0), C = (int)weight.size(1);
      cu::matmul_gelu_forward(h(out), h(pre), h(inp), h(weight), h(bias),
                              (int)(inp.numel() / C), C, OC, on(inp));
    });
  }
  void matmul_backward_dgelu(Tensor& dpre, const Tensor& dout, const Tensor& weight,
                             const Tensor& pre) const override {
    in_16bit("matmul_backward_dgelu", pre, [&](auto h) {
      const int OC = (int)weight.size(0), C = (int)weight.size(1);
      cu::matmul_backward_dgelu(h(dpre), h(dout), h(weight), h(pre), (int)(pre.numel() / C), C,
                                OC, on(pre));
    });
  }
  void matmul_backward_write(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                             const Tensor& inp, const Tensor& weight, bool overwrite_dinp,
                             bool overwrite_params) const override {
    in_16bit("matmul_backward", inp, [&](auto h) {
      const int OC = (int)weight.size(0), C = (int)weight.size(1);
      // An accumulated dbias comes from the dweight product's BGRADB epilogue, which writes:
      // into this scratch, then added (OC floats, against a second read of dout).
      Tensor scratch;
      if (dbias.defined() && dweight.defined() && !overwrite_params)
        scratch = Tensor::empty({OC}, DType::f32, inp.device());
      cu::matmul_backward(h.opt(dinp), opt(dweight), opt(dbias), h(dout), h(inp), h(weight),
                          (int)(inp.numel() / C), C, OC, on(inp), overwrite_dinp, overwrite_params,
                          opt(scratch));
    });
  }

  // ---- the fused classifier ----
  void classifier_forward(Tensor& losses, Tensor& lse, Tensor& logits, const Tensor& targets, int64_t V,
                          float scale, bool grad, int32_t ignore_index) const override {
    in_16bit("classifier_forward", logits, [&](auto h) {
      const int Vp = (int)logits.size(-1);
      cu::classifier_forward(f32(losses), f32(lse), h(logits), i32(targets), scale, (int)(logits.numel() / Vp),
                             (int)V, Vp, ignore_index, grad, on(logits));
    });
  }
  void classifier_rescale(Tensor& dlogits, const Tensor& dloss) const override {
    in_16bit("classifier_rescale", dlogits, [&](auto h) {
      cu::classifier_rescale(h(dlogits), f32(dloss), dlogits.numel(), on(dlogits));
    });
  }

 private:
  // The compute stream of a tensor's device, its GPU made current.
  static cudaStream_t on(const Tensor& t) { return logical(t.device()).use(); }

  // Tokens with those outside [0, V) replaced by 0 (reported to the host, see Logical).
  // The copy comes from the device's allocator and is used on its compute stream only.
  static Tensor checked_tokens(const Tensor& tokens, int V) {
    Logical& d = logical(tokens.device());
    Tensor checked = Tensor::empty(tokens.shape(), DType::i32, tokens.device());
    d.bad_token_vocab = V;
    cu::check_tokens(i32(checked), i32(tokens), tokens.numel(), V, d.bad_token, d.use());
    return checked;
  }

  // Each tensor's sum (of squares) into one device array, one copy back, one synchronisation.
  static std::vector<double> reduce(const std::vector<Tensor>& ts, bool squares) {
    Logical& d = logical(ts[0].device());
    const cudaStream_t s = d.use();
    const int64_t n = (int64_t)ts.size();
    Tensor sums = Tensor::empty({2 * n}, DType::f32, d.device);  // (n) doubles
    double* out = (double*)sums.raw_data();
    for (int64_t i = 0; i < n; ++i) {
      const Tensor& t = ts[i];
      in_float(t, [&](auto p) {
        squares ? cu::sum_squares(out + i, p(t), t.numel(), s) : cu::sum(out + i, p(t), t.numel(), s);
      });
    }
    std::lock_guard<std::mutex> lock(d.host_mutex);
    void* host = d.results_of(8 * n);
    CUDA_CHECK(cudaMemcpyAsync(host, out, (size_t)(8 * n), cudaMemcpyDeviceToHost, s));
    d.fetch_bad_token();
    CUDA_CHECK(cudaStreamSynchronize(s));
    d.raise_bad_token();
    std::vector<double> result((size_t)n);
    std::memcpy(result.data(), host, (size_t)(8 * n));
    return result;
  }

  // Host -> device through the two staging buffers, chunk by chunk on the compute stream,
  // the buffers taken in turn across uploads (a step's inputs, then its targets): each
  // chunk waits for the copy that last used its buffer, if it is not done yet. So two
  // small uploads in a row never wait for each other, nor for the work queued before them
  // (the optimizer step), and the host runs ahead. On return the host memory may be
  // reused; the data is in place for all later work on the compute stream.
  static void upload(void* dst, Logical& d, const void* src, int64_t bytes) {
    const cudaStream_t s = d.use();
    std::lock_guard<std::mutex> lock(d.host_mutex);
    d.ensure_staging();
    for (int64_t off = 0; off < bytes; off += kStagingBytes) {
      const int b = d.next_upload;
      d.next_upload ^= 1;
      const size_t n = (size_t)std::min(kStagingBytes, bytes - off);
      wait_unless_done(d.staging_free[b]);
      std::memcpy(d.staging[b], (const char*)src + off, n);
      CUDA_CHECK(cudaMemcpyAsync((char*)dst + off, d.staging[b], n, cudaMemcpyHostToDevice, s));
      CUDA_CHECK(cudaEventRecord(d.staging_free[b], s));
    }
  }

  // Device -> host, after all earlier work on the compute stream: chunk k + 1 is copied
  // into one staging buffer while the host copies chunk k out of the other. Complete on
  // return.
  static void download(void* dst, Logical& d, const void* src, int64_t bytes) {
    const cudaStream_t s = d.use();
    std::lock_guard<std::mutex> lock(d.host_mutex);
    d.ensure_staging();
    const int64_t chunks = (bytes + kStagingBytes - 1) / kStagingBytes;
    auto size_of = [&](int64_t k) { return (size_t)std::min(kStagingBytes, bytes - k * kStagingBytes); };
    auto enqueue = [&](int64_t k) {
      const int b = (int)(k & 1);
      CUDA_CHECK(cudaMemcpyAsync(d.staging[b], (const char*)src + k * kStagingBytes, size_of(k),
                                 cudaMemcpyDeviceToHost, s));
      CUDA_CHECK(cudaEventRecord(d.staging_free[b], s));
    };
    d.fetch_bad_token();  // before the first chunk: done when any chunk's event is
    enqueue(0);
    for (int64_t k = 0; k < chunks; ++k) {
      if (k + 1 < chunks) enqueue(k + 1);
      const int b = (int)(k & 1);
      CUDA_CHECK(cudaEventSynchronize(d.staging_free[b]));
      std::memcpy((char*)dst + k * kStagingBytes, d.staging[b], size_of(k));
    }
    d.raise_bad_token();
  }

  // Between two logical devices (one GPU or two): the copy runs on dst's compute stream
  // after src's earlier work, and src's compute stream waits for it before reusing src's
  // memory. No host wait.
  static void copy_between(Tensor& dst, const Tensor& src, int64_t bytes) {
    Logical& from = logical(src.device());
    Logical& to = logical(dst.device());
    cudaEvent_t produced, consumed;
    from.use();
    CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(produced, from.compute()));
    const cudaStream_t s = to.use();
    CUDA_CHECK(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
    CUDA_CHECK(cudaStreamWaitEvent(s, produced, 0));
    CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), to.ordinal, src.raw_data(), from.ordinal,
                                   (size_t)bytes, s));
    CUDA_CHECK(cudaEventRecord(consumed, s));
    from.use();
    CUDA_CHECK(cudaStreamWaitEvent(from.compute(), consumed, 0));
    CUDA_CHECK(cudaEventDestroy(produced));  // the waits above hold what they need
    CUDA_CHECK(cudaEventDestroy(consumed));
  }
};

}  // namespace

const OpTable& cuda_ops() {
  static const CudaOps ops;
  return ops;
}

}  // namespace gpumix
