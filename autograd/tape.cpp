#include "autograd/tape.h"

#include "core/ops.h"

namespace gpumix {

namespace {

struct ThreadTape {
  std::vector<std::function<void()>> nodes;
  bool grad_enabled = true;
};

thread_local ThreadTape tape;

void replay(std::vector<std::function<void()>>& nodes) {
  for (size_t i = nodes.size(); i-- > 0;) {
    nodes[i]();
    nodes[i] = nullptr;  // release what the node saved as soon as it has run
  }
  nodes.clear();
}

}  // namespace

Var::Var(Tensor value, bool requires_grad, std::string name) : impl_(std::make_shared<VarImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

Var Var::parameter(Tensor value, std::string name) {
  Var v(std::move(value), true, std::move(name));
  v.impl_->parameter = true;
  return v;
}

Var Var::fresh(Tensor value) const {
  Var v(std::move(value), requires_grad(), name());
  v.impl_->parameter = impl_->parameter;
  return v;
}

void Var::zero_grad() {
  if (impl_ && impl_->grad.defined()) impl_->grad.zero_();
}

void Var::clear_grad() {
  if (impl_) impl_->grad = Tensor();
}

namespace {
const char* name_of(const VarImpl& v) { return v.name.empty() ? "the variable" : v.name.c_str(); }
}  // namespace

DType grad_dtype(const VarImpl& v) { return v.parameter ? DType::f32 : v.value.dtype(); }

Tensor& grad_buffer(VarImpl& v) {
  const DType dtype = grad_dtype(v);
  if (!v.grad.defined()) {
    v.grad = Tensor::zeros(v.value.shape(), dtype, v.value.device());
  } else {
    GPUMIX_CHECK(v.grad.dtype() == dtype && v.grad.shape() == v.value.shape() &&
                     v.grad.device() == v.value.device(),
                 "the gradient buffer bound to ", name_of(v), " is ", v.grad.str(), " but its ",
                 v.parameter ? "parameter" : "activation", " value ", v.value.str(), " needs a ",
                 dtype_name(dtype), " gradient of its shape and device");
  }
  return v.grad;
}

Tensor& grad_buffer_to_write(VarImpl& v, bool* fresh) {
  *fresh = !v.grad.defined();
  if (*fresh) v.grad = Tensor::empty(v.value.shape(), grad_dtype(v), v.value.device());
  return grad_buffer(v);
}

void add_grad(VarImpl& v, const Tensor& g) {
  GPUMIX_CHECK(g.shape() == v.value.shape(), "add_grad: gradient ", g.shape().str(),
               " does not match ", name_of(v), " ", v.value.shape().str());
  const DType dtype = grad_dtype(v);
  GPUMIX_CHECK(g.dtype() == dtype || dtype == DType::f32, "add_grad: a ",
               dtype_name(g.dtype()), " gradient for ", name_of(v), ", whose gradient is ",
               dtype_name(dtype), " (an activation's gradient has its value's dtype)");
  bool fresh;
  Tensor& buffer = grad_buffer_to_write(v, &fresh);
  if (fresh)  // the first contribution is written (exactly 0 + g), not added to zeros
    ops::convert(buffer, g);
  else
    ops::axpy(buffer, g, 1.0f);
}

bool grad_enabled() { return tape.grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(tape.grad_enabled) { tape.grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tape.grad_enabled = previous_; }

bool should_record(std::initializer_list<const Var*> inputs) {
  if (!tape.grad_enabled) return false;
  for (const Var* v : inputs)
    if (v->requires_grad()) return true;
  return false;
}

void record(std::function<void()> backward_fn) { tape.nodes.push_back(std::move(backward_fn)); }

size_t tape_size() { return tape.nodes.size(); }

void clear_tape() { tape.nodes.clear(); }

void backward(const Var& root) {
  GPUMIX_CHECK(root.defined() && root.value().numel() == 1, "backward: the root must be a scalar "
               "(one element), got ", root.defined() ? root.value().shape().str() : "undefined",
               "; pass its gradient explicitly");
  backward(root, Tensor::full(root.value().shape(), 1.0f, grad_dtype(*root.impl()),
                              root.value().device()));
}

void backward(const Var& root, const Tensor& root_grad) {
  GPUMIX_CHECK(root.requires_grad(), "backward: ", root.name().empty() ? "the root" : root.name(),
               " does not require a gradient (no input of it does, or it was computed under "
               "NoGradGuard)");
  add_grad(*root.impl(), root_grad);
  NoGradGuard no_grad;  // backward closures compute with plain ops
  replay(tape.nodes);
}

Var recompute(const RecomputeFn& fn, const std::vector<Var>& inputs) {
  Var out;
  {
    NoGradGuard no_grad;
    out = fn(inputs);
  }
  // Record whenever grad is on: parameters captured by fn need gradients even when the
  // inputs do not.
  if (!tape.grad_enabled) return out;
  Var result(out.value(), true);
  auto res = result.impl();
  record([fn, inputs, res]() {
    if (!res->grad.defined()) return;
    std::vector<Var> detached;  // same values, fresh gradients
    for (const Var& v : inputs) detached.push_back(v.fresh(v.value()));
    std::vector<std::function<void()>> outer;
    outer.swap(tape.nodes);
    tape.grad_enabled = true;
    Var again = fn(detached);
    tape.grad_enabled = false;  // we run inside backward(), which records nothing
    if (again.requires_grad()) {
      add_grad(*again.impl(), res->grad);
      replay(tape.nodes);
    }
    tape.nodes.swap(outer);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].requires_grad() && detached[i].grad().defined())
        add_grad(*inputs[i].impl(), detached[i].grad());
  });
  return result;
}

}  // namespace gpumix
