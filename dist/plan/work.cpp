#include "dist/plan/work.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace gpumix::dist {

std::string Sharding::describe() const {
  return hybrid() ? "hybrid, groups of " + std::to_string(group_size) : std::string("full");
}

std::string check_sharding(const Sharding& s, int ranks, const std::vector<double>& shares) {
  if (!s.hybrid()) return s.group_size == 0 ? "" : "the shard group size must be >= 0, got " + std::to_string(s.group_size);
  const int g = s.group_size;
  if (g >= ranks || ranks % g != 0)
    return "hybrid sharding needs a group size that divides the " + std::to_string(ranks) +
           " ranks into at least 2 groups, got " + std::to_string(g) + "; use one of the divisors of " +
           std::to_string(ranks) + " below it, or full sharding";
  if (shares.empty()) return "";
  if ((int)shares.size() != ranks)
    return "hybrid sharding: " + std::to_string(shares.size()) + " shares for " + std::to_string(ranks) + " ranks";
  for (int i = 0; i < ranks; i++)
    if (std::fabs(shares[i] - shares[i % g]) > 1e-9) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "hybrid sharding in groups of %d: rank %d's share %.9g differs from rank %d's %.9g, but every "
                    "group holds the same positions; give position k the same share in every group",
                    g, i, shares[i], i % g, shares[i % g]);
      return buf;
    }
  double sum = 0;
  for (int k = 0; k < g; k++) sum += shares[k];
  if (std::fabs(sum - 1.0) > 1e-6) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "hybrid sharding in groups of %d: the shares of a group (ranks 0..%d) sum to %.9g, not 1", g, g - 1, sum);
    return buf;
  }
  return "";
}

void validate_work(const Work& work, int64_t global_batch, int ranks) {
  GPUMIX_CHECK_INPUT((int)work.ranks.size() == ranks, "the plan has ", work.ranks.size(), " ranks but ", ranks,
                     " are running; give one batch, micro-batch and share per rank");
  int64_t batch = 0;
  double share = 0;
  std::vector<double> shares;
  for (size_t r = 0; r < work.ranks.size(); ++r) {
    const RankWork& w = work.ranks[r];
    shares.push_back(w.share);
    GPUMIX_CHECK_INPUT(w.batch >= 0, "rank ", r, ": batch ", w.batch, " is negative");
    GPUMIX_CHECK_INPUT(w.batch == 0 || w.micro_batch >= 1, "rank ", r, ": micro-batch ", w.micro_batch,
                       " must be at least 1 for its batch of ", w.batch);
    GPUMIX_CHECK_INPUT(w.share >= 0 && w.share <= 1, "rank ", r, ": share ", w.share, " is outside [0, 1]");
    batch += w.batch;
    share += w.share;
  }
  GPUMIX_CHECK_INPUT(batch == global_batch, "the plan's batches sum to ", batch, " but the global batch is ",
                     global_batch, "; make them add up (or change --batch)");
  if (work.sharding.hybrid()) {
    const std::string bad = check_sharding(work.sharding, ranks, shares);
    GPUMIX_CHECK_INPUT(bad.empty(), bad);
    return;
  }
  GPUMIX_CHECK_INPUT(std::fabs(share - 1.0) <= 1e-6, "the plan's shares sum to ", share,
                     ", not 1; every parameter needs exactly one owner");
}

Work even_work(int64_t global_batch, int ranks) {
  Work work;
  work.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    RankWork& w = work.ranks[r];
    w.batch = global_batch / ranks + (r < global_batch % ranks ? 1 : 0);
    w.micro_batch = std::max<int64_t>(1, w.batch);
    w.share = 1.0 / ranks;
  }
  return work;
}

}  // namespace gpumix::dist
