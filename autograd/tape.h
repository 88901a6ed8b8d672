// The tape: each differentiable function computes its result through core ops and records
// one node, a backward closure holding only what that backward needs. backward(root)
// replays the calling thread's tape in reverse. Gradients accumulate (+=) through one
// checked place, grad_buffer()/add_grad(). The tape is per thread: ranks that run as
// threads train independently. There is no other global mutable state.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gpumix {

struct VarImpl {
  Tensor value;
  Tensor grad;  // undefined until a gradient reaches this variable
  bool requires_grad = false;
  // A parameter's gradient is fp32 whatever its value's dtype; any other variable's (an
  // activation's) has its value's dtype (core/precision.h). See grad_dtype().
  bool parameter = false;
  std::string name;  // for error messages ("block3.attn.qkv.weight")
};

// A differentiable value: a shared handle, cheap to copy.
class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false, std::string name = {});
  // A parameter: requires a gradient, which is fp32 (its value may be a bf16 compute copy).
  static Var parameter(Tensor value, std::string name = {});
  // A new variable like this one (parameter or not, requires_grad, name) holding `value`,
  // with no gradient yet.
  Var fresh(Tensor value) const;

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& value() { return impl_->value; }
  const Tensor& grad() const { return impl_->grad; }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  const std::string& name() const { return impl_->name; }
  void set_name(std::string name) { impl_->name = std::move(name); }
  void zero_grad();  // keeps the buffer, fills it with zeros
  void clear_grad(); // drops the buffer
  const std::shared_ptr<VarImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

// The dtype of v's gradient: f32 for a parameter, the value's dtype for an activation.
DType grad_dtype(const VarImpl& v);
// The gradient buffer of `v`: the one bound to it (e.g. a view of a model's flat fp32
// gradient buffer, which the backward kernels then accumulate into directly), else zeros
// of the value's shape, grad_dtype(v), same device, created on first use. A bound buffer
// of another shape, dtype or device is an error naming the variable.
Tensor& grad_buffer(VarImpl& v);
// The gradient buffer of `v` for a backward op that WRITES every element on request: when
// `v` has none yet, a new one left uninitialised and *fresh = true, and the caller must
// overwrite it whole (its first write with beta 0: no zero-fill, no read); else
// grad_buffer(v) and *fresh = false (accumulate: micro-batches, tied weights, bound buffers).
Tensor& grad_buffer_to_write(VarImpl& v, bool* fresh);
// v.grad += g (g of grad_dtype(v), or bf16 into an fp32 gradient), checking shapes.
void add_grad(VarImpl& v, const Tensor& g);

// True while operations are being recorded on this thread's tape.
bool grad_enabled();

// Disables recording on this thread for its lifetime (evaluation, optimizer steps).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when recording is on and any input requires a gradient: only then does a function
// record a node and mark its output as requiring a gradient.
bool should_record(std::initializer_list<const Var*> inputs);

// Appends a backward closure to this thread's tape.
void record(std::function<void()> backward_fn);

// Number of nodes on this thread's tape (for tests).
size_t tape_size();

// Replays this thread's tape in reverse, starting from root's gradient: 1 for a one-element
// root, else `root_grad` (same shape as root, of grad_dtype(root)). The tape is cleared
// afterwards, releasing every saved tensor; parameter gradients stay in their Vars.
void backward(const Var& root);
void backward(const Var& root, const Tensor& root_grad);

// Drops this thread's tape without running it (e.g. after an evaluation that recorded).
void clear_tape();

// Activation checkpointing: runs fn(inputs) without recording; during backward, runs it
// again with recording on a sub-tape and replays that, so only the inputs are kept between
// forward and backward. Variables that fn captures (parameters) receive their gradients
// as usual. fn must be deterministic.
using RecomputeFn = std::function<Var(const std::vector<Var>&)>;
Var recompute(const RecomputeFn& fn, const std::vector<Var>& inputs);

}  // namespace gpumix
