// Checkpoints of a run on one or many ranks: every rank writes and reads its own slices of
// the fp32 master weights and AdamW moments (Engine::slices), so a checkpoint does not
// depend on the plan that wrote it and resumes under any other, in either compute dtype
// (a bf16 run's compute copy is rebuilt from the master it reads).
//
// Local mode (--sync local:H with more than one group, dist/engine/outer_step.h) saves right
// after an outer step, where every group's master weights are the outer copy: master.bin
// holds them all, and beside the usual files (which are group 0's, so every reader of
// master.bin and adam_*.bin works as before)
//   adam_m.g1.bin, adam_v.g1.bin, ...   group g's own AdamW moments, g = 1 .. G-1
//   outer_momentum.bin                  the outer optimizer's momentum
// each full length and written slice by slice like master.bin; meta.json's extra.local says
// {every, outer_lr, outer_momentum, nesterov, groups, weights (each group's share of the
// batch's tokens), outer_steps}. A resume reads the master weights and
//   - as many groups as saved: group g its own moments (bitwise the run that went on);
//   - another number of groups (a node lost, --groups changed, every-step mode, which is one
//     group): every group the token-weighted mean of the saved groups' moments (an
//     every-step checkpoint is one group of weight 1: its moments as they are);
//   - the outer momentum where both have one; from an every-step checkpoint zero, the outer
//     copy the master weights; in a run without an outer step it is dropped.
// Each case is said on rank 0, as is a change of H or of the outer optimizer's settings.
//
// Mid-period (a --stop-at between outer steps; exact preemption): the groups' weights
// differ, so the checkpoint holds what the period needs besides: master.g1.bin, ... (group
// g's master weights; master.bin is group 0's), outer.bin (the outer copy the period started
// from) and extra.local.period_start (the step of the last outer step). It resumes only on
// the same groups, each its own weights and moments, and the next outer step measures from
// the outer copy: bitwise the run that went on, on the same layout.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dist/comm/comm.h"
#include "dist/engine/engine.h"
#include "dist/engine/outer_step.h"
#include "dist/plan/work.h"
#include "nn/checkpoint.h"
#include "nn/gpt_config.h"
#include "nn/train_options.h"

namespace gpumix::dist {

// Writes step `step` under o.out (rank 0 prepares and commits, every rank writes its
// slices; all agree on each stage), then keeps only the newest o.keep_checkpoints (when
// set). Returns the committed folder on rank 0, "" elsewhere. meta.json's "extra" records
// the compute dtype (checkpoint_dtype). `outer`: local mode's outer step, just taken (null:
// every-step, or one group).
std::string save_checkpoint(const TrainOptions& o, const GPTConfig& config, DType dtype,
                            const Work& work, Engine& engine, Comm& comm, int step,
                            uint64_t tokenizer_hash, const nlohmann::json& data = {},
                            const OuterStep* outer = nullptr);

// Reads this rank's slices; returns the checkpoint's step (the same on every rank). `outer`:
// this run's outer step (null: one group), restarted from what was read. `data`: this run's
// data_identity, checked against the checkpoint's (check_data_identity), as is the loader's
// window order (data_position.order); null: neither checked (a caller that reads no data).
int load_checkpoint(const std::string& where, const GPTConfig& config, Engine& engine, Comm& comm,
                    uint64_t tokenizer_hash, const nlohmann::json* data = nullptr, OuterStep* outer = nullptr);

// What token data a run trains and validates on, for data_position.files: per file its name
// (without its folder, so that data moved elsewhere still resumes), its size and the xxh64 of
// its first KiB (an llm.c shard's header), {"train": [...], "val": [...]}. A run on text
// records nothing (null). Reads 1 KiB per file; throws InputError when one cannot be read.
nlohmann::json data_identity(const std::vector<std::string>& train, const std::vector<std::string>& val);

// Windows are drawn over the whole token sequence, so resuming on data that differs in any
// file (changed, added, removed, reordered) would read other windows: throws InputError
// naming the first file that differs and how. `saved` null (an older checkpoint, or text):
// nothing to check.
void check_data_identity(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint);

// What a checkpoint's meta.json says of local mode (extra.local; an every-step checkpoint:
// one group of weight 1, no outer state). Throws InputError naming a malformed field, and
// one naming the missing array of a local checkpoint.
struct SavedGroups {
  bool local = false;  // written in local mode: it holds the outer momentum
  int groups = 1;
  std::vector<double> weights = {1.0};  // each group's share of the batch's tokens
  LocalSync sync;                       // H and the outer optimizer's settings (local only)
  int outer_steps = 0;
  int period_start = -1;  // mid-period: the step of the last outer step (-1: taken right after one)
  bool mid_period() const { return period_start >= 0; }
};
SavedGroups saved_groups(const CheckpointReader& reader);

// Fills `dst` (f32, on any device) with read(host, n), which writes n floats at host: in
// place on a CPU, through a host copy on a GPU (checkpoints, --init-from).
void fill_through_host(Tensor dst, const std::function<void(float*, int64_t)>& read);

// The compute dtype the checkpoint was written in: f32 when it does not say (written before
// runs had a dtype). Informational: what a resume computes in when nothing else says.
DType checkpoint_dtype(const CheckpointReader& reader);

}  // namespace gpumix::dist
