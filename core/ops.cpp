// Validation and the one dispatch point of every tensor op.
#include "core/ops.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/backend.h"

namespace gpumix::ops {

namespace {

// Emulated slowdown (DESIGN.md "Devices and emulation"): a device with slowdown f > 1 takes
// f x each op's own time, by waiting after the op. On one OpenMP thread an op's own time
// is its CPU time, so that emulated devices sharing a machine's cores keep their speeds:
// the time an op spent waiting for a core that another rank held comes out of the wait.
// With several threads it is the wall time (the caller's CPU time would miss the others';
// such ranks get cores of their own, dist/engine/launch.h). What is owed carries over from op to
// op, so waits too short to sleep and sleeps that overran even out (a little credit is
// kept, never much). Real devices have f = 1: no cost beyond one lookup.
class SlowdownGuard {
 public:
  explicit SlowdownGuard(Device device) : factor_(device_props(device).slowdown) {
    if (factor_ > 1) {
      wall_ = now_s();
      alone_ = omp_get_max_threads() == 1;
      if (alone_) cpu_ = thread_cpu_s();
    }
  }
  ~SlowdownGuard() {
    if (factor_ <= 1) return;
    const double wall = now_s() - wall_, own = alone_ ? thread_cpu_s() - cpu_ : wall;
    owed_s = std::max(owed_s + factor_ * own - wall, -kMaxCredit_s);
    if (owed_s < kMinSleep_s) return;
    const double t0 = now_s();
    std::this_thread::sleep_for(std::chrono::duration<double>(owed_s));
    owed_s -= now_s() - t0;
  }

 private:
  static constexpr double kMinSleep_s = 50e-6, kMaxCredit_s = 2e-3;
  static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  static double thread_cpu_s() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
  }
  static thread_local double owed_s;  // this thread's wait still to serve (< 0: credit)
  double factor_, wall_ = 0, cpu_ = 0;
  bool alone_ = false;
};
thread_local double SlowdownGuard::owed_s = 0;

// The dispatch point: every op reaches its device's backend through here.
template <class F>
auto dispatch(Device device, F&& run) {
  SlowdownGuard guard(device);
  return run(device_backend(device));
}

void check_defined(const char* op, const char* name, const Tensor& t) {
  GPUMIX_CHECK(t.defined(), op, ": ", name, " is undefined");
}

void check_float(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  GPUMIX_CHECK(t.dtype() != DType::i32, op, ": ", name, " must be a floating-point tensor, got i32 ",
               t.shape().str());
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  check_defined(op, name, t);
  GPUMIX_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ",
               dtype_name(t.dtype()), " ", t.shape().str());
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected) {
  GPUMIX_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
               expected.str());
}

void check_numel(const char* op, const char* name, const Tensor& t, int64_t n) {
  GPUMIX_CHECK(t.numel() == n, op, ": ", name, " has ", t.numel(), " elements ", t.shape().str(),
               ", expected ", n);
}

void check_device(const char* op, const char* name, const Tensor& t, Device device) {
  GPUMIX_CHECK(t.device() == device, op, ": ", name, " is on ", t.device().str(),
               " but the op runs on ", device.str());
}

void check_nonempty(const char* op, const char* name, const Tensor& t) {
  GPUMIX_CHECK(t.numel() > 0, op, ": ", name, " is empty ", t.shape().str());
}

// An optional tensor (gradients, bias): undefined is fine, otherwise it must match.
void check_optional(const char* op, const char* name, const Tensor& t, const Shape& shape,
                    DType dtype, Device device) {
  if (!t.defined()) return;
  check_dtype(op, name, t, dtype);
  check_shape(op, name, t, shape);
  check_device(op, name, t, device);
}

// Rows of a (..., C) tensor whose last dimension must be C.
int64_t rows_of(const char* op, const char* name, const Tensor& t, int64_t C) {
  GPUMIX_CHECK(t.dim() >= 1 && t.size(-1) == C, op, ": ", name, " ", t.shape().str(),
               " must have last dimension ", C);
  return t.numel() / C;
}

}  // namespace

