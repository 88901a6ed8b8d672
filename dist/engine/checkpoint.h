// Checkpoints of a run on one or many ranks: every rank writes and reads its own slices of
// the fp32 master weights and AdamW moments (Engine::slices), so a checkpoint does not
// depend on the plan that wrote it and resumes under any other, in either compute dtype
// (a bf16 run's compute copy is rebuilt from the master it reads).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dist/comm/comm.h"
#include "dist/engine/engine.h"
#include "dist/plan/work.h"
#include "nn/checkpoint.h"
#include "nn/gpt_config.h"
#include "nn/train_options.h"

namespace gpumix::dist {

// Writes step `step` under o.out (rank 0 prepares and commits, every rank writes its
// slices; all agree on each stage), then keeps only the newest o.keep_checkpoints (when
// set). Returns the committed folder on rank 0, "" elsewhere. meta.json's "extra" records
// the compute dtype (checkpoint_dtype).
std::string save_checkpoint(const TrainOptions& o, const GPTConfig& config, DType dtype,
                            const Work& work, Engine& engine, Comm& comm, int step,
                            uint64_t tokenizer_hash);

// Reads this rank's slices; returns the checkpoint's step (the same on every rank).
int load_checkpoint(const std::string& where, const GPTConfig& config, Engine& engine, Comm& comm,
                    uint64_t tokenizer_hash);

// Fills `dst` (f32, on any device) with read(host, n), which writes n floats at host: in
// place on a CPU, through a host copy on a GPU (checkpoints, --init-from).
void fill_through_host(Tensor dst, const std::function<void(float*, int64_t)>& read);

// The compute dtype the checkpoint was written in: f32 when it does not say (written before
// runs had a dtype). Informational: what a resume computes in when nothing else says.
DType checkpoint_dtype(const CheckpointReader& reader);

}  // namespace gpumix::dist
