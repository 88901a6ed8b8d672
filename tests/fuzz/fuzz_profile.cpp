// Profile JSON (dist/plan/profile.h): profile_from_json on arbitrary bytes, then the lookups the
// planner makes on a loaded profile; a loaded profile must write back to JSON that loads.
#include <nlohmann/json.hpp>

#include "dist/plan/profile.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::dist::Profile p = gpumix::dist::profile_from_json(j);
    for (int r = 0; r < p.num_ranks(); ++r) {
      const gpumix::dist::DeviceProfile& d = p.rank_device(r);
      for (int m : {1, 2, 7, 64}) (void)d.at(m);
    }
    (void)p.num_nodes();
    (void)gpumix::dist::profile_from_json(gpumix::dist::profile_to_json(p));
  });
  return 0;
}
