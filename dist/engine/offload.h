// Offload of saved block inputs (docs/method.md §5; a plan's `offload`, which the planner
// chooses for GPUs): the sharded engine keeps each micro-batch's block input in host
// memory between the block's forward and its backward, so that the device holds only a
// few of them (dist/plan/memory_model.h: `offload_staging` micro-batches) instead of all
// L x n_i.
//
// On a GPU the copies run on the device's offload stream (core/stream.h) into pinned host
// buffers, ordered by events, never by host waits: a copy out starts after the compute
// work that produced the input; its device tensor stays alive (and counts as one of the
// staged inputs) until the copy is done, joined to the compute stream before it is
// released (the allocator's rule). A copy back is issued one micro-batch ahead (prefetch)
// and the compute stream waits for it on an event.
//
// On a CPU the device memory is host memory already: the input is copied with memcpy into
// a host buffer outside the rank's allocator and its device tensor released, and copied
// back into a fresh device tensor before its backward: a plain copy, the same bits, and
// the emulated device's allocator no longer holds the saved inputs, as on a GPU.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "core/stream.h"
#include "core/tensor.h"

namespace gpumix::dist {

class InputOffload {
 public:
  // Device inputs staged at once while their copies out run (the memory model's staging).
  static constexpr int kStaging = 2;

  explicit InputOffload(Device device);
  ~InputOffload();
  InputOffload(const InputOffload&) = delete;
  InputOffload& operator=(const InputOffload&) = delete;

  // Saved input j of block l (on the device): copied to host memory; the device tensor is
  // released once at least kStaging later inputs were put (or when it is taken).
  void put(int l, int j, const Tensor& x);
  // Starts bringing input (l, j) back to the device (no-op when it is not offloaded or
  // already coming back).
  void prefetch(int l, int j);
  // Input (l, j) on the device, ordered before later compute-stream work. The slot's host
  // buffer is kept for the next step.
  Tensor take(int l, int j);
  bool holds(int l, int j) const;

  int64_t host_bytes() const;  // pinned / host buffers held (for tests and logs)

 private:
  struct HostBuffer;
  struct Slot {
    std::unique_ptr<HostBuffer> host;
    Shape shape;
    DType dtype = DType::f32;
    Tensor on_device;  // staged (copy out running) or prefetched (copy in running)
    bool coming_back = false;
    bool offloaded = false;  // the host buffer holds the input of this step
    Event done;              // the last copy of this slot (offload stream)
  };
  using Key = std::pair<int, int>;
  void retire(Slot& slot);  // joins the slot's device tensor to the compute stream, drops it

  Device device_;
  std::map<Key, Slot> slots_;
  std::deque<Key> staged_;  // slots whose copy out may still run, oldest first
};

}  // namespace gpumix::dist
