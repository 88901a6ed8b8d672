// Emulated slowdown (docs/design.md "Devices and emulation"): a device with slowdown f > 1
// takes f x each op's own time, by waiting after the op. core/ops.cpp's dispatch wraps every
// op in a SlowdownScope; real devices have f = 1 and pay one lookup.
//
// - CPU: the calling thread sleeps after the op. On one OpenMP thread an op's own time is
//   its CPU time, so that emulated devices sharing a machine's cores keep their speeds (the
//   time an op spent waiting for a core that another rank held comes out of the wait); with
//   several threads it is the wall time (such ranks get cores of their own,
//   dist/engine/launch.h). What is owed carries over from op to op, so waits too short to
//   sleep and sleeps that overran even out (a little credit is kept, never much).
// - GPU: the host never waits. Events around each op measure its own time on the GPU, and
//   once they have completed (queried, never waited for) a spin kernel on the compute stream
//   serves (f - 1) x that time, so that later work on the stream starts that much later
//   (settle_slowdown serves what is still owed).
// Only work on the compute stream is slowed: an op on another stream (a collective's
// reductions on comm, ops::add) is the link's time, not the device's.
#pragma once

#include "core/device.h"
#include "core/stream.h"

namespace gpumix {

class GpuSlowdown;  // per thread and logical GPU (core/slowdown.cpp)

class SlowdownScope {
 public:
  explicit SlowdownScope(Device device, Stream stream = Stream::compute);
  ~SlowdownScope();
  SlowdownScope(const SlowdownScope&) = delete;
  SlowdownScope& operator=(const SlowdownScope&) = delete;

 private:
  double factor_;
  double wall_s_ = 0, cpu_s_ = 0;  // a CPU device: when the op started
  bool alone_ = false;             // a CPU device on one OpenMP thread: its CPU time counts
  GpuSlowdown* gpu_ = nullptr;
};

// Waits until the device has finished all its work, its emulated slowdown for that work
// included: on a cuda device with slowdown f > 1, the spin of f - 1 times the work enqueued
// so far, which otherwise goes onto the stream with the next op (core/slowdown.h), is served
// now and waited for. Returns that spin's milliseconds (0 on other devices: a CPU's
// slowdown waits inside each op). For measurements: nothing before them is charged to them
// (a cache flush before a timed kernel), and a timed kernel's own slowdown is known.
double settle_slowdown(Device device);
// The milliseconds of slowdown spin served so far on a cuda `device` by this thread (0
// elsewhere): with settle_slowdown, what a test checks against the device's time.
double slowdown_served_ms(Device device);

}  // namespace gpumix
