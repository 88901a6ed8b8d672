// Test-only fault injection for the training engine, driven by ONE environment variable
// read here and nowhere else:
//
//   GPUMIX_FAULT=RANK:POINT:STEP[:ARG]      (several, separated by ',')
//
// POINT where the trainer calls fault_point() in step STEP (1-based) on rank RANK:
//   forward     after the forward pass of the step (sharded engine: all blocks forward)
//   backward    after the backward of the last block
//   collective  just before the first gradient reduce-scatter of the step
//   optimizer   just before the optimizer step
//   checkpoint  after writing this rank's slices of a checkpoint, before it is committed
//   prune       rank 0, after a checkpoint is committed, before --keep-checkpoints deletes
//               older ones
// ARG for these: "throw" (default: an exception, as a bug would), "exit" (_exit(86): the
// process vanishes without cleanup) or "kill" (SIGKILL to itself).
//
// Injection points, asked through fault_inject():
//   nan_loss    this rank's loss of the step becomes NaN
//   nan_grad    a NaN in this rank's reduced gradient slice of unit ARG (default: the first
//               unit it owns elements of)
//   inf_grad    the same with +Inf
//   slow        from this step on, this rank's device is ARG times slower than a real one
//               (an emulated device slowing down mid-run: tests of re-planning)
//
// Unset (the normal case) it costs one branch on a cached flag per call.
#pragma once

#include <cstdint>
#include <string>

namespace gpumix::dist {

// True when GPUMIX_FAULT is set (parsed once; a malformed value throws on first use).
bool faults_enabled();

// The step the calling thread (rank) is in; fault_point() and fault_inject() match it.
void fault_set_step(int64_t step);

// Throws / exits / kills when a fault is set for (rank, point, current step).
void fault_point(int rank, const char* point);

// True when the injection `point` is set for (rank, current step); *arg receives its ARG
// (-1 when not given).
bool fault_inject(int rank, const char* point, int* arg = nullptr);

}  // namespace gpumix::dist
