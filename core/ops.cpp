// Validation and the one dispatch point of every tensor op.
#include "core/ops.h"

#include <algorithm>
#include <vector>

#include "core/op_table.h"
#include "core/precision.h"
#include "core/slowdown.h"
#include "core/stream.h"

namespace gpumix::ops {

namespace {

// The dispatch point: every op reaches its device's op table through here (`stream`: the
// one the op runs on, compute but for add).
template <class F>
auto dispatch(Device device, F&& run, Stream stream = Stream::compute) {
  SlowdownScope slowdown(device, stream);  // an emulated slow device's wait (core/slowdown.h)
  return run(device_ops(device));
}

void check_defined(const char* op, const char* name, const Tensor& t) {
  GPUMIX_CHECK(t.defined(), op, ": ", name, " is undefined");
}

void check_float(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  GPUMIX_CHECK(is_compute_dtype(t.dtype()), op, ": ", name, " must be a floating-point tensor "
               "(f32, bf16 or f16), got ", dtype_name(t.dtype()), " ", t.shape().str());
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

// One op's tensor arguments against the precision contract (core/precision.h): the op
// computes in the dtype of its anchor (its main input, a compute dtype), runs on the
// anchor's device, and every other argument's dtype follows from its role.
class Args {
 public:
  Args(const char* op, const char* anchor_name, const Tensor& anchor)
      : op_(op), anchor_(anchor_name) {
    check_float(op, anchor_name, anchor);
    compute_ = anchor.dtype();
    device_ = anchor.device();
  }
  DType compute() const { return compute_; }
  Device device() const { return device_; }

  // A required argument: defined, of its role's dtype, on the op's device.
  void need(const char* name, const Tensor& t, Role role) const {
    check_defined(op_, name, t);
    GPUMIX_CHECK(role_allows(role, compute_, t.dtype()), op_, ": ", name, " must be ",
                 expectation(role), ", got ", dtype_name(t.dtype()), " ", t.shape().str());
    check_device(op_, name, t, device_);
  }
  void need(const char* name, const Tensor& t, Role role, const Shape& shape) const {
    need(name, t, role);
    check_shape(op_, name, t, shape);
  }
  // An optional argument (gradients, bias): undefined means "not needed", else as need().
  void maybe(const char* name, const Tensor& t, Role role) const {
    if (t.defined()) need(name, t, role);
  }
  void maybe(const char* name, const Tensor& t, Role role, const Shape& shape) const {
    if (t.defined()) need(name, t, role, shape);
  }

 private:
  // "bf16 (the compute dtype, that of inp)", "f32 (fp32 in every compute dtype)".
  std::string expectation(Role role) const {
    const char* c = dtype_name(compute_);
    switch (role) {
      case Role::compute: return str(c, " (the compute dtype, that of ", anchor_, ")");
      case Role::fp32: return "f32 (fp32 in every compute dtype)";
      case Role::compute_or_fp32: return compute_ == DType::f32 ? str(c) : str(c, " or f32");
    }
    return "?";
  }

  const char* op_;
  const char* anchor_;
  DType compute_;
  Device device_;
};

// The (OC, C) of a matmul's weight, a 2-D compute operand.
struct WeightDims {
  int64_t OC, C;
};
WeightDims weight_dims(const char* op, const Args& args, const Tensor& weight) {
  args.need("weight", weight, Role::compute);
  GPUMIX_CHECK(weight.dim() == 2, op, ": weight must be 2-D (OC, C), got ", weight.shape().str());
  return {weight.size(0), weight.size(1)};
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
  const Args args(op, "inp", inp);
  const auto [OC, C] = weight_dims(op, args, weight);
  GPUMIX_CHECK(inp.dim() >= 1 && inp.size(-1) == C, op, ": inp ", inp.shape().str(),
               " and weight ", weight.shape().str(), " do not match: inp's last dimension must be ", C);
  const int64_t N = inp.numel() / C;
  args.need("out", out, Role::compute);
  check_numel(op, "out", out, N * OC);
  GPUMIX_CHECK(out.size(-1) == OC, op, ": out ", out.shape().str(), " must have last dimension ", OC);
  args.maybe("bias", bias, Role::compute, Shape{OC});
  dispatch(args.device(), [&](const OpTable& b) { b.matmul_forward(out, inp, weight, bias); });
}

namespace {
// The checks of matmul_backward and matmul_backward_write; the device of the call.
Device check_matmul_backward(const char* op, const Tensor& dinp, const Tensor& dweight,
                             const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight) {
  const Args args(op, "inp", inp);
  const auto [OC, C] = weight_dims(op, args, weight);
  const int64_t N = rows_of(op, "inp", inp, C);
  args.need("dout", dout, Role::compute);
  check_numel(op, "dout", dout, N * OC);
  args.maybe("dinp", dinp, Role::compute, inp.shape());
  args.maybe("dweight", dweight, Role::fp32);
  if (dweight.defined()) check_numel(op, "dweight", dweight, OC * C);
  args.maybe("dbias", dbias, Role::fp32);
  if (dbias.defined()) check_numel(op, "dbias", dbias, OC);
  return args.device();
}
}  // namespace

void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  const Device d = check_matmul_backward("matmul_backward", dinp, dweight, dbias, dout, inp, weight);
  dispatch(d, [&](const OpTable& b) { b.matmul_backward(dinp, dweight, dbias, dout, inp, weight); });
}

void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
          float beta) {
  const char* op = "gemm";
  const Args args(op, "a", a);
  args.need("b", b, Role::compute);
  args.need("c", c, Role::compute_or_fp32);
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
  dispatch(args.device(), [&](const OpTable& be) { be.gemm(c, a, b, trans_a, trans_b, alpha, beta); });
}

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const Args args(op, "inp", inp);
  check_nonempty(op, "inp", inp);
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  args.need("out", out, Role::compute, inp.shape());
  args.need("weight", weight, Role::compute, Shape{C});
  args.need("bias", bias, Role::compute, Shape{C});
  args.need("mean", mean, Role::fp32, Shape{N});
  args.need("rstd", rstd, Role::fp32, Shape{N});
  dispatch(args.device(), [&](const OpTable& b) {
    b.layernorm_forward(out, mean, rstd, inp, weight, bias);
  });
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const Args args(op, "inp", inp);
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  args.need("dout", dout, Role::compute, inp.shape());
  args.maybe("dinp", dinp, Role::compute, inp.shape());
  args.need("weight", weight, Role::compute, Shape{C});
  args.maybe("dweight", dweight, Role::fp32, Shape{C});
  args.maybe("dbias", dbias, Role::fp32, Shape{C});
  args.need("mean", mean, Role::fp32, Shape{N});
  args.need("rstd", rstd, Role::fp32, Shape{N});
  dispatch(args.device(), [&](const OpTable& b) {
    b.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  });
}

