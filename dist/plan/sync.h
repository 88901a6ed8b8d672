// How the ranks synchronise: every step (the default), or local updates (`--sync local:H`,
// DiLoCo-style: groups of ranks that train apart and meet every H inner steps through an
// outer optimizer; dist/engine/outer_step.h runs it, dist/plan/simulator.h predicts it).
// The flags' one parser, shared by `gpumix train` and `gpumix simulate`.
#pragma once

#include <string>
#include <vector>

namespace gpumix::dist {

struct LocalSync {
  bool local = false;     // false: every-step synchronisation (the default, --sync every-step)
  int every = 0;          // H: inner steps between outer steps (--sync local:H)
  int groups = 0;         // --groups N: N groups of consecutive ranks; 0: one group per node
  float outer_lr = 0.7f;  // DiLoCo's published outer optimizer: Nesterov, lr 0.7, momentum 0.9
  float outer_momentum = 0.9f;
  bool nesterov = true;
};

// Parses --sync: "every-step" or "local:H". Throws InputError naming the value and the forms.
LocalSync parse_sync(const std::string& value);

// Flags that only mean something with --sync local:H (`given`: those the user gave, e.g.
// "--groups"): an InputError naming the first when `sync` is every-step.
void check_local_only_flags(const LocalSync& sync, const std::vector<std::string>& given);

// The rules of the groups' shape (nothing when !sync.local): H >= 1, more than one rank,
// --groups dividing the ranks. `what` names the ranks' owner in the message ("this run",
// "this cluster"), `more` how to get more of them. Throws InputError naming the numbers and
// the fix.
void check_sync_groups(const LocalSync& sync, int ranks, const std::string& what, const std::string& more);

// The group of each rank: --groups N splits the ranks into N blocks of consecutive ranks,
// otherwise each node (node_of_rank) is a group, numbered as the nodes are.
std::vector<int> sync_groups(const LocalSync& sync, const std::vector<int>& node_of_rank);

}  // namespace gpumix::dist
