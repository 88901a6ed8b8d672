// A run's log.jsonl (draw/run_plot.h, `gpumix plot`): read_run_log on arbitrary
// bytes, then the picture of what it read.
#include "draw/run_plot.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = gpumix::fuzz::scratch_dir() + "/log.jsonl";
  gpumix::fuzz::write_bytes(path, data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::draw::RunLog log = gpumix::draw::read_run_log(path);
    (void)gpumix::draw::run_plot_svg(log, "fuzz");
  });
  return 0;
}