void gelu_forward(Tensor& out, const Tensor& inp) {
  const Args args("gelu_forward", "inp", inp);
  args.need("out", out, Role::compute, inp.shape());
  dispatch(args.device(), [&](const OpTable& b) { b.gelu_forward(out, inp); });
}

void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const Args args("gelu_backward", "inp", inp);
  args.need("dout", dout, Role::compute, inp.shape());
  args.need("dinp", dinp, Role::compute, inp.shape());
  dispatch(args.device(), [&](const OpTable& b) { b.gelu_backward(dinp, inp, dout); });
}

namespace {
// Checks qkv (B,T,3C) and NH; returns (B, T, C).
std::array<int64_t, 3> attention_dims(const char* op, const Tensor& qkv, int NH) {
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
  const Args args(op, "qkv", qkv);
  const auto [B, T, C] = attention_dims(op, qkv, NH);
  args.need("out", out, Role::compute, Shape{B, T, C});
  args.need("lse", lse, Role::fp32, Shape{B, NH, T});
  dispatch(args.device(), [&](const OpTable& b) { b.attention_forward(out, lse, qkv, NH); });
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int NH) {
  const char* op = "attention_backward";
  const Args args(op, "qkv", qkv);
  const auto [B, T, C] = attention_dims(op, qkv, NH);
  args.need("dqkv", dqkv, Role::compute, qkv.shape());
  args.need("dout", dout, Role::compute, Shape{B, T, C});
  args.need("out", out, Role::compute, Shape{B, T, C});
  args.need("lse", lse, Role::fp32, Shape{B, NH, T});
  dispatch(args.device(), [&](const OpTable& b) { b.attention_backward(dqkv, dout, qkv, out, lse, NH); });
}

void attention_decode(Tensor& out, const Tensor& qkv, int64_t pos, int NH) {
  const char* op = "attention_decode";
  const Args args(op, "qkv", qkv);
  const auto [B, Tc, C] = attention_dims(op, qkv, NH);
  GPUMIX_CHECK(pos >= 0 && pos < Tc, op, ": position ", pos, " is outside the cache's rows [0, ", Tc,
               "); qkv ", qkv.shape().str());
  args.need("out", out, Role::compute, Shape{B, 1, C});
  dispatch(args.device(), [&](const OpTable& b) { b.attention_decode(out, qkv, pos, NH); });
}

namespace {
// Checks logits (..., V) against targets (N); returns N.
int64_t crossentropy_rows(const char* op, const Args& args, const Tensor& logits,
                          const Tensor& targets) {
  check_nonempty(op, "logits", logits);
  check_dtype(op, "targets", targets, DType::i32);
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  GPUMIX_CHECK(targets.numel() == N, op, ": logits ", logits.shape().str(), " has ", N,
               " rows but targets ", targets.shape().str(), " has ", targets.numel(), " elements");
  check_device(op, "targets", targets, args.device());
  return N;
}
}  // namespace

void crossentropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets,
                          int32_t ignore_index) {
  const char* op = "crossentropy_forward";
  const Args args(op, "logits", logits);
  const int64_t N = crossentropy_rows(op, args, logits, targets);
  args.need("losses", losses, Role::fp32, Shape{N});
  args.need("lse", lse, Role::fp32, Shape{N});
  dispatch(args.device(),
           [&](const OpTable& b) { b.crossentropy_forward(losses, lse, logits, targets, ignore_index); });
}

