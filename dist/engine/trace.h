// A trace of training steps A..B (`gpumix train --trace FILE --trace-steps A:B`) in the
// Trace Event Format that Perfetto (ui.perfetto.dev) and chrome://tracing open:
//
//   {"traceEvents": [{"name": "forward", "cat": "compute", "ph": "X", "ts": 1520.125,
//                     "dur": 310.5, "pid": 1, "tid": 0, "args": {"unit": "block 2", "micro_batch": 0}},
//                    ...,
//                    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "rank 1 (cpu:1)"}},
//                    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "..."}}],
//    "displayTimeUnit": "ms", "otherData": {...}}
//
// One process per rank (pid = rank); its tracks (tid) are named: track 0 is the rank's CPU
// thread (compute, and the time it waits for collectives), track 1 the collectives it has in
// flight (a prefetched gather from issue to the wait that returns it). A GPU engine adds
// its streams as further tracks (track("cuda:0 compute")). Times are microseconds from the
// start of the first traced step (the earliest rank's), on the steady clock that every rank
// of one machine shares.
//
// Spans are scoped (TraceSpan) and so nest on each track. In a traced step, the step span
// holds the step's phases one after another (load batch, forward-backward, the loss and
// gradient checks, the optimizer), and the engine's spans (per unit: gathers, waits,
// forward and backward per micro-batch, reduce-scatters) nest in forward-backward. The step
// span covers what the log's `ms` measures for that rank.
//
// Off (the default) a span costs a test of the tracer; nothing is recorded or allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace gpumix::dist {

class Comm;

class Tracer {
 public:
  Tracer() = default;  // off
  // Records steps [first, last] of rank `rank`; L: the model's blocks (to name units).
  Tracer(std::string path, int first, int last, int rank, std::string rank_label, int L);

  bool enabled() const { return !path_.empty(); }
  // Switches recording on inside [first, last]. Returns whether it is on.
  bool begin_step(int step);
  bool on() const { return on_; }
  // True after the last traced step: the trace is complete and can be written.
  bool complete(int step) const { return enabled() && step == last_; }
  int first() const { return first_; }
  int last() const { return last_; }

  static constexpr int kCpu = 0, kCollectives = 1;
  // The id of this rank's track `name` (a new one the first time).
  int track(const std::string& name);

  // A span [t0, t1] (steady-clock seconds) on `track`; unit / micro_batch < 0: not given;
  // name null: the unit's name ("block 2").
  void add(const char* name, const char* cat, double t0, double t1, int track = kCpu, int unit = -1,
           int micro_batch = -1);

  // Collective: every rank sends its spans to rank 0, which writes the file (written to a
  // temporary name, then renamed). Every rank calls it once, after the last traced step.
  void write(Comm& comm, Device device, const std::string& other_data_json);

 private:
  struct Span {
    const char* name;
    const char* cat;
    double t0, t1;
    int track, unit, micro_batch, step;
  };
  std::string events_json(double origin) const;

  std::string path_;
  int first_ = 0, last_ = -1, rank_ = 0, L_ = 0;
  bool on_ = false;
  int step_ = 0;
  std::string rank_label_;
  std::vector<std::string> tracks_ = {"CPU: compute and waits for collectives", "collectives in flight"};
  std::vector<Span> spans_;
  double origin_ = -1;  // this rank's start of the first traced step
};

// A scoped span on track 0 (or `track`): from construction to destruction. With a null or
// idle tracer, construction is a test and nothing else happens.
class TraceSpan {
 public:
  TraceSpan(Tracer* tracer, const char* name, const char* cat, int unit = -1, int micro_batch = -1,
            int track = Tracer::kCpu);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer* tracer_;
  const char* name_;
  const char* cat_;
  int unit_, micro_batch_, track_;
  double t0_ = 0;
};

}  // namespace gpumix::dist