void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const char* op = "matmul_forward";
  check_float(op, "weight", weight);
  GPUMIX_CHECK(weight.dim() == 2, op, ": weight must be 2-D (OC, C), got ", weight.shape().str());
  const int64_t OC = weight.size(0), C = weight.size(1);
  check_float(op, "inp", inp);
  GPUMIX_CHECK(inp.dim() >= 1 && inp.size(-1) == C, op, ": inp ", inp.shape().str(),
               " and weight ", weight.shape().str(), " do not match: inp's last dimension must be ", C);
  const int64_t N = inp.numel() / C;
  check_float(op, "out", out);
  check_numel(op, "out", out, N * OC);
  GPUMIX_CHECK(out.size(-1) == OC, op, ": out ", out.shape().str(), " must have last dimension ", OC);
  check_device(op, "inp", inp, out.device());
  check_device(op, "weight", weight, out.device());
  GPUMIX_CHECK(inp.dtype() == weight.dtype() && out.dtype() == weight.dtype(), op,
               ": mixed dtypes inp ", dtype_name(inp.dtype()), ", weight ", dtype_name(weight.dtype()),
               ", out ", dtype_name(out.dtype()));
  check_optional(op, "bias", bias, Shape{OC}, weight.dtype(), out.device());
  dispatch(out.device(), [&](const Backend& b) { b.matmul_forward(out, inp, weight, bias); });
}

void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  const char* op = "matmul_backward";
  check_float(op, "weight", weight);
  GPUMIX_CHECK(weight.dim() == 2, op, ": weight must be 2-D (OC, C), got ", weight.shape().str());
  const int64_t OC = weight.size(0), C = weight.size(1);
  const int64_t N = rows_of(op, "inp", inp, C);
  check_float(op, "dout", dout);
  check_numel(op, "dout", dout, N * OC);
  const Device d = dout.device();
  check_device(op, "inp", inp, d);
  check_device(op, "weight", weight, d);
  check_optional(op, "dinp", dinp, inp.shape(), inp.dtype(), d);
  if (dweight.defined()) {
    check_numel(op, "dweight", dweight, OC * C);
    check_device(op, "dweight", dweight, d);
    check_float(op, "dweight", dweight);
  }
  if (dbias.defined()) {
    check_numel(op, "dbias", dbias, OC);
    check_device(op, "dbias", dbias, d);
    check_float(op, "dbias", dbias);
  }
  dispatch(d, [&](const Backend& b) { b.matmul_backward(dinp, dweight, dbias, dout, inp, weight); });
}