void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                           const Tensor& targets, const Tensor& dloss, float scale,
                           int32_t ignore_index) {
  const char* op = "crossentropy_backward";
  const Args args(op, "logits", logits);
  const int64_t N = crossentropy_rows(op, args, logits, targets);
  args.need("dlogits", dlogits, Role::compute, logits.shape());
  args.need("lse", lse, Role::fp32, Shape{N});
  args.maybe("dloss", dloss, Role::fp32, Shape{1});
  dispatch(args.device(), [&](const OpTable& b) {
    b.crossentropy_backward(dlogits, logits, lse, targets, dloss, scale, ignore_index);
  });
}

void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                           const Tensor& targets, float dloss, int32_t ignore_index) {
  crossentropy_backward(dlogits, logits, lse, targets, Tensor(), dloss, ignore_index);
}

void classifier_forward(Tensor& losses, Tensor& lse, Tensor& logits, const Tensor& targets, int64_t V,
                        float scale, bool grad, int32_t ignore_index) {
  const char* op = "classifier_forward";
  const Args args(op, "logits", logits);
  const int64_t N = crossentropy_rows(op, args, logits, targets);
  GPUMIX_CHECK(V >= 1 && V <= logits.size(-1), op, ": ", V, " classes in logits ", logits.shape().str(),
               " of row width ", logits.size(-1), "; expected 1 <= V <= the width (the rest is padding)");
  args.need("losses", losses, Role::fp32, Shape{N});
  args.need("lse", lse, Role::fp32, Shape{N});
  dispatch(args.device(),
           [&](const OpTable& b) { b.classifier_forward(losses, lse, logits, targets, V, scale, grad, ignore_index); });
}

void classifier_rescale(Tensor& dlogits, const Tensor& dloss) {
  const char* op = "classifier_rescale";
  const Args args(op, "dlogits", dlogits);
  args.need("dloss", dloss, Role::fp32, Shape{1});
  dispatch(args.device(), [&](const OpTable& b) { b.classifier_rescale(dlogits, dloss); });
}

void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const char* op = "embedding_forward";
  const Args args(op, "wte", wte);
  check_dtype(op, "tokens", tokens, DType::i32);
  GPUMIX_CHECK(tokens.dim() == 2, op, ": tokens must be (B, T), got ", tokens.shape().str());
  args.need("wpe", wpe, Role::compute);
  GPUMIX_CHECK(wte.dim() == 2 && wpe.dim() == 2 && wte.size(1) == wpe.size(1), op,
               ": wte (V, C) and wpe (Tmax, C) disagree: ", wte.shape().str(), " and ",
               wpe.shape().str());
  const int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
  GPUMIX_CHECK(T <= wpe.size(0), op, ": sequence length ", T, " exceeds the model's context ",
               wpe.size(0), " (wpe ", wpe.shape().str(), "); use --seq <= ", wpe.size(0));
  check_device(op, "tokens", tokens, args.device());
  args.need("out", out, Role::compute, Shape{B, T, C});
  dispatch(args.device(), [&](const OpTable& b) { b.embedding_forward(out, tokens, wte, wpe); });
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_backward";
  const Args args(op, "dout", dout);
  check_dtype(op, "tokens", tokens, DType::i32);
  GPUMIX_CHECK(tokens.dim() == 2, op, ": tokens must be (B, T), got ", tokens.shape().str());
  const int64_t B = tokens.size(0), T = tokens.size(1);
  GPUMIX_CHECK(dout.dim() == 3 && dout.size(0) == B && dout.size(1) == T, op, ": dout ",
               dout.shape().str(), " must be (", B, ", ", T, ", C) like tokens ", tokens.shape().str());
  const int64_t C = dout.size(2);
  check_device(op, "tokens", tokens, args.device());
  args.maybe("dwte", dwte, Role::fp32);
  GPUMIX_CHECK(!dwte.defined() || (dwte.dim() == 2 && dwte.size(1) == C), op, ": dwte ",
               dwte.shape().str(), " must be (V, ", C, ")");
  args.maybe("dwpe", dwpe, Role::fp32);
  GPUMIX_CHECK(!dwpe.defined() || (dwpe.dim() == 2 && dwpe.size(1) == C && dwpe.size(0) >= T), op,
               ": dwpe ", dwpe.shape().str(), " must be (Tmax >= ", T, ", ", C, ")");
  dispatch(args.device(), [&](const OpTable& b) { b.embedding_backward(dwte, dwpe, dout, tokens); });
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg,
                int step) {
  Tensor no_copy;
  adamw_step(param, no_copy, grad, m, v, cfg, step);
}

