// The planner of docs/method.md §4 and the baselines it is compared with, side by side.
//
// gpumix: chooses per rank b_i, m_i, r_i, offload, and which ranks to leave out, jointly,
// minimising T_step of dist/plan/cost_model.h subject to the memory of dist/plan/memory_model.h.
// A returned plan always fits; when none does, InfeasiblePlan says what memory is missing.
//
// How: for a participating set S and a shares mode (even: r_i = 1/|S|, cheaper
// collectives; uneven), T_step = L·τ + η + θ with τ the block time, η the head time, θ
// the optimizer time. For targets (τ, η) each rank's options (b, m, offload) that meet
// them give its largest free memory R_i(b) (a share); an allocation of the B samples
// maximising Σ min(R_i(b_i), θ / (P · opt_i)) decides whether θ is reachable. τ is found by
// bisection (the smallest feasible), then larger τ and η are tried only while
// L·τ + η + (a lower bound of θ) can still beat the best plan found.
// Small instances (≤ exact_max_ranks ranks, B ≤ exact_max_batch) are solved exactly: every
// m, every candidate τ and η, a dynamic programme for the allocation, bisection on θ, all
// subsets S. Large ones: micro-batch sizes on a 1-2-4-8 grid (plus the profiled ones),
// one greedy allocation per target (ranks of one device type move together), θ by
// water-filling, S = all ranks minus the slowest device types.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/plan/cost_model.h"
#include "dist/plan/plan.h"
#include "dist/plan/profile.h"

namespace gpumix::dist {

struct PlannerOptions {
  MemoryParams memory;
  bool allow_offload = true;
  bool allow_leave_out = true;
  int exact_max_ranks = 6;
  int64_t exact_max_batch = 64;
  // Cephalo's own view of communication when it plans: 0 = free (its default); otherwise
  // this times the even collectives, and +25 % when uneven, as the original assumes.
  double cephalo_comm_scale = 0;
  // The gpumix planner's sharding (dist/plan/cost_model.h): -1 = it chooses full or hybrid,
  // and the group size, by the predicted step; 0 = full only; g > 0 = hybrid in groups of g.
  int group_size = -1;
};

// No plan fits. missing_bytes: how much memory the cluster lacks in total (0 when the
// total would do but no rank can hold its part, see what()).
struct InfeasiblePlan : std::runtime_error {
  InfeasiblePlan(const std::string& what, double missing) : std::runtime_error(what), missing_bytes(missing) {}
  double missing_bytes;
};

// The most sequences per step the planners take (their searches grow with the batch).
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 16;

// Full sharding as above, and (unless opts.group_size says otherwise) hybrid sharding for
// every group size of hybrid_group_sizes(): the plan with the shortest predicted step wins
// (full on a tie). A hybrid plan keeps every rank, gives each position of a group the same
// share in every group (even shares, or shares in proportion to the positions' free memory
// when some cannot hold an even one), and splits the batch by bisection on the block time
// (ranks of one device type and share move together), micro-batches from a 1-2-4-8 grid
// and the profiled sizes, no offload.
Plan plan_gpumix(const Profile& profile, int64_t global_batch, const PlannerOptions& opts = {});

// Group sizes g (1 <= g < N, g divides N) whose groups of consecutive ranks each lie in
// one node or are whole nodes: what the planner tries for hybrid sharding. None on a
// single node (there the replicas' all-reduce would share the one link with everything).
std::vector<int> hybrid_group_sizes(const Profile& profile);

// The hybrid plan in groups of g (the planner's, as above); throws InfeasiblePlan when no
// hybrid plan in groups of g fits.
Plan plan_hybrid(const Profile& profile, int64_t global_batch, int group_size, const PlannerOptions& opts = {});

// Baselines: they return their plan even when it does not fit (Plan::fits() false,
// Plan::oom_message() says where), evaluated with the same cost and memory model.
Plan plan_even(const Profile& profile, int64_t global_batch, const PlannerOptions& opts = {});
Plan plan_proportional(const Profile& profile, int64_t global_batch, const PlannerOptions& opts = {});
Plan plan_cephalo(const Profile& profile, int64_t global_batch, const PlannerOptions& opts = {});

std::vector<std::string> planner_names();  // gpumix, even, proportional, cephalo
Plan run_planner(const std::string& name, const Profile& profile, int64_t global_batch,
                 const PlannerOptions& opts = {});

}  // namespace gpumix::dist
