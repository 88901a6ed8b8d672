// The mixed-precision contract (docs/design.md "Numbers and precision"), written once: a run
// computes in ONE compute dtype, f32, bf16 or f16 (CUDA only), and the dtype of every tensor argument of
// every op follows from it and the argument's role. core/ops.cpp checks each op's arguments
// against this rule; every op table (core/op_table.h says each argument's role, op by op)
// implements it; autograd and nn keep their tensors by it.
//
// In f32 every role is fp32: the same rule with compute = f32, at no extra cost.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

namespace gpumix {

enum class Role : uint8_t {
  // The compute dtype: activations, parameters as used in compute (the compute copy of
  // the weights), activation gradients (dout, dinp, dqkv, dlogits).
  compute,
  // fp32 in every compute dtype: master weights, parameter gradients (dweight, dbias,
  // dwte, dwpe, LayerNorm's dweight and dbias: accumulated over micro-batches and reduced
  // across ranks in fp32), AdamW moments, losses, lse, LayerNorm mean and rstd.
  fp32,
  // Either: an fp32 accumulator of compute-dtype values (ops::gemm's c, ops::axpy's out).
  compute_or_fp32,
};

// The dtypes an op can compute in: the float dtypes of core/dtype.h (f32, bf16, f16). Which
// device computes in which: backend_supports (f16 on CUDA devices only).
constexpr bool is_compute_dtype(DType t) { return is_float_dtype(t); }

// Whether a tensor of dtype `t` may play `role` in a run computing in `compute`.
constexpr bool role_allows(Role role, DType compute, DType t) {
  switch (role) {
    case Role::compute: return t == compute;
    case Role::fp32: return t == DType::f32;
    case Role::compute_or_fp32: return t == compute || t == DType::f32;
  }
  return false;
}

// Throws Error unless `t` is a dtype a run can compute in, naming `what` (e.g. "GPT",
// "--dtype"): f32 or bf16. Not f16 yet: a run in f16 needs loss scaling, which the trainer
// lacks so far (#36 item 4); the ops compute in it on CUDA (is_compute_dtype).
void check_compute_dtype(DType t, const char* what);

// Parses a run's compute dtype: "bf16", "fp32" or "f32"; anything else (fp16 and i32
// included, as check_compute_dtype says) throws Error naming `what` and listing the valid
// names.
DType compute_dtype_from_name(const std::string& name, const char* what = "compute dtype");

// True when this CPU computes bf16 natively: the kernels' AVX512-BF16 path runs here
// (kernels/cpu/isa.h), or it has AMX-BF16; with the operating system saving the registers
// they need. Checked at run time.
bool cpu_has_native_bf16();

// Whether `device`'s backend computes in `dtype` (the CPU: f32 and bf16; CUDA: bf16 and f16;
// false for a device kind this build lacks).
bool backend_supports(Device device, DType dtype);

// Throws InputError unless backend_supports(device, dtype), naming the device, the dtype,
// `what` chose it (e.g. "--dtype") and the fix: "the CUDA backend computes in bf16: use
// --dtype bf16".
void check_backend_supports(Device device, DType dtype, const char* what);

}  // namespace gpumix
