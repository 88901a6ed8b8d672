// Text corpora (nn/data/corpus.h): the input is written as a file and read as a corpus, by
// name as JSONL and gzip-compressed JSONL, and with every --format; the gzip reader gets it
// raw. Each must return documents or reject with its documented error.
#include <string>

#include "nn/data/corpus.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpumix::data;
  static const std::string dir = gpumix::fuzz::scratch_dir();
  for (const char* name : {"/in.jsonl", "/in.jsonl.gz", "/in"}) {
    const std::string path = dir + name;
    gpumix::fuzz::write_bytes(path, data, size);
    gpumix::fuzz::expect_clean_rejection([&] { (void)read_documents(path); });
  }
  const std::string path = dir + "/in";
  for (CorpusFormat format : {CorpusFormat::text, CorpusFormat::fortunes, CorpusFormat::jsonl})
    gpumix::fuzz::expect_clean_rejection([&] { (void)read_documents(path, format, nullptr, "body"); });
  gpumix::fuzz::expect_clean_rejection([&] { (void)read_gzip_file(path); });
  return 0;
}
