// GPT-2's tokenizer files, vocab.json and merges.txt (see Tokenizer::load_gpt2 in bpe.h).
//
// GPT-2 writes each byte of a token as one printable character (its bytes_to_unicode): the
// printable Latin-1 bytes '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves, and the other
// 68 bytes (space, control bytes, ...) become U+0100, U+0101, ... in byte order, so ' ' is
// 'Ġ' (U+0120) and '\n' is 'Ċ' (U+010A).
#include <array>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "nn/data/bpe.h"
#include "nn/data/file_util.h"

namespace gpumix::data {

namespace {

using json = nlohmann::json;

// byte -> its character's code point, as GPT-2's bytes_to_unicode().
const std::array<uint32_t, 256>& byte_to_char() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {  // GPT-2's characters are all below U+0800
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string bytes_to_token(const std::string& bytes) {
  std::string out;
  for (const unsigned char b : bytes) append_utf8(out, byte_to_char()[b]);
  return out;
}

// The bytes a token string stands for; false when a character is not one of GPT-2's 256.
// `token` is valid UTF-8 (nlohmann::json checks its strings; merges.txt is checked here).
bool token_to_bytes(std::string_view token, std::string& bytes) {
  static const std::unordered_map<uint32_t, unsigned char> inverse = [] {
    std::unordered_map<uint32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[byte_to_char()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const unsigned char c = token[i];
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size() && (token[i + 1] & 0xC0) == 0x80) {
      cp = ((c & 0x1Fu) << 6) | (token[i + 1] & 0x3Fu);
      i += 2;
    } else {
      return false;  // longer sequences (or invalid bytes): never a GPT-2 byte character
    }
    const auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    bytes += static_cast<char>(it->second);
  }
  return !bytes.empty();
}

}  // namespace

void Tokenizer::save_gpt2(const std::string& vocab_path, const std::string& merges_path) const {
  // vocab.json in id order, as GPT-2's; the special token is not a byte string.
  std::vector<std::string> tokens(vocab_size());
  std::unordered_map<std::string, int32_t> first_id;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const int32_t c = canonical_of(id);
    tokens[id] = c == 256 + num_merges() ? std::string(eot_text) : bytes_to_token(vocab_[c]);
    const auto [it, fresh] = first_id.emplace(tokens[id], id);
    if (!fresh) {
      throw std::invalid_argument("tokens " + std::to_string(it->second) + " and " + std::to_string(id) +
                                  " hold the same bytes ('" + tokens[id] + "'), which vocab.json cannot tell apart");
    }
  }
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int32_t id = 0; id < vocab_size(); ++id) vocab[tokens[id]] = id;
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) merges += bytes_to_token(vocab_[a]) + " " + bytes_to_token(vocab_[b]) + "\n";
  write_file_atomic(vocab_path, vocab.dump());
  write_file_atomic(merges_path, merges);
}

Tokenizer Tokenizer::load_gpt2(const std::string& vocab_path, const std::string& merges_path) {
  const std::string hint = " (GPUMix reads GPT-2's byte-level BPE: write the tokenizer with the GPT-2 "
                           "tokenizer's save_pretrained, or `gpumix export`)";
  // merges.txt first: it defines the canonical ids (byte b is b, merge r makes 256 + r).
  std::unordered_map<std::string, int32_t> canonical;  // bytes -> canonical id
  std::vector<std::string> bytes_of;                   // canonical id -> bytes
  for (int b = 0; b < 256; ++b) {
    bytes_of.emplace_back(1, static_cast<char>(b));
    canonical[bytes_of.back()] = b;
  }
  std::vector<int> made_on;  // merges.txt line of each merge
  std::vector<Pair> merges;
  {
    const std::string text = read_file(merges_path);
    std::istringstream in(text);
    std::string line;
    int line_no = 0;
    const auto fail = [&](const std::string& problem) {
      return std::runtime_error("merges file '" + merges_path + "', line " + std::to_string(line_no) + ": " +
                                problem + hint);
    };
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        throw fail("expected two tokens separated by one space, got '" + line + "'");
      }
      const std::string_view parts[2] = {std::string_view(line).substr(0, space),
                                         std::string_view(line).substr(space + 1)};
      int32_t ids[2];
      std::string bytes;
      for (int k = 0; k < 2; ++k) {
        if (!token_to_bytes(parts[k], bytes)) {
          throw fail("'" + std::string(parts[k]) + "' holds a character that is not one of GPT-2's 256 byte characters");
        }
        const auto it = canonical.find(bytes);
        if (it == canonical.end()) {
          throw fail("'" + std::string(parts[k]) + "' is neither a byte nor made by an earlier line");
        }
        ids[k] = it->second;
      }
      const std::string result = bytes_of[ids[0]] + bytes_of[ids[1]];
      const int32_t id = static_cast<int32_t>(256 + merges.size());
      const auto [it, fresh] = canonical.emplace(result, id);
      if (!fresh) {
        throw fail("makes '" + bytes_to_token(result) + "', which " +
                   (it->second < 256 ? std::string("is a byte") : "line " + std::to_string(made_on[it->second - 256]) +
                                                                      " made already"));
      }
      bytes_of.push_back(result);
      made_on.push_back(line_no);
      merges.emplace_back(ids[0], ids[1]);
    }
  }
  const int32_t eot = static_cast<int32_t>(256 + merges.size());
  const int64_t expected = eot + 1;

  // vocab.json: each of those tokens, and <|endoftext|>, once, with ids 0..V-1.
  const auto fail = [&](const std::string& problem) {
    return std::runtime_error("vocab file '" + vocab_path + "': " + problem + hint);
  };
  json vocab;
  try {
    vocab = json::parse(read_file(vocab_path));
  } catch (const json::exception& e) {
    throw fail(std::string("not valid JSON: ") + e.what());
  }
  if (!vocab.is_object()) throw fail("expected an object of token -> id");
  std::vector<int32_t> ids(expected, -1);  // canonical -> id
  std::vector<int32_t> seen(expected, -1);  // id -> canonical
  std::string bytes;
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= expected) {
      throw fail("token '" + token + "' has id " + value.dump() + "; ids must be 0.." + std::to_string(expected - 1) +
                 " (256 bytes + " + std::to_string(merges.size()) + " merges of '" + merges_path + "' + <|endoftext|>)");
    }
    const int32_t id = static_cast<int32_t>(value.get<int64_t>());
    int32_t c = eot;
    if (token != eot_text) {
      const auto it = token_to_bytes(token, bytes) ? canonical.find(bytes) : canonical.end();
      if (it == canonical.end()) {
        throw fail("token '" + token + "' (id " + std::to_string(id) + ") is neither a byte, a merge's result nor " +
                   std::string(eot_text) + " (the only special token GPUMix keeps)");
      }
      c = it->second;
    }
    if (seen[id] >= 0) throw fail("id " + std::to_string(id) + " is given to two tokens");
    seen[id] = c;
    ids[c] = id;
  }
  for (int32_t c = 0; c < expected; ++c) {
    if (ids[c] >= 0) continue;
    if (c == eot) throw fail(std::string("it has no ") + std::string(eot_text));
    throw fail("it lacks token '" + bytes_to_token(bytes_of[c]) + "'" +
               (c < 256 ? std::string(" (byte ") + std::to_string(c) + ")"
                        : " made by line " + std::to_string(made_on[c - 256]) + " of '" + merges_path + "'"));
  }
  return Tokenizer(std::move(merges), Pretokenizer::gpt2, std::move(ids));
}

}  // namespace gpumix::data
