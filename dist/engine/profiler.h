// The profiler (docs/method.md §1): measures, on every rank at once, what the planner needs for
// the model being trained: per-block forward and backward (+ recompute) times and the
// allocator's peak at micro-batch sizes 1, 2, 4, ... up to the largest that fits, the
// embedding + head + loss, AdamW per parameter, and the collectives among the ranks (even
// and uneven). Compute times are medians after a warm-up, measured on the rank's own device,
// so an emulated device's slowdown and capacity show as they will in training; a
// collective's time is the fastest of its repeats (on a loaded machine the others measure
// the wait for ranks the scheduler did not run). Every rank makes each measurement over
// one common window (the slowest rank's `repeats` runs, 50 ms at least; a rank whose memory
// ran out keeps computing meanwhile), so that emulated devices sharing one machine's cores
// contend for them as they will in training, where every rank computes at once.
// The times are then smoothed across micro-batch sizes (never more per sequence for a
// larger micro-batch, never less in total): see smooth_samples in profiler.cpp.
// Device measurements are cached per (device, model shape, sequence length, dtype, threads
// per rank) and, for CPU devices, the devices of every rank (they share the cores).
#pragma once

#include <functional>
#include <string>

#include "core/device.h"
#include "dist/comm/comm.h"
#include "dist/plan/profile.h"

namespace gpumix::dist {

struct ProfilerOptions {
  int max_micro_batch = 32;  // largest m tried (the planner extrapolates beyond)
  int repeats = 5;           // the slowest rank's timed runs per measurement (median), after one warm-up
  std::string cache_dir;     // "" : $GPUMIX_CACHE, else $HOME/.cache/gpumix; "-" (either): no cache
  bool show_progress = true; // rank 0 shows a progress bar
};

// Collective over `comm`: every rank passes the run's compute dtype (f32 or bf16), its
// device (already configured: capacity and slowdown) and that device's label
// ("cpu:mem=2GiB:slow=3"); every rank returns the same profile (ranks with the same label
// share one device entry), measured in that dtype.
Profile profile_cluster(const GPTConfig& model, int seq_len, DType dtype, const std::string& device_label,
                        Device device, Comm& comm, const ProfilerOptions& options = {});

// Seconds of one collective `fn` that every rank runs together: after a warm-up, runs
// started by all ranks at once (a barrier, not timed), at least `repeats` of them and at
// least kCollectiveBudget_s of them (at most kMaxCollectiveRuns), each rank's fastest, then
// the slowest rank's. Collective. The fastest, because a rank that the machine did not run
// in time can only add to a run: on two busy cores most runs waited so, and their median
// (milliseconds instead of tens of microseconds per collective) made every plan look bound
// by its collectives, whatever the ranks' speeds; a few runs of a fast collective may all
// have waited so, hence the budget. The profiler measures the links with it, and the
// engine its collectives at the end of a run (Engine::time_collectives), alike.
constexpr double kCollectiveBudget_s = 0.1;
constexpr int kMaxCollectiveRuns = 200;
double fastest_collective(Comm& comm, Device device, int repeats, const std::function<void()>& fn);

// The dense peak for MFU: a square GEMM of up to 512 in `dtype` on `device` (its three
// matrices in half the free memory), timed as the profiler times compute (every rank at
// once; collective). The profile's peak_flops, and a run's without a profile.
struct GemmPeak {
  double flops = 0;   // per second
  std::string shape;  // "512^3 bf16"
};
GemmPeak measure_gemm_peak(Device device, DType dtype, Comm& comm, int repeats);

// The collectives of a run measure at its own sizes: one block's parameters gathered in the
// compute dtype, its fp32 gradient reduce-scattered, and the same for the embedding unit
// (the largest, once a step each).
struct CommSizes {
  int64_t block = 0, embedding = 0;  // elements
  DType gather_dtype = DType::f32;
};

// The links of `comm`'s collectives (intra-node, inter-node, the leaders'), and the overlap
// of a prefetched gather, as a profile holds them. Collective.
CommProfile measure_comm(Comm& comm, Device device, int repeats, const CommSizes& sizes);

// The profiler's inputs, which `gpumix bench` measures with too: N(0, 1) numbers in `dtype`
// (drawn in fp32 from a key of `name`, then rounded), and (rows, T) tokens in [0, V) from a
// fixed hash.
Tensor random_tensor(const Shape& shape, Device device, const char* name, DType dtype = DType::f32);
Tensor random_tokens(int64_t rows, int64_t T, int V, Device device);

}  // namespace gpumix::dist
