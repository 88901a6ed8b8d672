// llm.c's multiple-choice eval files (nn/eval.h) as its write_evalfile writes them, for the
// tests that need one (tests/nn/test_choices.cpp, tests/tools): a header of 256 int32, then
// per example a uint16 stream. Self-contained so that a test need not link nn/eval.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace gpumix::test {

struct Choice {
  int64_t index = 0;
  int label = 0;
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> completions;
};

inline void put_u16(std::string& out, uint32_t v) {
  out += (char)(v & 0xff);
  out += (char)((v >> 8) & 0xff);
}
inline void put_i32(std::string& out, int32_t v) {
  for (int b = 0; b < 4; ++b) out += (char)(((uint32_t)v >> (8 * b)) & 0xff);
}

// The file's bytes; the header's magic, version and count may be given wrong on purpose
// (count -1: the examples').
inline std::string choices_file_bytes(const std::vector<Choice>& examples, int32_t magic = 20240522,
                                      int32_t version = 1, int32_t count = -1) {
  std::string body;
  int32_t longest = 0;
  for (const Choice& e : examples) {
    std::string ex;
    put_u16(ex, 65535);
    put_u16(ex, 0);  // its size, filled in below
    put_u16(ex, (uint32_t)e.index);
    put_u16(ex, (uint32_t)e.label);
    put_u16(ex, (uint32_t)e.completions.size());
    put_u16(ex, (uint32_t)e.context.size());
    for (int32_t t : e.context) put_u16(ex, (uint32_t)t);
    for (const std::vector<int32_t>& c : e.completions) {
      put_u16(ex, (uint32_t)c.size());
      for (int32_t t : c) put_u16(ex, (uint32_t)t);
    }
    ex[2] = (char)(ex.size() & 0xff);
    ex[3] = (char)((ex.size() >> 8) & 0xff);
    longest = std::max<int32_t>(longest, (int32_t)ex.size());
    body += ex;
  }
  std::string out;
  put_i32(out, magic);
  put_i32(out, version);
  put_i32(out, count >= 0 ? count : (int32_t)examples.size());
  put_i32(out, longest);
  out.append(252 * 4, '\0');
  return out + body;
}

}  // namespace gpumix::test
