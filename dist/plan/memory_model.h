// The memory model of docs/method.md §3: bytes on one rank for a given plan, term by term, so
// that each term can be held against the allocator's measured peak.
//
//   state    = r · P · (master + grad + AdamW m, v)                  (fp32: 16 B / param in
//                                              either compute dtype: the engine rounds its
//                                              slice into the gathered buffer, no copy)
//   gathered = Pe · (dtype + 4)                the embedding (tied to the LM head) and its
//                                              fp32 gradient, held from the head to the end
//                                              of the backward; untied (ModelFamily::
//                                              head_reads_embedding false): max(Pe, Ph) ·
//                                              (dtype + 4), the embedding's or the head's
//                                              unit, never both at once
//            + Pb · (2 · dtype + 4)            the running block, the prefetched one, and
//                                              the running block's fp32 gradient
//   act      = L · b · T · C · dtype           saved block inputs of all micro-batches
//              (offloaded: only `offload_staging` micro-batches of them stay on device)
//            + b · T · C · dtype               block outputs / their gradients of all
//                                              micro-batches, passed between blocks
//            + max(act_block(m),               the transient peak of one micro-batch: a
//                  head(m) − Pb · (dtype + 4)) block's recompute + backward, or the logits /
//                                              loss buffers of the head, which runs while
//                                              no block is gathered but the prefetched one;
//                                              the layer-major step never holds both
//   work     = fixed working bytes             workspaces, communication buffers
//            + margin                          fragmentation: a fraction of all the above
//
// dtype: bytes of the run's compute dtype (4 in f32, 2 in bf16). Pe, Pb, Ph: parameters of
// the embedding unit, of one block and of the head unit (the family's counts). Every other unit's gathered
// buffers are freed as soon as it ran. b = 0 with r > 0 is a rank that only holds
// state (it still gathers); b = 0 and r = 0 is a rank left out, which uses nothing.
// The carried term (b · T · C · dtype) is there because the layer-major backward needs it: the
// gradient flowing into block ℓ is held for all micro-batches at once. Taking the larger of
// the two phases' peaks rather than their sum matches the allocator's measured peak (the
// sum over-predicted by 20-25 % where the head dominates, e.g. gpt-nano's 4096-token vocabulary).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "dist/plan/profile.h"
#include "nn/gpt_config.h"

namespace gpumix::dist {

struct MemoryParams {
  double master_bytes = 4;      // fp32 master weights, per parameter of the shard
  double grad_bytes = 4;        // fp32 reduced gradient shard
  double moment_bytes = 8;      // AdamW m and v, fp32
  double grad_accum_bytes = 4;  // the gathered unit's fp32 gradient accumulator
  double fragmentation = 0.05;  // margin, as a fraction of every other term
  int offload_staging = 2;      // micro-batches of block inputs on device when offloading

  double state_bytes_per_param() const { return master_bytes + grad_bytes + moment_bytes; }
};

struct MemoryTerms {
  double state = 0;
  double gathered = 0;
  double act_block = 0;
  double act_saved = 0;
  double act_carry = 0;
  double work_head = 0;
  double work_fixed = 0;
  double work_margin = 0;

  // The running block's parameters and fp32 gradient: part of `gathered`, not held while
  // the head runs.
  double block_buffers = 0;
  double transient() const {
    const double head_phase = work_head - block_buffers;
    return act_block > head_phase ? act_block : head_phase;
  }
  double activations() const { return act_saved + act_carry + transient(); }
  double buffers() const { return work_fixed + work_margin; }
  double total() const { return state + gathered + activations() + buffers(); }
};

class MemoryModel {
 public:
  // `compute`: the run's compute dtype (f32 or bf16).
  MemoryModel(const GPTConfig& model, int seq_len, DType compute, MemoryParams params = {});

  // The rank's bytes with batch b in micro-batches of m (b = 0: m ignored), share r.
  MemoryTerms terms(const DeviceProfile& d, int64_t b, int64_t m, double r, bool offload) const;
  // The same from a micro-batch's measured values (what the planner's tables hold), for a
  // rank that takes part (it gathers even when b = 0 and r = 0).
  MemoryTerms terms_from(double act_block_bytes, double head_bytes, double work_fixed, int64_t b,
                         int64_t m, double r, bool offload) const;

  // Largest share r that fits `capacity` next to everything else (negative: none fits).
  double max_share(const MemoryTerms& without_state, double capacity) const;

  double state_bytes_total() const { return state_per_share_; }  // r = 1
  DType compute_dtype() const { return compute_; }
  double total_params() const { return params_total_; }
  double embed_params() const { return embed_; }
  double block_params() const { return block_; }
  const MemoryParams& params() const { return params_; }

  // Analytic formulas for when there is no measured profile (the simulator's synthesis).
  // One block's peak during recompute + backward at micro-batch m: the family's formula
  // (ModelFamily::block_activation_bytes; GPT-2's from Korthikanti et al. 2022).
  static double analytic_block_act_bytes(const GPTConfig& model, int seq_len, int64_t m, int dtype_bytes);
  // The padded logits in the compute dtype (the fused classifier writes their gradient in
  // their place: no second array), plus fp32 softmax statistics per token.
  static double analytic_head_bytes(const GPTConfig& model, int seq_len, int64_t m, int dtype_bytes);

 private:
  GPTConfig model_;
  int seq_len_;
  DType compute_;
  MemoryParams params_;
  double params_total_;
  double embed_, block_, head_;
  bool tied_;  // the head computes with the embedding's parameters
  double state_per_share_;
};

}  // namespace gpumix::dist
