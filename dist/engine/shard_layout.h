// ShardLayout: which slice of each parameter unit every rank owns.
//
// The flat parameter vector is cut into units (embedding, blocks, head: GPTConfig's
// units). Rank i owns, in every unit, the slice [offset, offset + count) whose length is
// about share_i of the unit: boundaries are the cumulative shares rounded to `alignment`
// elements (so slices start on cache-line / 16-byte boundaries), the last boundary is the
// unit's end, and a zero share gives a zero-length slice. Padding for collectives that
// need equal counts (NCCL's padded all-gather) is kept apart: padded_count() is the
// largest slice, and a rank's logical slice is never widened.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpumix::dist {

struct Slice {
  int64_t offset = 0;  // into the unit (not the flat vector)
  int64_t count = 0;
};

class ShardLayout {
 public:
  // unit_sizes: elements of each unit in order; shares: one per rank, >= 0, summing to 1
  // (within 1e-6). Throws gpumix::Error naming the bad share or the sum.
  ShardLayout(const std::vector<int64_t>& unit_sizes, const std::vector<double>& shares,
              int64_t alignment = 16);

  int num_ranks() const { return (int)shares_.size(); }
  int num_units() const { return (int)unit_sizes_.size(); }
  int64_t unit_size(int unit) const { return unit_sizes_[unit]; }
  int64_t unit_offset(int unit) const { return unit_offsets_[unit]; }  // into the flat vector
  int64_t total() const { return unit_offsets_.back(); }

  const Slice& slice(int unit, int rank) const { return slices_[unit][rank]; }
  // Per-rank counts of one unit, in rank order (the counts of all-gather-v / reduce-scatter-v).
  std::vector<int64_t> counts(int unit) const;
  // Elements rank owns over all units, and where they start in the rank's own contiguous
  // shard buffer (its units' slices back to back).
  int64_t rank_total(int rank) const { return rank_totals_[rank]; }
  int64_t rank_unit_offset(int unit, int rank) const { return rank_unit_offsets_[unit][rank]; }
  // The largest slice of a unit: what a padded equal-count collective moves per rank.
  int64_t padded_count(int unit) const;

  // A fingerprint of the layout: ranks compare it before training to agree on the layout.
  uint64_t fingerprint() const;
  std::string describe() const;  // a table: per unit and rank, offset and count

 private:
  std::vector<int64_t> unit_sizes_, unit_offsets_;
  std::vector<double> shares_;
  std::vector<std::vector<Slice>> slices_;               // [unit][rank]
  std::vector<int64_t> rank_totals_;
  std::vector<std::vector<int64_t>> rank_unit_offsets_;  // [unit][rank]
};

}  // namespace gpumix::dist
