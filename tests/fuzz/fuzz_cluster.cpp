// Cluster JSON (dist/plan/cluster.h): cluster_from_json on arbitrary bytes; a cluster that
// loads must write back to JSON that loads again to the same ranks.
#include <nlohmann/json.hpp>

#include "dist/plan/cluster.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::dist::Cluster c = gpumix::dist::cluster_from_json(j);
    const int n = c.num_ranks();
    if (n <= 4096) (void)c.ranks();
    const gpumix::dist::Cluster again = gpumix::dist::cluster_from_json(gpumix::dist::cluster_to_json(c));
    if (again.num_ranks() != n) __builtin_trap();  // the written file must read back the same
  });
  return 0;
}
