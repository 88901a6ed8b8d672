// Streams and events on a CPU device (core/stream.h): everything has completed when a call
// returns, so recording, waiting and synchronising are no-ops, and an event keeps the
// host clock (elapsed_ms measures host time). The cuda side: tests/cuda/test_cuda_backend.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/stream.h"
#include "test_util.h"

namespace gpumix {
namespace {

TEST(Stream, NamesAndCpuHandles) {
  EXPECT_STREQ(stream_name(Stream::compute), "compute");
  EXPECT_STREQ(stream_name(Stream::comm), "comm");
  EXPECT_STREQ(stream_name(Stream::offload), "offload");
  for (Stream s : {Stream::compute, Stream::comm, Stream::offload})
    EXPECT_EQ(stream_handle(Device::cpu(3), s), nullptr);
  synchronize(Device::cpu());  // nothing queued: returns
}

TEST(Stream, CpuEventsHaveCompletedAndMeasureHostTime) {
  Event never;
  EXPECT_FALSE(never.recorded());
  EXPECT_TRUE(never.query());
  never.wait(Device::cpu(), Stream::comm);  // a never-recorded event has completed
  never.synchronize();

  Event start, stop;
  start.record(Device::cpu(1), Stream::compute);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop.record(Device::cpu(1), Stream::comm);
  EXPECT_TRUE(start.recorded());
  EXPECT_EQ(start.device(), Device::cpu(1));
  EXPECT_TRUE(stop.query());
  stop.wait(Device::cpu(1), Stream::compute);
  stop.synchronize();
  // Slept 20 ms between the records: at least that much host time (no upper bound: the
  // machine may be loaded).
  EXPECT_GE(start.elapsed_ms(stop), 20.0);
  EXPECT_LE(stop.elapsed_ms(start), -20.0);
}

TEST(Stream, EventsMoveAndReRecord) {
  Event a;
  a.record(Device::cpu());
  Event b = std::move(a);
  EXPECT_TRUE(b.recorded());
  EXPECT_FALSE(a.recorded());  // NOLINT(bugprone-use-after-move): moved-from is empty
  Event c;
  c = std::move(b);
  EXPECT_TRUE(c.recorded());
  c.record(Device::cpu(2));  // recording again moves the mark (and the device)
  EXPECT_EQ(c.device(), Device::cpu(2));
  Event later;
  later.record(Device::cpu(2));
  EXPECT_GE(c.elapsed_ms(later), 0.0);
}

TEST(Stream, ElapsedOfAnUnrecordedEventNamesIt) {
  Event a, b;
  a.record(Device::cpu());
  EXPECT_THROW_WITH(a.elapsed_ms(b), Error, "elapsed_ms", "both events must be recorded",
                    "the later one is not");
}

}  // namespace
}  // namespace gpumix