void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
          float beta) {
  const char* op = "gemm";
  check_float(op, "a", a);
  check_float(op, "b", b);
  check_float(op, "c", c);
  GPUMIX_CHECK(a.dim() >= 2 && b.dim() >= 2 && c.dim() >= 2, op,
               ": operands must be at least 2-D, got a ", a.shape().str(), ", b ", b.shape().str(),
               ", c ", c.shape().str());
  const int64_t m = trans_a ? a.size(-1) : a.size(-2), k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2), n = trans_b ? b.size(-2) : b.size(-1);
  GPUMIX_CHECK(k == kb, op, ": inner dimensions differ: a ", a.shape().str(),
               trans_a ? "^T" : "", " and b ", b.shape().str(), trans_b ? "^T" : "");
  GPUMIX_CHECK(c.size(-2) == m && c.size(-1) == n, op, ": c ", c.shape().str(), " must end in (",
               m, ", ", n, ")");
  const int64_t batch = c.numel() / (m * n);
  GPUMIX_CHECK(a.numel() == batch * m * k && b.numel() == batch * k * n, op,
               ": batch sizes differ: a ", a.shape().str(), ", b ", b.shape().str(), ", c ",
               c.shape().str());
  check_device(op, "a", a, c.device());
  check_device(op, "b", b, c.device());
  dispatch(c.device(), [&](const Backend& be) { be.gemm(c, a, b, trans_a, trans_b, alpha, beta); });
}

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  check_float(op, "inp", inp);
  check_nonempty(op, "inp", inp);
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  const Device d = inp.device();
  check_optional(op, "out", out, inp.shape(), inp.dtype(), d);
  check_defined(op, "out", out);
  check_optional(op, "weight", weight, Shape{C}, inp.dtype(), d);
  check_optional(op, "bias", bias, Shape{C}, inp.dtype(), d);
  check_defined(op, "weight", weight);
  check_defined(op, "bias", bias);
  check_optional(op, "mean", mean, Shape{N}, DType::f32, d);
  check_optional(op, "rstd", rstd, Shape{N}, DType::f32, d);
  check_defined(op, "mean", mean);
  check_defined(op, "rstd", rstd);
  dispatch(d, [&](const Backend& b) { b.layernorm_forward(out, mean, rstd, inp, weight, bias); });
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  check_float(op, "inp", inp);
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  const Device d = inp.device();
  check_optional(op, "dout", dout, inp.shape(), inp.dtype(), d);
  check_defined(op, "dout", dout);
  check_optional(op, "dinp", dinp, inp.shape(), inp.dtype(), d);
  check_optional(op, "weight", weight, Shape{C}, inp.dtype(), d);
  check_defined(op, "weight", weight);
  check_optional(op, "dweight", dweight, Shape{C}, DType::f32, d);
  check_optional(op, "dbias", dbias, Shape{C}, DType::f32, d);
  check_optional(op, "mean", mean, Shape{N}, DType::f32, d);
  check_optional(op, "rstd", rstd, Shape{N}, DType::f32, d);
  check_defined(op, "mean", mean);
  check_defined(op, "rstd", rstd);
  dispatch(d, [&](const Backend& b) {
    b.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  });
}

void gelu_forward(Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  check_float(op, "inp", inp);
  check_optional(op, "out", out, inp.shape(), inp.dtype(), inp.device());
  check_defined(op, "out", out);
  dispatch(inp.device(), [&](const Backend& b) { b.gelu_forward(out, inp); });
}

void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  check_float(op, "inp", inp);
  check_optional(op, "dout", dout, inp.shape(), inp.dtype(), inp.device());
  check_defined(op, "dout", dout);
  check_optional(op, "dinp", dinp, inp.shape(), inp.dtype(), inp.device());
  check_defined(op, "dinp", dinp);
  dispatch(inp.device(), [&](const Backend& b) { b.gelu_backward(dinp, inp, dout); });
}

namespace {
// Checks qkv (B,T,3C) and NH; returns (B, T, C).
std::array<int64_t, 3> attention_dims(const char* op, const Tensor& qkv, int NH) {
  check_float(op, "qkv", qkv);
  GPUMIX_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, op, ": qkv must be (B, T, 3C), got ",
               qkv.shape().str());
  const int64_t C = qkv.size(2) / 3;
  GPUMIX_CHECK(NH > 0 && C % NH == 0, op, ": C = ", C, " is not a multiple of NH = ", NH);
  check_nonempty(op, "qkv", qkv);
  return {qkv.size(0), qkv.size(1), C};
}
}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH) {
  const char* op = "attention_forward";
  const auto [B, T, C] = attention_dims(op, qkv, NH);
  const Device d = qkv.device();
  check_optional(op, "out", out, Shape{B, T, C}, qkv.dtype(), d);
  check_defined(op, "out", out);
  check_optional(op, "lse", lse, Shape{B, NH, T}, DType::f32, d);
  check_defined(op, "lse", lse);
  dispatch(d, [&](const Backend& b) { b.attention_forward(out, lse, qkv, NH); });
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int NH) {
  const char* op = "attention_backward";
  const auto [B, T, C] = attention_dims(op, qkv, NH);
  const Device d = qkv.device();
  check_optional(op, "dqkv", dqkv, qkv.shape(), qkv.dtype(), d);
  check_defined(op, "dqkv", dqkv);
  check_optional(op, "dout", dout, Shape{B, T, C}, qkv.dtype(), d);
  check_defined(op, "dout", dout);
  check_optional(op, "out", out, Shape{B, T, C}, qkv.dtype(), d);
  check_defined(op, "out", out);
  check_optional(op, "lse", lse, Shape{B, NH, T}, DType::f32, d);
  check_defined(op, "lse", lse);
  dispatch(d, [&](const Backend& b) { b.attention_backward(dqkv, dout, qkv, out, lse, NH); });
}

