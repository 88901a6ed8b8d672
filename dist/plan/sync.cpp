#include "dist/plan/sync.h"

#include <exception>

#include "core/error.h"

namespace gpumix::dist {

LocalSync parse_sync(const std::string& value) {
  LocalSync s;
  if (value == "every-step") return s;
  const std::string prefix = "local:";
  GPUMIX_CHECK_INPUT(value.rfind(prefix, 0) == 0, "--sync ", value,
                     " is not a synchronisation; give every-step (the default) or local:H (outer step every H "
                     "inner steps, e.g. local:50)");
  const std::string h = value.substr(prefix.size());
  size_t used = 0;
  int every = 0;
  try {
    every = std::stoi(h, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GPUMIX_CHECK_INPUT(!h.empty() && used == h.size(), "--sync ", value, ": H must be a whole number, e.g. local:50");
  s.local = true;
  s.every = every;
  return s;
}

void check_local_only_flags(const LocalSync& sync, const std::vector<std::string>& given) {
  for (const std::string& flag : given)
    GPUMIX_CHECK_INPUT(sync.local, flag, " sets up local updates: give --sync local:H with it, or drop it");
}

void check_sync_groups(const LocalSync& s, int ranks, const std::string& what, const std::string& more) {
  if (!s.local) return;
  GPUMIX_CHECK_INPUT(s.every >= 1, "--sync local:", s.every, ": H (inner steps between outer steps) must be at "
                     "least 1; e.g. --sync local:50, or --sync every-step");
  GPUMIX_CHECK_INPUT(ranks > 1, "--sync local:", s.every, " needs several ranks to form groups, ", what, " has ",
                     ranks, "; ", more, " or drop --sync");
  GPUMIX_CHECK_INPUT(s.groups >= 0, "--groups must be at least 1, got ", s.groups,
                     "; leave it out for one group per node");
  GPUMIX_CHECK_INPUT(s.groups == 0 || ranks % s.groups == 0, "--groups ", s.groups, " does not divide the ", ranks,
                     " ranks into equal groups; give a divisor of ", ranks,
                     " or leave --groups out (one group per node)");
}

std::vector<int> sync_groups(const LocalSync& sync, const std::vector<int>& node_of_rank) {
  const int ranks = (int)node_of_rank.size();
  if (sync.groups <= 0) return node_of_rank;
  std::vector<int> group(ranks);
  const int per = ranks / sync.groups;
  for (int r = 0; r < ranks; ++r) group[r] = r / per;
  return group;
}

}  // namespace gpumix::dist
