// llm.c's multiple-choice eval files (nn/eval.h): the input is written to a file and read
// with read_choices (vocabulary 512); each example that reads is laid out as rows of a
// 16-token window and predicted, and the rows must keep every completion token's target.
#include <vector>

#include "nn/eval.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = gpumix::fuzz::scratch_dir() + "/choices.bin";
  gpumix::fuzz::write_bytes(path, data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const std::vector<gpumix::ChoiceExample> examples = gpumix::read_choices(path, 512);
    for (const gpumix::ChoiceExample& e : examples) {
      if (e.label < 0 || e.label >= (int)e.completions.size() || e.context.empty()) __builtin_trap();  // validated
      const gpumix::ChoiceRows rows = gpumix::choice_rows(e, 16, false);
      if (rows.width < 1 || rows.width > 16) __builtin_trap();
      for (int64_t i = 0; i < rows.rows; ++i) {
        int64_t targets = 0;
        for (int64_t t = 0; t < rows.width; ++t) targets += rows.targets[i * rows.width + t] >= 0;
        if (targets != (int64_t)e.completions[i].size()) __builtin_trap();  // each completion token scored once
      }
      (void)gpumix::predict_choice(e, std::vector<double>(e.completions.size(), 1.0));
    }
  });
  return 0;
}
