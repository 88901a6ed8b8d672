// Several ranks: the uneven sharded engine. Rank i owns share r_i of every unit's fp32
// master weights and AdamW moments (ShardLayout), runs b_i rows of every global batch as
// micro-batches of m_i, layer-major: each unit's parameters are gathered once per pass (the
// next unit's gather overlapping the current unit's compute), each micro-batch's block input
// is kept (in host memory with offload: dist/engine/offload.h), backward recomputes each
// block from it, and each unit's gradient is reduce-scattered once per step.
//
// Devices: everything lives on the rank's device; on a GPU the prefetched gather runs on
// its comm stream while the current unit computes, ordered by events (dist/comm/comm.h:
// collectives on device tensors start after the compute stream's earlier work and are
// ordered before its later work), never by a host wait.
//
// Hybrid sharding (group_size g > 0, dist/plan/cost_model.h's Sharding): the ranks form
// groups of g consecutive ranks (Comm::split); the layout is over a group's g positions,
// every group holds the whole state that way, the units are gathered and their gradients
// reduce-scattered within the group, and each gradient slice is then all-reduced among the
// ranks of its position across the groups (the replicas), so that every replica takes the
// same optimizer step. Full sharding (g = 0): one group of every rank, no replicas. With
// prefetch, a unit's all-reduce across the groups stays in flight behind the next unit's
// backward and is waited for at the next unit's reduce (the last one's at the end of the
// backward): a GPU moves it on its comm stream meanwhile.
//
// Precision: the master shard, the gradients (accumulated over micro-batches and
// reduce-scattered) and the AdamW moments are fp32 (16 bytes per parameter of the shard in
// either compute dtype). Units are gathered in the compute dtype: each rank rounds its
// slice of the master into its place in the gathered buffer, which the all-gather then
// fills around it (in bf16 half of fp32's bytes, and no bf16 copy of the shard is kept).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/comm/comm.h"
#include "dist/comm/hierarchical.h"
#include "dist/engine/engine.h"
#include "dist/engine/offload.h"
#include "nn/gpt.h"
#include "nn/optim.h"

namespace gpumix::dist {

class ShardedEngine final : public Engine {
 public:
  // `layout` is over comm.size() ranks (full) or over the group_size positions (hybrid).
  // Where the shard ranks span several nodes, the unit collectives run through a
  // TopologyComm (dist/comm/hierarchical.h): flat or hierarchical per call, as
  // dist/comm/collective_cost.h prices them for `links` (the profile's; by default
  // TopologyLinks{}). Its prefetched gathers, flat or hierarchical, run on a thread of
  // their own where the library allows one (MPI_THREAD_MULTIPLE: gpumix asks for it), and
  // so overlap the compute; elsewhere a hierarchical gather completes before it returns.
  // Unit 0 (the embedding) is gathered once per step; where the head is tied to it, it is
  // kept until the end of the backward, when its gradient is reduce-scattered (the memory
  // model's `gathered` term holds it all that time anyway); else it is freed after the
  // lookup and its gradient buffer exists only for the embedding's backward.
  ShardedEngine(const GPTConfig& config, const ShardLayout& layout, Comm& comm, Device device,
                DType compute, uint64_t seed, const AdamWConfig& adam, bool prefetch, int group_size = 0,
                const CollectiveLinks& links = {});

  std::vector<Tensor> forward_backward(const Tensor& inputs, const Tensor& targets, int64_t micro,
                                       float scale) override;
  std::vector<Tensor> loss_sums(const Tensor& inputs, const Tensor& targets, int64_t micro) override;
  std::vector<Tensor> unit_grads() override;
  void scale_grads(float f) override;
  void optimizer_step(float lr, int step) override;
  std::vector<OwnedSlice> slices() override;
  void sync_compute_params() override {}  // every gather rounds the master afresh
  void reshard(const ShardLayout& next) override;
  void set_offload(bool on) override;
  bool primary_replica() const override { return !replicas_ || replicas_->rank() == 0; }
  CollectiveTimes time_collectives(int unit, int repeats) override;

 private:
  void allocate_state();
  // Unit u's slice of one of this rank's flat (rank_total) arrays.
  Tensor unit_slice(const Tensor& flat, int u) const;
  Tensor master_slice(int u) const { return unit_slice(master_, u); }
  Tensor grad_slice(int u) const { return unit_slice(grads_, u); }
  // A buffer for unit u's full parameters in the compute dtype, holding this rank's slice
  // of them (rounded from its master); `mine` gets that slice's view, the gather's input.
  Tensor own_part_of_full(int u, Tensor* mine);
  // `offload`: where block inputs go until backward (null: they stay in the result). Where
  // the head is tied to the embedding (GPTConfig::head_reads_embedding), the embedding unit
  // stays gathered (embedding_) for it and the caller releases it; else it is released here.
  std::vector<std::vector<Tensor>> forward_blocks(const Tensor& inputs, int64_t micro, InputOffload* offload);
  // Block l's input j for its backward: from `saved`, or back from the offload (which is
  // asked for the next one meanwhile).
  Tensor saved_input(std::vector<std::vector<Tensor>>& saved, int l, size_t j);
  void bind(int unit, const Tensor& params, const Tensor& grads) { model_.bind_unit(unit, params, grads); }
  // After a unit ran: its gathered parameters (and gradient buffer) are freed, so that only
  // the running unit, the prefetched one and a tied embedding are ever on the device.
  void release(int unit) { model_.unbind_unit(unit); }
  Tensor fetch(int unit, int next);
  void reduce(int unit, const Tensor& full_grad);
  void finish_all_reduce();  // waits for the all-reduce across groups left in flight, if any

  GPTConfig config_;
  ShardLayout layout_;
  Comm& comm_;
  std::unique_ptr<Comm> group_, replicas_;  // hybrid: this rank's group, its position's replicas
  std::unique_ptr<Comm> topology_;          // the shard ranks through TopologyComm, when on several nodes
  Comm* shard_;                             // the ranks of the layout: the group, or every rank
  int shard_rank() const { return shard_->rank(); }
  Device device_;
  DType compute_dtype_;
  GPT model_;  // unbound: each unit is bound to its gathered parameters as it runs
  AdamWConfig adam_;
  bool prefetch_;
  Tensor master_, grads_;  // (rank_total) fp32: this rank's slices of every unit, back to back
  Tensor embedding_;       // unit 0 gathered, from the forward's start (to the end of the backward if tied)
  std::vector<std::unique_ptr<AdamW>> opts_;
  std::unique_ptr<InputOffload> offload_;  // null: block inputs stay on the device
  CommRequestPtr pending_;
  Tensor pending_full_;
  int pending_unit_ = -1;
  double pending_issued_ = 0;  // when the pending gather was issued (its trace span)
  CommRequestPtr pending_ar_;  // hybrid: the last reduced unit's all-reduce across groups
  int pending_ar_unit_ = -1;
  double pending_ar_issued_ = 0;
};

}  // namespace gpumix::dist
