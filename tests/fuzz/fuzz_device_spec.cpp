// The --devices entries (dist/plan/cluster.h parse_device_spec), e.g. "cpu:mem=2GiB:slow=3":
// arbitrary strings; an accepted spec's label() must parse again to the same device.
#include <string>

#include "dist/plan/cluster.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::dist::ClusterDevice d = gpumix::dist::parse_device_spec(spec, "--devices[0]");
    const gpumix::dist::ClusterDevice again = gpumix::dist::parse_device_spec(d.label(), "label");
    if (again.type != d.type || again.kind != d.kind) __builtin_trap();
  });
  return 0;
}
