// Checkpoint data (nn/checkpoint.h): a valid meta.json for a 16-element "master" array,
// whose file holds the fuzzed bytes; opened, read in slices and verified. Wrong sizes and
// wrong contents must both be rejected with CheckpointError.
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = gpumix::fuzz::save_fixture(gpumix::fuzz::scratch_dir() + "/run");
  static const std::vector<float> good = gpumix::fuzz::fixture_values(16, 1.0f);
  gpumix::fuzz::write_bytes(dir + "/master.bin", data, size);
  bool accepted = false;
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::CheckpointReader r(dir);
    gpumix::fuzz::exercise_reader(r);
    accepted = true;
  });
  // Whatever verify() accepts must be the bytes that were saved (XXH64 of 64 bytes: a
  // collision is not something a fuzzer finds by chance).
  if (accepted && (size != good.size() * 4 || std::memcmp(data, good.data(), size) != 0)) __builtin_trap();
  return 0;
}
