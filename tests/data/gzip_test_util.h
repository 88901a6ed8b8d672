// Writing gzip data in tests (as `gzip` writes it), for the readers of compressed corpora.
#pragma once

#include <zlib.h>

#include <stdexcept>
#include <string>

namespace gpumix::data::test {

// `text` as one gzip member; members concatenated read as their texts concatenated.
inline std::string gzip_compress(const std::string& text) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = (uInt)text.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = (uInt)out.size();
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

}  // namespace gpumix::data::test
