// safetensors files (nn/safetensors/safetensors.h): the input is written to a file and opened
// with Reader, which validates the whole header; a file that opens has every tensor of a
// float dtype converted to fp32, and every value the offsets promise must be readable.
#include <string>
#include <vector>

#include "nn/safetensors/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = gpumix::fuzz::scratch_dir() + "/model.safetensors";
  gpumix::fuzz::write_bytes(path, data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::safetensors::Reader r(path);
    std::vector<float> values;
    for (const auto& t : r.tensors()) {
      if (t.end - t.begin > size) __builtin_trap();  // validated: inside the file
      values.resize((size_t)t.numel());
      r.read_f32(t, values.data());  // a non-float dtype is a clean rejection
    }
  });
  return 0;
}