void adamw_step(Tensor& param, Tensor& param_copy, const Tensor& grad, Tensor& m, Tensor& v,
                const AdamWConfig& cfg, int step) {
  const char* op = "adamw_step";
  const Args args(op, "param", param);
  args.need("param", param, Role::fp32);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"grad", &grad}, {"m", &m}, {"v", &v}}) {
    args.need(name, *t, Role::fp32);
    check_numel(op, name, *t, param.numel());
  }
  if (param_copy.defined()) {
    // In f32 the master weights are the compute copy: there is none to write.
    GPUMIX_CHECK(is_16bit_float(param_copy.dtype()), op, ": param_copy (the compute copy) must be "
                 "bf16 or f16, got ", dtype_name(param_copy.dtype()), " ", param_copy.shape().str(),
                 "; an f32 run computes on the master weights and passes none");
    check_numel(op, "param_copy", param_copy, param.numel());
    check_device(op, "param_copy", param_copy, args.device());
  }
  GPUMIX_CHECK(step >= 1, op, ": step counts from 1, got ", step);
  dispatch(args.device(), [&](const OpTable& b) { b.adamw_step(param, param_copy, grad, m, v, cfg, step); });
}

void add(Tensor& out, const Tensor& a, const Tensor& b, Stream stream) {
  const Args args("add", "a", a);
  args.need("b", b, Role::compute, a.shape());
  args.need("out", out, Role::compute);
  check_numel("add", "out", out, a.numel());
  dispatch(args.device(), [&](const OpTable& be) { be.add(out, a, b, stream); }, stream);
}

void scale(Tensor& out, const Tensor& a, float s) {
  const Args args("scale", "a", a);
  args.need("out", out, Role::compute);
  check_numel("scale", "out", out, a.numel());
  dispatch(args.device(), [&](const OpTable& b) { b.scale(out, a, s); });
}

void axpy(Tensor& out, const Tensor& a, float s) {
  const Args args("axpy", "a", a);
  args.need("out", out, Role::compute_or_fp32);
  check_numel("axpy", "out", out, a.numel());
  dispatch(args.device(), [&](const OpTable& b) { b.axpy(out, a, s); });
}

double sum(const Tensor& a) {
  check_float("sum", "a", a);
  return dispatch(a.device(), [&](const OpTable& b) { return b.sum(a); });
}

double sum_squares(const Tensor& a) {
  check_float("sum_squares", "a", a);
  return dispatch(a.device(), [&](const OpTable& b) { return b.sum_squares(a); });
}

void sum_to(Tensor& out, const Tensor& a, double scale) {
  const Args args("sum_to", "a", a);
  args.need("out", out, Role::fp32, Shape{1});
  dispatch(args.device(), [&](const OpTable& b) { b.sum_to(out, a, scale); });
}

namespace {
// Checks a list of tensors for the *_many ops: each defined and f32 or bf16, all on the
// device of the first; returns that device.
Device many_device(const char* op, const std::vector<Tensor>& ts) {
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string name = str("tensor ", i);
    check_float(op, name.c_str(), ts[i]);
    check_device(op, name.c_str(), ts[i], ts[0].device());
  }
  return ts[0].device();
}
}  // namespace