namespace {
// Checks logits (..., V) against targets (N); returns N.
int64_t crossentropy_rows(const char* op, const Tensor& logits, const Tensor& targets) {
  check_float(op, "logits", logits);
  check_nonempty(op, "logits", logits);
  check_dtype(op, "targets", targets, DType::i32);
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  GPUMIX_CHECK(targets.numel() == N, op, ": logits ", logits.shape().str(), " has ", N,
               " rows but targets ", targets.shape().str(), " has ", targets.numel(), " elements");
  check_device(op, "targets", targets, logits.device());
  return N;
}
}  // namespace

void crossentropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets,
                          int32_t ignore_index) {
  const char* op = "crossentropy_forward";
  const int64_t N = crossentropy_rows(op, logits, targets);
  check_optional(op, "losses", losses, Shape{N}, DType::f32, logits.device());
  check_defined(op, "losses", losses);
  check_optional(op, "lse", lse, Shape{N}, DType::f32, logits.device());
  check_defined(op, "lse", lse);
  dispatch(logits.device(),
           [&](const Backend& b) { b.crossentropy_forward(losses, lse, logits, targets, ignore_index); });
}

void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                           const Tensor& targets, float dloss, int32_t ignore_index) {
  const char* op = "crossentropy_backward";
  const int64_t N = crossentropy_rows(op, logits, targets);
  check_optional(op, "dlogits", dlogits, logits.shape(), logits.dtype(), logits.device());
  check_defined(op, "dlogits", dlogits);
  check_optional(op, "lse", lse, Shape{N}, DType::f32, logits.device());
  check_defined(op, "lse", lse);
  dispatch(logits.device(), [&](const Backend& b) {
    b.crossentropy_backward(dlogits, logits, lse, targets, dloss, ignore_index);
  });
}

void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const char* op = "embedding_forward";
  check_dtype(op, "tokens", tokens, DType::i32);
  GPUMIX_CHECK(tokens.dim() == 2, op, ": tokens must be (B, T), got ", tokens.shape().str());
  check_float(op, "wte", wte);
  check_float(op, "wpe", wpe);
  GPUMIX_CHECK(wte.dim() == 2 && wpe.dim() == 2 && wte.size(1) == wpe.size(1), op,
               ": wte (V, C) and wpe (Tmax, C) disagree: ", wte.shape().str(), " and ",
               wpe.shape().str());
  const int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
  GPUMIX_CHECK(T <= wpe.size(0), op, ": sequence length ", T, " exceeds the model's context ",
               wpe.size(0), " (wpe ", wpe.shape().str(), "); use --seq <= ", wpe.size(0));
  const Device d = wte.device();
  check_device(op, "tokens", tokens, d);
  check_device(op, "wpe", wpe, d);
  check_optional(op, "out", out, Shape{B, T, C}, wte.dtype(), d);
  check_defined(op, "out", out);
  dispatch(d, [&](const Backend& b) { b.embedding_forward(out, tokens, wte, wpe); });
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_backward";
  check_dtype(op, "tokens", tokens, DType::i32);
  GPUMIX_CHECK(tokens.dim() == 2, op, ": tokens must be (B, T), got ", tokens.shape().str());
  check_float(op, "dout", dout);
  const int64_t B = tokens.size(0), T = tokens.size(1);
  GPUMIX_CHECK(dout.dim() == 3 && dout.size(0) == B && dout.size(1) == T, op, ": dout ",
               dout.shape().str(), " must be (", B, ", ", T, ", C) like tokens ", tokens.shape().str());
  const int64_t C = dout.size(2);
  const Device d = dout.device();
  if (dwte.defined()) {
    check_float(op, "dwte", dwte);
    GPUMIX_CHECK(dwte.dim() == 2 && dwte.size(1) == C, op, ": dwte ", dwte.shape().str(),
                 " must be (V, ", C, ")");
    check_device(op, "dwte", dwte, d);
  }
  if (dwpe.defined()) {
    check_float(op, "dwpe", dwpe);
    GPUMIX_CHECK(dwpe.dim() == 2 && dwpe.size(1) == C && dwpe.size(0) >= T, op, ": dwpe ",
                 dwpe.shape().str(), " must be (Tmax >= ", T, ", ", C, ")");
    check_device(op, "dwpe", dwpe, d);
  }
  dispatch(d, [&](const Backend& b) { b.embedding_backward(dwte, dwpe, dout, tokens); });
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg,
                int step) {
  const char* op = "adamw_step";
  check_dtype(op, "param", param, DType::f32);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"grad", &grad}, {"m", &m}, {"v", &v}}) {
    check_dtype(op, name, *t, DType::f32);
    check_numel(op, name, *t, param.numel());
    check_device(op, name, *t, param.device());
  }
  GPUMIX_CHECK(step >= 1, op, ": step counts from 1, got ", step);
  dispatch(param.device(), [&](const Backend& b) { b.adamw_step(param, grad, m, v, cfg, step); });
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  check_float("add", "a", a);
  check_optional("add", "b", b, a.shape(), a.dtype(), a.device());
  check_defined("add", "b", b);
  check_float("add", "out", out);
  check_numel("add", "out", out, a.numel());
  check_device("add", "out", out, a.device());
  dispatch(a.device(), [&](const Backend& be) { be.add(out, a, b); });
}

