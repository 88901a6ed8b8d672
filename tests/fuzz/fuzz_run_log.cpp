// A run's log.jsonl (dist/engine/run_plot.h, `gpumix plot`): read_run_log on arbitrary
// bytes, then the picture of what it read.
#include "dist/engine/run_plot.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = gpumix::fuzz::scratch_dir() + "/log.jsonl";
  gpumix::fuzz::write_bytes(path, data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::dist::RunLog log = gpumix::dist::read_run_log(path);
    (void)gpumix::dist::run_plot_svg(log, "fuzz");
  });
  return 0;
}
