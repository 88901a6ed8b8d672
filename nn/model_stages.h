// A model family's computing half (the shape half: nn/model_family.h): its parameter
// layout and its stages on the autograd tape, the embedding's backward outside it, the
// key/value-cache step of incremental decoding, and the kernels of a step for
// `gpumix bench`. nn::GPT holds the parameters and runs these; an engine runs the stages
// unit by unit on gathered parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"
#include "nn/gpt_config.h"

namespace gpumix {

struct ParamInfo;
class GPT;

// One kernel of a training step as `gpumix bench` times it (tools/bench.cpp): `make`
// allocates its buffers and returns the call that is timed. per_block: calls per block of a
// step; outside: calls per step outside the blocks (embedding, head).
struct StepKernel {
  std::string role, group, what;  // "qkv.fwd"; "block" / "embed" / "head"; the kernel and shapes
  int per_block = 0, outside = 0;
  double flops = 0, bytes = 0;
  std::function<std::function<void()>()> make;
};

// One sequence's incremental decoding state (nn/infer.h KVCache holds one): the family's
// cached keys and values per layer, in the model's compute dtype.
class DecodeState {
 public:
  virtual ~DecodeState() = default;
  // Runs tokens i32 (1, rows) at positions p0..p0+rows-1 (the prompt's rows when p0 = 0,
  // else one), appending their keys and values to the cache; returns the logits (V, fp32)
  // of the last row.
  virtual std::vector<float> forward(const Tensor& tokens, int64_t rows, int64_t p0) = 0;
};

class ModelStages {
 public:
  virtual ~ModelStages() = default;

  // Every parameter, in flat order, units ascending (nn/gpt.h ParamInfo); its sizes are the
  // shape half's embed_params / block_params / head_params.
  virtual std::vector<ParamInfo> param_layout(const GPTConfig& c) const = 0;

  // The stages, on a model's bound parameters (GPT::param_named):
  // tokens i32 (B, T) -> (B, T, C)
  virtual Var embed(const GPT& model, const Tensor& tokens) const = 0;
  // block l (0-based): (B, T, C) -> (B, T, C)
  virtual Var block(const GPT& model, int l, const Var& x) const = 0;
  // (B, T, C) -> logits (B, T, Vp) (padded: the classifier's width) or (B, T, V).
  virtual Var head(const GPT& model, const Var& x, bool padded) const = 0;
  // The embedding's backward outside the tape (an engine runs it last, from the tokens and
  // the gradient into the first block): accumulates into unit_grad, unit 0's flat fp32
  // gradient (embed_params elements).
  virtual void embed_backward(const GPTConfig& c, const Tensor& unit_grad, const Tensor& dx,
                              const Tensor& tokens) const = 0;
  // A fresh key/value cache of one sequence for `model` (which must outlive it).
  virtual std::unique_ptr<DecodeState> decoder(const GPT& model) const = 0;

  // The embedding's, one block's and the head's kernels of a training step at batch B x T
  // in `dt` on `dev`, in step order (the step-wide ones, zero_grad, AdamW, ..., are the
  // tool's).
  virtual std::vector<StepKernel> step_kernels(const GPTConfig& c, int64_t B, int64_t T, DType dt,
                                               Device dev) const = 0;
};

// The stages of c's family; throws std::invalid_argument for a family without them.
const ModelStages& model_stages(const GPTConfig& c);

// Inputs for benchmarks and profiles that depend only on their name: N(0, 1) values (in
// `dtype`), and token ids below V.
Tensor named_random_tensor(const Shape& shape, Device device, const char* name, DType dtype = DType::f32);
Tensor hashed_random_tokens(int64_t m, int64_t T, int V, Device device);

// The families' stages (each in its own file; model_stages.cpp's registry lists them).
const ModelStages& gpt2_stages();

}  // namespace gpumix
