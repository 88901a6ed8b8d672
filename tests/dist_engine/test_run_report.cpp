// What a run says (dist/engine/run_report.h), the parts that are arithmetic: the final
// validation line's "below" / "above" the unigram baseline, the model FLOPs of a step (llm.c's
// count), MFU against a known peak, the time left (EtaClock) on given clock readings, and
// how a duration is written; a GPU's datasheet entry found from its name.
#include <gtest/gtest.h>

#include <string>

#include "dist/engine/run_report.h"
#include "dist/plan/device_catalog.h"
#include "nn/gpt_config.h"

namespace gpumix::dist {
namespace {

TEST(RunReport, TheValidationLineSaysBelowOrAboveTheBaseline) {
  const std::string below = validation_vs_baseline(5.43, 12, 6.9114);
  EXPECT_NE(below.find("vs unigram baseline 6.9114 (1.48 below)"), std::string::npos) << below;
  const std::string above = validation_vs_baseline(8.27, 12, 6.9114);
  EXPECT_NE(above.find("(1.36 above)"), std::string::npos) << above;
  EXPECT_EQ(above.find("-"), std::string::npos) << above;
}

TEST(RunReport, ModelFlopsAreLlmcsCount) {
  GPTConfig c;
  c.L = 2;
  c.NH = 2;
  c.C = 32;
  c.V = 512;
  c.T = 16;
  // Per token: 6 x the matmul weights (12 C^2 per block, C V for the head) + 6 L T C for the
  // causal attention (6 L (T + 1) C with the diagonal).
  const double per_token = 6.0 * (12.0 * 32 * 32 * 2 + 32.0 * 512) + 6.0 * 2 * 17 * 32;
  EXPECT_DOUBLE_EQ(model_flops_per_step(c, 16, 4), per_token * 16 * 4);
  PeakFlops peak{1e9, "test"};
  EXPECT_DOUBLE_EQ(mfu(5e8, 0.25, peak), 2.0);
  EXPECT_EQ(mfu(5e8, 0.25, PeakFlops{}), -1);  // no peak: n/a
}

TEST(RunReport, TheEtaIsTheMeanStepSinceTheFirstTimesTheStepsLeft) {
  EtaClock eta;
  // The first step (a slow warm-up of 5 s) alone: its own time.
  EXPECT_DOUBLE_EQ(eta.seconds_left(1, 9, 5.0, 100.0), 45.0);
  // Then the time since it ended over the steps since: 2 s a step (a validation included).
  EXPECT_DOUBLE_EQ(eta.seconds_left(2, 8, 1.5, 102.0), 16.0);
  EXPECT_DOUBLE_EQ(eta.seconds_left(4, 6, 1.0, 106.0), 12.0);
  EXPECT_DOUBLE_EQ(eta.seconds_left(10, 0, 1.0, 118.0), 0.0);
  EXPECT_EQ(duration_text(42.4), "42s");
  EXPECT_EQ(duration_text(185), "3m05s");
  EXPECT_EQ(duration_text(3720), "1h02m");
  EXPECT_EQ(duration_text(-1), "0s");
}

TEST(RunReport, AGpusDatasheetIsFoundByAWordOfItsName) {
  ASSERT_NE(find_gpu_spec("NVIDIA H200"), nullptr);
  EXPECT_EQ(find_gpu_spec("NVIDIA H200")->name, "H200");
  EXPECT_EQ(find_gpu_spec("NVIDIA H200 (emulated mem=6GiB slow=3)")->name, "H200");
  EXPECT_EQ(find_gpu_spec("NVIDIA L4")->name, "L4");
  EXPECT_EQ(find_gpu_spec("NVIDIA L40S")->name, "L40S");  // the longest word, not L4
  EXPECT_EQ(find_gpu_spec("Some Accelerator 9000"), nullptr);
  EXPECT_EQ(find_gpu_spec("cpu"), nullptr);  // GPUs only
}

}  // namespace
}  // namespace gpumix::dist
