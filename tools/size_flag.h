// Checks of flags shared by several commands: byte sizes given on the command line
// ("512MiB", "2GiB", "1.5GB", "4096"), the planners' global batch and sharding, the compute
// dtype, and the bounds of a device profile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace gpumix::tools {

// Throws std::invalid_argument naming the text and the accepted forms.
int64_t parse_bytes(const std::string& text);

// Throws std::invalid_argument when --global-batch is more than the planners handle: their
// search grows with it (2^16 takes ~4 s on a 1024-device cluster, 2^20 over a minute) and a
// batch past the int range overflows their tables.
void check_global_batch_flag(int64_t global_batch);

// --dtype: "bf16", "fp32" or "f32"; "" (not given): nullopt. Throws Error listing the valid
// values otherwise.
std::optional<DType> parse_dtype_flag(const std::string& text);

// The profile's repeats per measurement and largest micro-batch (`gpumix profile --repeats
// --max-micro-batch`, `gpumix train --profile-repeats --profile-max-micro-batch`): each at
// least 1 (no repeat took the median of nothing). Throws std::invalid_argument naming the
// flag and the value.
void check_profile_flags(int repeats, int max_micro_batch, const std::string& repeats_flag,
                         const std::string& max_micro_batch_flag);

// --seq as given on the command line: a sequence length of at least 1. Left out, the command
// uses its default (`default_is`, e.g. "the model's context"); 0 no longer stands for it.
// Throws std::invalid_argument naming the value and the default.
void check_seq_flag(bool given, int64_t seq, const std::string& default_is);

// --sharding for the gpumix planner: "auto" -1 (full or hybrid, whichever the cost model
// predicts faster), "full" 0, or G > 0 (hybrid in groups of G ranks). Throws
// std::invalid_argument naming the text and the accepted forms; whether G divides the ranks
// is the planner's check (it knows them).
int parse_sharding_flag(const std::string& text);

}  // namespace gpumix::tools
