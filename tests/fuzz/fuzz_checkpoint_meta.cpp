// Checkpoint metadata (nn/checkpoint.h): a checkpoint folder with valid small data files and
// a fuzzed meta.json, opened with CheckpointReader, read with read_slice and verified.
#include <cstring>
#include <string>

#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = gpumix::fuzz::save_fixture(gpumix::fuzz::scratch_dir() + "/run");
  gpumix::fuzz::write_bytes(dir + "/meta.json", data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::CheckpointReader r(dir);
    gpumix::fuzz::exercise_reader(r);
  });
  return 0;
}
