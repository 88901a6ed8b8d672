// --eval-choices during training: llm.c's multiple-choice accuracy (nn/eval.h: the file, the
// rows of an example, the prediction by the lowest mean loss per completion token) measured
// on the model the engine holds, the examples split over the ranks like the validation
// windows. The trainer calls it when due and logs choices_acc (dist/engine/run_report.h).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/device.h"
#include "dist/comm/comm.h"
#include "dist/engine/engine.h"
#include "nn/eval.h"

namespace gpumix::dist {

// The examples this rank scores, [first, last) of `total`.
using ExampleRange = std::function<std::pair<int64_t, int64_t>(int rank, int64_t total)>;

// Collective: every rank calls it with the same examples and gets the whole score. Each rank
// scores its range, one example (a row per completion, `seq` tokens wide) per pass, every
// rank walking as many passes as the busiest so that the engine's collectives match.
ChoicesScore score_choices(Engine& engine, Comm& comm, const std::vector<ChoiceExample>& examples, int64_t seq,
                           const ExampleRange& range_of, Device host, Device device);

}  // namespace gpumix::dist
