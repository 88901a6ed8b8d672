#include "dist/engine/shard_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"

namespace gpumix::dist {

ShardLayout::ShardLayout(const std::vector<int64_t>& unit_sizes, const std::vector<double>& shares,
                         int64_t alignment)
    : unit_sizes_(unit_sizes), shares_(shares) {
  GPUMIX_CHECK(!shares.empty(), "shard layout: no ranks");
  GPUMIX_CHECK(alignment >= 1, "shard layout: alignment must be >= 1, got ", alignment);
  double total_share = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    GPUMIX_CHECK(shares[r] >= 0 && shares[r] <= 1 && std::isfinite(shares[r]), "shard layout: rank ",
                 r, "'s share ", shares[r], " is outside [0, 1]");
    total_share += shares[r];
  }
  GPUMIX_CHECK(std::fabs(total_share - 1.0) <= 1e-6, "shard layout: shares sum to ", total_share,
               ", not 1; every parameter must have exactly one owner");
  const int R = (int)shares.size();
  unit_offsets_.push_back(0);
  for (int64_t size : unit_sizes) {
    GPUMIX_CHECK(size >= 0, "shard layout: negative unit size ", size);
    unit_offsets_.push_back(unit_offsets_.back() + size);
  }
  // The last rank with a positive share ends every unit, so rounding never leaves a tail.
  int last = R - 1;
  while (last > 0 && shares[last] == 0) --last;
  rank_totals_.assign(R, 0);
  for (int64_t size : unit_sizes) {
    std::vector<Slice> row(R);
    std::vector<int64_t> offsets(R);
    double cumulative = 0;
    int64_t begin = 0;
    for (int r = 0; r < R; ++r) {
      cumulative += shares[r];
      int64_t end = r >= last ? size
                              : std::min(size, (int64_t)std::llround(cumulative * size / alignment) * alignment);
      if (shares[r] == 0) end = begin;
      end = std::max(end, begin);
      row[r] = {begin, end - begin};
      offsets[r] = rank_totals_[r];
      rank_totals_[r] += end - begin;
      begin = end;
    }
    slices_.push_back(row);
    rank_unit_offsets_.push_back(offsets);
  }
}

std::vector<int64_t> ShardLayout::counts(int unit) const {
  std::vector<int64_t> c;
  for (const Slice& s : slices_[unit]) c.push_back(s.count);
  return c;
}

int64_t ShardLayout::padded_count(int unit) const {
  int64_t m = 0;
  for (const Slice& s : slices_[unit]) m = std::max(m, s.count);
  return m;
}

uint64_t ShardLayout::fingerprint() const {
  uint64_t h = mix64((uint64_t)num_ranks());
  for (const auto& row : slices_)
    for (const Slice& s : row) h = mix64(h ^ mix64((uint64_t)s.offset * 1315423911u + (uint64_t)s.count));
  return h;
}

std::string ShardLayout::describe() const {
  std::string out = "unit  size";
  for (int r = 0; r < num_ranks(); ++r) out += str("  rank", r, " [offset+count]");
  out += "\n";
  for (int u = 0; u < num_units(); ++u) {
    out += str(u, "  ", unit_sizes_[u]);
    for (const Slice& s : slices_[u]) out += str("  [", s.offset, "+", s.count, "]");
    out += "\n";
  }
  return out;
}

}  // namespace gpumix::dist
