// llm.c's token shard format (karpathy/llm.c, dev/data/data_common.py), shared by the
// shard reader (nn/data/shards.h) and the shard writer of `gpumix tokenizer encode`.
//
// A shard is a header of 256 little-endian int32, then the tokens:
//   header[0] magic, header[1] version, header[2] the token count after the header.
//   GPT-2 vocabularies (< 65536 ids): magic 20240520, version 1, uint16 tokens.
//   Larger ones (Llama 3's):          magic 20240801, version 7, uint32 tokens.
// A shard holds at most 2^31 - 1 tokens (header[2] is an int32).
#pragma once

#include <cstdint>

namespace gpumix::data::llmc {

inline constexpr int header_ints = 256;
inline constexpr int64_t header_bytes = header_ints * 4;
inline constexpr int32_t magic_u16 = 20240520;
inline constexpr int32_t version_u16 = 1;
inline constexpr int32_t magic_u32 = 20240801;
inline constexpr int32_t version_u32 = 7;
inline constexpr int64_t max_tokens = 2147483647;

// The token width in bytes for a (magic, version) pair: 2, 4, or 0 when it is neither.
inline int token_width(int32_t magic, int32_t version) {
  if (magic == magic_u16 && version == version_u16) return 2;
  if (magic == magic_u32 && version == version_u32) return 4;
  return 0;
}

}  // namespace gpumix::data::llmc
