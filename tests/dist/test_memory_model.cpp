// The memory model, term by term (docs/method.md §3).
#include <gtest/gtest.h>

#include <algorithm>

#include "dist/plan/memory_model.h"
#include "nn/gpt_config.h"
#include "tests/dist/test_util.h"

namespace gpumix::dist {
namespace {

TEST(MemoryModel, TermsAsMethodSection3) {
  const GPTConfig g = gpt_preset("gpt2");
  const int T = 512, b = 12, m = 4, d = 2;
  const MemoryModel mm(g, T, DType::bf16);
  const double act = 123456, head = 7890, fixed = 1 << 20;
  const MemoryTerms t = mm.terms_from(act, head, fixed, b, m, 0.25, false);
  const double P = (double)g.total_params();
  const double embed = (double)g.embed_params(), block = (double)g.block_params();
  EXPECT_DOUBLE_EQ(t.state, 0.25 * P * 16);  // fp32 in bf16 too
  // The tied embedding and its gradient, the running and the prefetched block, the
  // running block's gradient.
  EXPECT_DOUBLE_EQ(t.gathered, embed * (d + 4) + block * (2 * d + 4));
  EXPECT_DOUBLE_EQ(t.act_block, act);
  EXPECT_DOUBLE_EQ(t.act_saved, (double)g.L * b * T * g.C * d);
  EXPECT_DOUBLE_EQ(t.act_carry, (double)b * T * g.C * d);
  EXPECT_DOUBLE_EQ(t.work_head, head);
  EXPECT_DOUBLE_EQ(t.work_fixed, fixed);
  // The block's and the head's transient peaks never coexist: the larger one counts, the
  // head's without the running block's buffers (the head runs while no block is gathered).
  EXPECT_DOUBLE_EQ(t.block_buffers, block * (d + 4));
  const double before = t.state + t.gathered + std::max(act, head - t.block_buffers) + t.act_saved + t.act_carry + t.work_fixed;
  EXPECT_DOUBLE_EQ(t.work_margin, 0.05 * before);
  EXPECT_DOUBLE_EQ(t.total(), 1.05 * before);
}

TEST(MemoryModel, OffloadKeepsOnlyStagingOnDevice) {
  const GPTConfig g = gpt_preset("gpt2");
  const MemoryModel mm(g, 256, DType::bf16);
  const MemoryTerms t = mm.terms_from(1, 1, 0, 40, 4, 0, true);
  EXPECT_DOUBLE_EQ(t.act_saved, 2.0 * 4 * 256 * g.C * 2);  // two micro-batches of inputs
  const MemoryTerms small = mm.terms_from(1, 1, 0, 3, 4, 0, true);
  EXPECT_DOUBLE_EQ(small.act_saved, 3.0 * 256 * g.C * 2);  // never more than b samples
}

TEST(MemoryModel, CpuFp32AndParameters) {
  const GPTConfig g = gpt_preset("gpt-nano");
  MemoryParams p;
  p.moment_bytes = 4;  // e.g. a lighter optimizer
  p.fragmentation = 0;
  const MemoryModel mm(g, 64, DType::f32, p);
  const MemoryTerms t = mm.terms_from(0, 0, 0, 2, 1, 1.0, false);
  EXPECT_DOUBLE_EQ(t.state, (double)g.total_params() * 12);
  EXPECT_DOUBLE_EQ(t.act_saved, (double)g.L * 2 * 64 * g.C * 4);
  EXPECT_DOUBLE_EQ(t.work_margin, 0);
}

TEST(MemoryModel, MaxShareFillsCapacityExactly) {
  const GPTConfig g = gpt_preset("gpt2");
  const MemoryModel mm(g, 512, DType::bf16);
  const MemoryTerms w = mm.terms_from(1e8, 1e7, 1e9, 8, 2, 0, false);
  const double cap = 24e9;
  const double r = mm.max_share(w, cap);
  const MemoryTerms full = mm.terms_from(1e8, 1e7, 1e9, 8, 2, r, false);
  EXPECT_NEAR(full.total(), cap, 1e-3);
}

TEST(MemoryModel, LeftOutRankUsesNothing) {
  const Profile p = testing::fake_profile(testing::tiny_model(2), 32, {{"d", 1e6, 1e-4}}, {0});
  const MemoryModel mm(p.model, 32, p.dtype);
  EXPECT_DOUBLE_EQ(mm.terms(p.devices[0], 0, 0, 0, false).total(), 0);
  EXPECT_GT(mm.terms(p.devices[0], 0, 0, 0.1, false).gathered, 0);  // a state holder gathers
}

TEST(MemoryModel, AnalyticFormulas) {
  const GPTConfig g = gpt_preset("gpt-1.3b");
  EXPECT_DOUBLE_EQ(MemoryModel::analytic_block_act_bytes(g, 512, 2, 2),
                   1.5 * 2 * 512 * (34.0 * 2048 + 5.0 * 32 * 512));
  EXPECT_DOUBLE_EQ(MemoryModel::analytic_head_bytes(g, 512, 1, 2), 512 * (50304.0 * 2 + 8));  // Vp logits
}

}  // namespace
}  // namespace gpumix::dist
