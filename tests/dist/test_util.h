// Helpers for the dist planner tests: small synthetic profiles and an exhaustive search
// over b_i, m_i, offload, participation and a grid of r_i, the planner's oracle.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dist/plan/cost_model.h"
#include "dist/plan/profile.h"

namespace gpumix::dist::testing {

// A tiny GPT: P ≈ 120k parameters, so the state is about 1.9 MB.
GPTConfig tiny_model(int L = 2);

struct FakeDevice {
  std::string name;
  double memory_bytes;
  double sec_per_sample;    // forward of one block per sample at large m
  double fixed_s = 1e-4;    // per-micro-batch overhead of a forward
  double opt_s_per_param = 1e-9;
  double host_bandwidth = 0;  // 0: no offload
};

// Samples at m = 1, 2, 4, 8; bwd = 2 × fwd; activation memory from the analytic formula.
DeviceProfile fake_device(const GPTConfig& model, int seq_len, const FakeDevice& f);

// ranks[i] is an index into devices; all on node 0 unless nodes is given.
Profile fake_profile(const GPTConfig& model, int seq_len, const std::vector<FakeDevice>& devices,
                     const std::vector<int>& ranks, double bandwidth = 1e9, double latency = 1e-5,
                     double uneven = 1.2, const std::vector<int>& nodes = {});

Profile random_profile(std::mt19937& rng, int max_ranks);

struct Exhaustive {
  bool found = false;
  double step = 0;
  std::vector<RankWork> best;
  int64_t configs = 0;
};
// Every b (Σ = B), every m ≤ b, offload where possible, each b = 0 rank in or out, r on a
// grid of 1/grid (optimal on the grid by the greedy exchange argument) plus exactly even.
Exhaustive exhaustive_search(const Profile& p, int64_t B, int grid = 48, bool allow_offload = true);

}  // namespace gpumix::dist::testing