void scale(Tensor& out, const Tensor& a, float s) {
  check_float("scale", "a", a);
  check_float("scale", "out", out);
  check_numel("scale", "out", out, a.numel());
  check_device("scale", "out", out, a.device());
  dispatch(a.device(), [&](const Backend& b) { b.scale(out, a, s); });
}

void axpy(Tensor& out, const Tensor& a, float s) {
  check_float("axpy", "a", a);
  check_float("axpy", "out", out);
  check_numel("axpy", "out", out, a.numel());
  check_device("axpy", "out", out, a.device());
  dispatch(a.device(), [&](const Backend& b) { b.axpy(out, a, s); });
}

double sum(const Tensor& a) {
  check_float("sum", "a", a);
  return dispatch(a.device(), [&](const Backend& b) { return b.sum(a); });
}

double sum_squares(const Tensor& a) {
  check_float("sum_squares", "a", a);
  return dispatch(a.device(), [&](const Backend& b) { return b.sum_squares(a); });
}

void fill(Tensor& t, float value) {
  check_defined("fill", "t", t);
  dispatch(t.device(), [&](const Backend& b) { b.fill(t, value); });
}

void copy(Tensor& dst, const Tensor& src) {
  check_defined("copy", "src", src);
  check_defined("copy", "dst", dst);
  check_numel("copy", "dst", dst, src.numel());
  GPUMIX_CHECK(dst.dtype() == src.dtype(), "copy: dst is ", dtype_name(dst.dtype()), " but src is ",
               dtype_name(src.dtype()), "; use convert");
  // The non-CPU side owns the transfer.
  const Device d = dst.device().is_cpu() ? src.device() : dst.device();
  dispatch(d, [&](const Backend& b) { b.copy(dst, src); });
}

void convert(Tensor& out, const Tensor& in) {
  check_float("convert", "in", in);
  check_float("convert", "out", out);
  check_numel("convert", "out", out, in.numel());
  check_device("convert", "out", out, in.device());
  dispatch(in.device(), [&](const Backend& b) { b.convert(out, in); });
}

void uniform_(Tensor& t, uint64_t key, uint64_t offset, float low, float high) {
  check_float("uniform_", "t", t);
  dispatch(t.device(), [&](const Backend& b) { b.uniform_(t, key, offset, low, high); });
}

void normal_(Tensor& t, uint64_t key, uint64_t offset, float mean, float std) {
  check_float("normal_", "t", t);
  dispatch(t.device(), [&](const Backend& b) { b.normal_(t, key, offset, mean, std); });
}

}  // namespace gpumix::ops
