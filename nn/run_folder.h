// Finding things in a run folder (`gpumix train --out`): its checkpoints (nn/checkpoint.h),
// the tokenizer it was trained with, and the run folder of a checkpoint folder. The
// folder's lock is nn/run_lock.h.
#pragma once

#include <cstdint>
#include <string>

#include "nn/checkpoint.h"
#include "nn/data/bpe.h"

namespace gpumix {

// The run's tokenizer, in the run folder beside its checkpoints.
inline constexpr const char* kRunTokenizerFile = "tokenizer.bpe";

// A checkpoint folder given directly, or the latest complete one of a run folder.
CheckpointReader open_checkpoint(const std::string& where);
// The run folder of `where`: the parent of a checkpoint folder, else `where` itself.
std::string run_folder_of(const std::string& where);

// The run's tokenizer of a checkpoint: tokenizer.bpe in its run folder (the checkpoint
// folder's parent), whose vocabulary must be the model's `vocab`.
data::Tokenizer checkpoint_tokenizer(const CheckpointReader& reader, int64_t vocab);

// The run folder holds the tokenizer it trained with: a `--tokenizer` file elsewhere is
// copied to <out>/tokenizer.bpe (what export, generate and eval look for; the checkpoints'
// tokenizer_hash names it). Nothing to do when that is the file itself or holds the same
// tokenizer; another tokenizer there is refused, naming both.
void keep_run_tokenizer(const std::string& tokenizer_path, uint64_t hash, const std::string& out);

}  // namespace gpumix
