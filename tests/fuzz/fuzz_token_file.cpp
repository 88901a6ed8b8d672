// Token files (nn/data/token_file.h): the input is written to a file and opened with
// TokenFile; a file that opens is read whole and in slices.
#include <vector>

#include "nn/data/token_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = gpumix::fuzz::scratch_dir() + "/tokens.bin";
  gpumix::fuzz::write_bytes(path, data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::data::TokenFile f(path);
    const gpumix::data::TokenView v = f.tokens();
    int64_t sum = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0 || (uint64_t)v[i] >= f.vocab_size()) __builtin_trap();  // validated on open
      sum += v[i];
    }
    const std::vector<int32_t> all = v.slice(v.size() / 2, v.size()).to_vector();
    (void)sum;
    (void)all;
  });
  return 0;
}
