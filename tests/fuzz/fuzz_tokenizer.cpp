// Tokenizer files (nn/data/bpe.h): the input is written to a file and loaded with
// Tokenizer::load; a tokenizer that loads encodes and decodes a short text.
#include <string>

#include "nn/data/bpe.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = gpumix::fuzz::scratch_dir() + "/tokenizer.bpe";
  gpumix::fuzz::write_bytes(path, data, size);
  gpumix::fuzz::expect_clean_rejection([&] {
    const gpumix::data::Tokenizer t = gpumix::data::Tokenizer::load(path);
    const std::string text = "Hello, world! <|endoftext|> 12 the  end\n";
    if (t.decode(t.encode(text)) != text) __builtin_trap();  // byte-level BPE round-trips
  });
  return 0;
}