std::vector<double> sum_squares_many(const std::vector<Tensor>& ts) {
  if (ts.empty()) return {};
  const Device device = many_device("sum_squares_many", ts);
  return dispatch(device, [&](const OpTable& b) { return b.sum_squares_many(ts); });
}

std::vector<float> read_scalars(const std::vector<Tensor>& ts) {
  if (ts.empty()) return {};
  const Device device = many_device("read_scalars", ts);
  for (size_t i = 0; i < ts.size(); ++i)
    GPUMIX_CHECK(ts[i].numel() == 1, "read_scalars: tensor ", i, " has ", ts[i].numel(),
                 " elements ", ts[i].shape().str(), ", expected 1");
  return dispatch(device, [&](const OpTable& b) { return b.read_scalars(ts); });
}

void fill(Tensor& t, float value) {
  check_defined("fill", "t", t);
  dispatch(t.device(), [&](const OpTable& b) { b.fill(t, value); });
}

void copy(Tensor& dst, const Tensor& src) {
  check_defined("copy", "src", src);
  check_defined("copy", "dst", dst);
  check_numel("copy", "dst", dst, src.numel());
  GPUMIX_CHECK(dst.dtype() == src.dtype(), "copy: dst is ", dtype_name(dst.dtype()), " but src is ",
               dtype_name(src.dtype()), "; use convert");
  // The non-CPU side owns the transfer.
  const Device d = dst.device().is_cpu() ? src.device() : dst.device();
  dispatch(d, [&](const OpTable& b) { b.copy(dst, src); });
}

void convert(Tensor& out, const Tensor& in) {
  check_float("convert", "in", in);
  check_float("convert", "out", out);
  check_numel("convert", "out", out, in.numel());
  check_device("convert", "out", out, in.device());
  dispatch(in.device(), [&](const OpTable& b) { b.convert(out, in); });
}

void uniform_(Tensor& t, uint64_t key, uint64_t offset, float low, float high) {
  check_float("uniform_", "t", t);
  dispatch(t.device(), [&](const OpTable& b) { b.uniform_(t, key, offset, low, high); });
}

void normal_(Tensor& t, uint64_t key, uint64_t offset, float mean, float std) {
  check_float("normal_", "t", t);
  dispatch(t.device(), [&](const OpTable& b) { b.normal_(t, key, offset, mean, std); });
}

// ---- fused GEMM epilogues and first writes ----

void matmul_gelu_forward(Tensor& out, Tensor& pre, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias) {
  const char* op = "matmul_gelu_forward";
  const Args args(op, "inp", inp);
  const auto [OC, C] = weight_dims(op, args, weight);
  const int64_t N = rows_of(op, "inp", inp, C);
  args.need("bias", bias, Role::compute, Shape{OC});
  for (const Tensor* t : {&out, &pre}) {
    const char* name = t == &out ? "out" : "pre";
    args.need(name, *t, Role::compute);
    check_numel(op, name, *t, N * OC);
    GPUMIX_CHECK(t->size(-1) == OC, op, ": ", name, " ", t->shape().str(),
                 " must have last dimension ", OC);
  }
  dispatch(args.device(), [&](const OpTable& b) { b.matmul_gelu_forward(out, pre, inp, weight, bias); });
}

void matmul_backward_dgelu(Tensor& dpre, const Tensor& dout, const Tensor& weight,
                           const Tensor& pre) {
  const char* op = "matmul_backward_dgelu";
  const Args args(op, "pre", pre);
  const auto [OC, C] = weight_dims(op, args, weight);
  GPUMIX_CHECK(C % fused_gelu_multiple == 0, op, ": C = ", C, " is not a multiple of ",
               fused_gelu_multiple, " (cuBLASLt's DGELU epilogue needs it); hint: use "
               "matmul_backward and gelu_backward");
  const int64_t N = rows_of(op, "pre", pre, C);
  args.need("dout", dout, Role::compute);
  check_numel(op, "dout", dout, N * OC);
  args.need("dpre", dpre, Role::compute, pre.shape());
  dispatch(args.device(), [&](const OpTable& b) { b.matmul_backward_dgelu(dpre, dout, weight, pre); });
}

void matmul_backward_write(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                           const Tensor& inp, const Tensor& weight, bool overwrite_dinp,
                           bool overwrite_params) {
  const Device d =
      check_matmul_backward("matmul_backward_write", dinp, dweight, dbias, dout, inp, weight);
  dispatch(d, [&](const OpTable& b) {
    b.matmul_backward_write(dinp, dweight, dbias, dout, inp, weight, overwrite_dinp,
                            overwrite_params);
  });
}

}  // namespace gpumix::ops
