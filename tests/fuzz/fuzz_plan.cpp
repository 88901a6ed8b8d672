// Plan JSON (dist/plan/plan.h): plan_from_json on arbitrary bytes, then what the tools print of
// a loaded plan; a loaded plan must write back to JSON that loads.
#include <nlohmann/json.hpp>

#include "dist/plan/plan.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::dist::Plan p = gpumix::dist::plan_from_json(j);
    (void)p.fits();
    (void)p.oom_message();
    (void)p.work();
    (void)gpumix::dist::plan_from_json(gpumix::dist::plan_to_json(p));
  });
  return 0;
}
