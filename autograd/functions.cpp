#include "autograd/functions.h"

#include "core/ops.h"

namespace gpumix {

namespace {

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// The gradient buffer of an input, or an undefined tensor when it needs none.
Tensor grad_if(const std::shared_ptr<VarImpl>& v) {
  return v && v->requires_grad ? grad_buffer(*v) : Tensor();
}

// Wraps a forward result; records `backward_fn(out_impl)` when any input requires a grad.
template <class F>
Var finish(Tensor value, std::initializer_list<const Var*> inputs, F&& backward_fn) {
  const bool rec = should_record(inputs);
  Var out(std::move(value), rec);
  if (rec) {
    auto o = out.impl();
    record([o, backward_fn = std::forward<F>(backward_fn)]() {
      if (o->grad.defined()) backward_fn(o->grad);
    });
  }
  return out;
}

// The buffer of a gradient the caller will write whole on request (*fresh: it may, beta 0),
// or an undefined tensor (then *fresh = true: nothing to accumulate into either).
Tensor grad_to_write(const std::shared_ptr<VarImpl>& v, bool* fresh) {
  *fresh = true;
  return v && v->requires_grad ? grad_buffer_to_write(*v, fresh) : Tensor();
}

// A linear's backward: dx, dw, db from dout, each written when it is that gradient's first
// contribution, else accumulated.
void linear_backward(const Tensor& dout, const Tensor& x, const std::shared_ptr<VarImpl>& xi,
                     const std::shared_ptr<VarImpl>& wi, const std::shared_ptr<VarImpl>& bi) {
  bool fx, fw, fb;
  Tensor dx = grad_to_write(xi, &fx), dw = grad_to_write(wi, &fw), db = grad_to_write(bi, &fb);
  // dweight and dbias share one flag: a fresh one beside an accumulating one starts at zero.
  const bool params_fresh = fw && fb;
  if (!params_fresh && fw && dw.defined()) dw.zero_();
  if (!params_fresh && fb && db.defined()) db.zero_();
  ops::matmul_backward_write(dx, dw, db, dout, x, wi->value, fx, params_fresh);
}

// (..., C) -> the same leading dimensions with a last dimension of `last`.
Shape with_last(const Tensor& t, int64_t last) {
  std::vector<int64_t> dims(t.shape().dims.begin(), t.shape().dims.begin() + t.dim());
  dims.back() = last;
  return Shape(dims);
}

}  // namespace

Var linear(const Var& x, const Var& w, const Var& b) {
  const Tensor& xv = x.value();
  Tensor out = Tensor::empty(with_last(xv, w.value().size(0)), xv.dtype(), xv.device());
  ops::matmul_forward(out, xv, w.value(), b.defined() ? b.value() : Tensor());
  auto xi = x.impl(), wi = w.impl(), bi = b.impl();
  return finish(out, {&x, &w, &b}, [xi, wi, bi](const Tensor& dout) {
    linear_backward(dout, xi->value, xi, wi, bi);
  });
}

Var layernorm(const Var& x, const Var& w, const Var& b) {
  const Tensor& xv = x.value();
  const int64_t N = xv.numel() / xv.size(-1);
  Tensor out = like(xv);
  Tensor mean = Tensor::empty({N}, DType::f32, xv.device());
  Tensor rstd = Tensor::empty({N}, DType::f32, xv.device());
  ops::layernorm_forward(out, mean, rstd, xv, w.value(), b.value());
  auto xi = x.impl(), wi = w.impl(), bi = b.impl();
  return finish(out, {&x, &w, &b}, [xi, wi, bi, mean, rstd](const Tensor& dout) {
    Tensor dx = grad_if(xi), dw = grad_if(wi), db = grad_if(bi);
    ops::layernorm_backward(dx, dw, db, dout, xi->value, wi->value, mean, rstd);
  });
}

Var gelu(const Var& x) {
  Tensor out = like(x.value());
  ops::gelu_forward(out, x.value());
  auto xi = x.impl();
  return finish(out, {&x}, [xi](const Tensor& dout) {
    Tensor dx = grad_if(xi);
    if (dx.defined()) ops::gelu_backward(dx, xi->value, dout);
  });
}

Var mlp(const Var& x, const Var& w_fc, const Var& b_fc, const Var& w_proj, const Var& b_proj) {
  const int64_t H = w_fc.value().size(0);
  if (H % ops::fused_gelu_multiple != 0 || !b_fc.defined())
    return linear(gelu(linear(x, w_fc, b_fc)), w_proj, b_proj);
  const Tensor& xv = x.value();
  Tensor pre = Tensor::empty(with_last(xv, H), xv.dtype(), xv.device());  // the GELU input
  Tensor h = Tensor::empty(pre.shape(), xv.dtype(), xv.device());
  ops::matmul_gelu_forward(h, pre, xv, w_fc.value(), b_fc.value());
  Tensor out = Tensor::empty(with_last(xv, w_proj.value().size(0)), xv.dtype(), xv.device());
  ops::matmul_forward(out, h, w_proj.value(), b_proj.defined() ? b_proj.value() : Tensor());
  auto xi = x.impl(), wfi = w_fc.impl(), bfi = b_fc.impl(), wpi = w_proj.impl(),
       bpi = b_proj.impl();
  return finish(out, {&x, &w_fc, &b_fc, &w_proj, &b_proj},
                [xi, wfi, bfi, wpi, bpi, pre, h](const Tensor& dout) {
                  // proj: its parameters only; its input gradient goes through the GELU
                  linear_backward(dout, h, nullptr, wpi, bpi);
                  const bool fc_grads = (xi && xi->requires_grad) || wfi->requires_grad ||
                                        bfi->requires_grad;
                  if (!fc_grads) return;
                  Tensor dpre = Tensor::empty(pre.shape(), pre.dtype(), pre.device());
                  ops::matmul_backward_dgelu(dpre, dout, wpi->value, pre);
                  linear_backward(dpre, xi->value, xi, wfi, bfi);
                });
}

Var attention(const Var& qkv, int NH) {
  const Tensor& q = qkv.value();
  GPUMIX_CHECK(q.dim() == 3 && q.size(2) % 3 == 0, "attention: qkv must be (B, T, 3C), got ",
               q.shape().str());
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2) / 3;
  Tensor out = Tensor::empty({B, T, C}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({B, NH, T}, DType::f32, q.device());
  ops::attention_forward(out, lse, q, NH);
  auto qi = qkv.impl();
  return finish(out, {&qkv}, [qi, out, lse, NH](const Tensor& dout) {
    Tensor dq = grad_if(qi);
    if (dq.defined()) ops::attention_backward(dq, dout, qi->value, out, lse, NH);
  });
}

Var add(const Var& a, const Var& b) {
  GPUMIX_CHECK(a.value().shape() == b.value().shape(), "add: shapes ", a.value().shape().str(),
               " and ", b.value().shape().str(), " differ");
  Tensor out = like(a.value());
  ops::add(out, a.value(), b.value());
  auto ai = a.impl(), bi = b.impl();
  return finish(out, {&a, &b}, [ai, bi](const Tensor& dout) {
    if (ai->requires_grad) add_grad(*ai, dout);
    if (bi->requires_grad) add_grad(*bi, dout);
  });
}

Var embedding(const Tensor& tokens, const Var& wte, const Var& wpe) {
  GPUMIX_CHECK(tokens.dim() == 2, "embedding: tokens must be (B, T), got ", tokens.shape().str());
  Tensor out = Tensor::empty({tokens.size(0), tokens.size(1), wte.value().size(1)},
                             wte.value().dtype(), wte.value().device());
  ops::embedding_forward(out, tokens, wte.value(), wpe.value());
  auto ei = wte.impl(), pi = wpe.impl();
  return finish(out, {&wte, &wpe}, [ei, pi, tokens](const Tensor& dout) {
    Tensor de = grad_if(ei), dp = grad_if(pi);
    ops::embedding_backward(de, dp, dout, tokens);
  });
}

Var cross_entropy(const Var& logits, const Tensor& targets, float scale, int32_t ignore_index) {
  const Tensor& lv = logits.value();
  const int64_t N = lv.numel() / lv.size(-1);
  Tensor losses = Tensor::empty({N}, DType::f32, lv.device());
  Tensor lse = Tensor::empty({N}, DType::f32, lv.device());
  ops::crossentropy_forward(losses, lse, lv, targets, ignore_index);
  Tensor loss = Tensor::empty({1}, DType::f32, lv.device());
  ops::sum_to(loss, losses, scale);  // no host read: a step reads its losses once, together
  auto li = logits.impl();
  return finish(loss, {&logits}, [li, targets, lse, scale, ignore_index](const Tensor& dloss) {
    Tensor dl = grad_if(li);
    if (dl.defined())
      ops::crossentropy_backward(dl, li->value, lse, targets, dloss, scale, ignore_index);
  });
}

Var classifier_loss(const Var& logits, const Tensor& targets, float scale, int64_t V, int32_t ignore_index) {
  Tensor lv = logits.value();
  const int64_t N = lv.numel() / lv.size(-1);
  Tensor losses = Tensor::empty({N}, DType::f32, lv.device());
  Tensor lse = Tensor::empty({N}, DType::f32, lv.device());
  const bool grad = should_record({&logits});
  ops::classifier_forward(losses, lse, lv, targets, V, scale, grad, ignore_index);  // lv: dlogits if grad
  Tensor loss = Tensor::empty({1}, DType::f32, lv.device());
  ops::sum_to(loss, losses, scale);
  auto li = logits.impl();
  return finish(loss, {&logits}, [li](const Tensor& dloss) {
    Tensor dl = li->value;  // the dlogits the forward wrote
    ops::classifier_rescale(dl, dloss);
    if (li->grad.defined())
      add_grad(*li, dl);
    else
      li->grad = dl;
  });
}

}  // namespace gpumix
