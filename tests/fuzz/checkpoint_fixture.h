// The small checkpoint the two checkpoint targets start from: two arrays ("master", 16
// elements, and "adam_m", 8) with 16-byte hash blocks, so that slices span several blocks.
#pragma once

#include <string>
#include <vector>

#include "nn/checkpoint.h"

namespace gpumix::fuzz {

inline constexpr int64_t fixture_block_bytes = 16;

inline std::vector<float> fixture_values(int64_t n, float base) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + 0.25f * float(i);
  return v;
}

// Saves the fixture under out_dir (step 1) and returns the checkpoint folder.
inline std::string save_fixture(const std::string& out_dir) {
  static const std::vector<float> master = fixture_values(16, 1.0f), m = fixture_values(8, -2.0f);
  CheckpointMeta meta;
  meta.model = {{"L", 1}, {"NH", 1}, {"C", 4}, {"V", 8}, {"T", 4}};
  meta.data_position = {{"next_batch", 1}};
  meta.rng = {{"seed", 1337}};
  meta.tokenizer_hash = 0x0123456789abcdefULL;
  return save_checkpoint(out_dir, 1, meta,
                         {{"master", master.data(), (int64_t)master.size()},
                          {"adam_m", m.data(), (int64_t)m.size()}},
                         fixture_block_bytes);
}

// What a resume does with a checkpoint that opened: every lookup, every array read in
// slices (block-verified and not) and whole, then the full verify().
inline void exercise_reader(const CheckpointReader& r) {
  (void)r.step();
  (void)r.tokenizer_hash();
  (void)r.model();
  (void)r.data_position();
  (void)r.rng();
  (void)r.plan();
  (void)r.extra();
  for (const std::string& name : r.array_names()) {
    const int64_t n = r.array_count(name);
    if (n > (1 << 20)) continue;  // the file was checked to hold n elements; keep memory small
    std::vector<float> out(static_cast<size_t>(n) + 1);
    r.read_slice(name, 0, out.data(), n);
    if (n > 2) r.read_slice(name, 1, out.data(), n - 2);
    r.read_slice(name, n, out.data(), 0);
  }
  CheckpointReader unverified = r;
  unverified.set_verify_blocks(false);
  for (const std::string& name : unverified.array_names()) {
    const int64_t n = unverified.array_count(name);
    if (n > (1 << 20) || n < 1) continue;
    std::vector<float> out(static_cast<size_t>(n));
    unverified.read_slice(name, n - 1, out.data(), 1);
  }
  r.verify();
}

}  // namespace gpumix::fuzz
