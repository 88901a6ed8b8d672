// Checkpoint checks for the fault tests (nn/checkpoint.h), used by test_faults.py:
//   ckpt_tool latest OUT        prints the folder find_latest picks and verify()s it whole
//   ckpt_tool same DIR1 DIR2    exits 0 when both hold bitwise-equal arrays
// Exit status 0: good; 1: the check failed (with the reason on stderr).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nn/checkpoint.h"

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "latest") == 0) {
      std::string note;
      const auto dir = gpumix::find_latest(argv[2], &note);
      if (!dir) {
        std::fprintf(stderr, "no complete checkpoint in %s\n", argv[2]);
        return 1;
      }
      const gpumix::CheckpointReader r(*dir);
      r.verify();
      std::printf("%s\n", dir->c_str());
      return 0;
    }
    if (argc == 4 && std::strcmp(argv[1], "same") == 0) {
      const gpumix::CheckpointReader a(argv[2]), b(argv[3]);
      if (a.array_names() != b.array_names()) {
        std::fprintf(stderr, "different arrays\n");
        return 1;
      }
      for (const std::string& name : a.array_names()) {
        const int64_t n = a.array_count(name);
        if (b.array_count(name) != n) {
          std::fprintf(stderr, "%s: %lld vs %lld elements\n", name.c_str(), (long long)n,
                       (long long)b.array_count(name));
          return 1;
        }
        std::vector<float> x(n), y(n);
        a.read_slice(name, 0, x.data(), n);
        b.read_slice(name, 0, y.data(), n);
        if (std::memcmp(x.data(), y.data(), n * sizeof(float)) != 0) {
          std::fprintf(stderr, "%s differs\n", name.c_str());
          return 1;
        }
      }
      return 0;
    }
    std::fprintf(stderr, "usage: ckpt_tool latest OUT | ckpt_tool same DIR1 DIR2\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
