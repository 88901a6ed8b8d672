// What the C API tests share: the tokens (the tiny corpus's bytes, vocabulary 256) and a
// small config (gpt-nano at T = 16, batch 4).
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "tools/capi/gpumix.h"

namespace gpumix::capi::test {

inline std::vector<int32_t> corpus_bytes() {
  std::ifstream in(std::string(GPUMIX_TESTS_DATA_DIR) + "/tiny_corpus.txt", std::ios::binary);
  std::vector<int32_t> ids;
  for (char c; in.get(c);) ids.push_back((unsigned char)c);
  return ids;
}

// A config for out_dir `out`, which it keeps alive (gpumix_config points at it).
struct TinyConfig {
  std::string out;
  gpumix_config c;
  explicit TinyConfig(const std::string& out_dir) : out(out_dir) {
    gpumix_config_default(&c);
    c.vocab = 256;
    c.seq = 16;
    c.global_batch = 4;
    c.total_steps = 4;
    c.lr = 3e-3f;
    c.threads = 1;
    c.out_dir = out.c_str();
    c.dtype = "fp32";  // the comparisons' allowances are fp32's (tests/dist_engine)
  }
  TinyConfig(const TinyConfig&) = delete;
  TinyConfig& operator=(const TinyConfig&) = delete;
};

}  // namespace gpumix::capi::test
