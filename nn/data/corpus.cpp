#include "nn/data/corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "nn/data/bpe.h"
#include "nn/data/file_util.h"

namespace gpumix::data {

namespace fs = std::filesystem;

namespace {

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, share >= 0.1 ? "%.0f%%" : "%.1f%%", share * 100);
  return buf;
}

// "JSONL file 'a.jsonl' line 3", where a JSONL error is.
std::string jsonl_where(const std::string& name, int64_t line) {
  return "JSONL file '" + name + "' line " + with_commas(line);
}

}  // namespace

CorpusFormat parse_corpus_format(const std::string& name) {
  if (name == "auto") return CorpusFormat::auto_detect;
  if (name == "text") return CorpusFormat::text;
  if (name == "fortunes") return CorpusFormat::fortunes;
  if (name == "jsonl") return CorpusFormat::jsonl;
  if (name == "nanogpt") return CorpusFormat::nanogpt;
  throw std::invalid_argument("--format " + name + " is not a data format; pass auto (token files by their header, "
                              "JSONL by its name or first line, fortunes where a file looks like the fortunes "
                              "package's, else text), text, fortunes, jsonl (one JSON object a line, the text under "
                              "--text-field) or nanogpt (nanoGPT's headerless uint16 train.bin / val.bin)");
}

const char* corpus_format_name(CorpusFormat format) {
  switch (format) {
    case CorpusFormat::auto_detect: return "auto";
    case CorpusFormat::text: return "text";
    case CorpusFormat::fortunes: return "fortunes";
    case CorpusFormat::jsonl: return "jsonl";
    case CorpusFormat::nanogpt: return "nanogpt";
  }
  return "?";
}

std::string CorpusInfo::describe() const {
  // One part per kind of file read: its files (when more than one) and its records.
  const auto part = [](const char* kind, int64_t files, const int64_t* records) {
    std::string inside;
    if (files > 1) inside = with_commas(files) + " files";
    if (records) inside += (inside.empty() ? "" : ", ") + with_commas(*records) + (*records == 1 ? " record" : " records");
    if (inside.empty() && files == 1 && !records) return std::string(kind);
    return std::string(kind) + " (" + inside + ")";
  };
  std::vector<std::string> parts;
  if (jsonl_files) parts.push_back(part("jsonl", jsonl_files, &jsonl_records));
  if (fortune_files) parts.push_back(part("fortunes", fortune_files, &records));
  if (text_files) {
    const bool alone = parts.empty();
    parts.push_back(alone ? part("text", text_files, nullptr)
                          : "text (" + with_commas(text_files) + (text_files == 1 ? " file)" : " files)"));
  }
  std::string out = parts.empty() ? "text" : parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += " + " + parts[i];
  if (gzip_files) out += ", " + with_commas(gzip_files) + " gzip-compressed";
  return out;
}

std::string CorpusInfo::warning(const std::string& path) const {
  if (worst_share <= kMaxInvalidUtf8Share) return "";
  const double share = bytes > 0 ? (double)invalid_utf8_bytes / (double)bytes : 0;
  std::string where = worst_file == path ? "" : " (" + worst_file + ": " + percent(worst_share) + ")";
  return "corpus " + path + " is mostly not text: " + percent(share) + " of its " + with_commas(bytes) +
         " bytes are not UTF-8" + where + "; training on it learns noise. Pass a text corpus or a token file "
         "(--format text makes this an error)";
}

bool looks_like_fortunes(const std::string& path, std::string_view text) {
  std::error_code ec;
  if (fs::is_regular_file(path + ".dat", ec)) return true;  // strfile's index
  int64_t bare = 0, commented = 0, records = 0, short_records = 0, record_bytes = 0;
  const auto end_record = [&] {
    ++records;
    if (record_bytes <= 2048) ++short_records;
    record_bytes = 0;
  };
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") {
      ++bare;
      end_record();
    } else {
      if (!line.empty() && line[0] == '%') ++commented;
      record_bytes += (int64_t)line.size() + 1;
    }
    pos = end + 1;
  }
  end_record();
  return bare >= 2 && short_records * 10 >= records * 9 && commented * 10 < bare;
}

int64_t invalid_utf8_bytes(std::string_view text) {
  int64_t invalid = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte (RFC 3629's table)
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned char b = p[i + k];
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (ok) {
      i += len;
    } else {
      ++invalid;  // one bad byte; the next may start a good sequence
      ++i;
    }
  }
  return invalid;
}

std::string strip_overstrikes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\b') {
      if (!out.empty()) out.pop_back();
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> parse_fortunes(std::string_view text) {
  std::vector<std::string> docs;
  std::string record;
  const auto flush = [&] {
    // A record's text without its final newline; the separator carries the boundary.
    while (!record.empty() && record.back() == '\n') record.pop_back();
    if (!is_blank(record)) docs.push_back(strip_overstrikes(record));
    record.clear();
  };
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    std::string_view bare = line;
    if (!bare.empty() && bare.back() == '\r') bare.remove_suffix(1);
    if (bare == "%") {
      flush();
    } else {
      record.append(line);
      record.push_back('\n');
    }
    pos = end + 1;
  }
  flush();
  return docs;
}

bool looks_like_jsonl(const std::string& name, std::string_view text, const std::string& text_field) {
  if (ends_with(name, ".jsonl") || ends_with(name, ".ndjson")) return true;
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || text[start] != '{') return false;
  const size_t end = text.find('\n', start);
  const auto first = nlohmann::json::parse(text.substr(start, end == std::string_view::npos ? end : end - start),
                                           nullptr, /*allow_exceptions=*/false);
  return first.is_object() && first.contains(text_field) && first[text_field].is_string();
}

bool is_gzip_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {};
  in.read(reinterpret_cast<char*>(magic), 2);
  return in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

CorpusFileReader::CorpusFileReader(const std::string& path) : path_(path), gzip_(is_gzip_file(path)) {
  file_ = gzopen(path.c_str(), "rb");
  if (!file_) throw std::runtime_error("cannot open corpus file '" + path + "': " + std::strerror(errno));
  gzbuffer(static_cast<gzFile>(file_), 1 << 20);
}

CorpusFileReader::~CorpusFileReader() {
  if (file_) gzclose(static_cast<gzFile>(file_));
}

size_t CorpusFileReader::read(char* out, size_t n) {
  const auto f = static_cast<gzFile>(file_);
  const int got = gzread(f, out, (unsigned)std::min<size_t>(n, 1u << 30));
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (got >= 0 && err == Z_OK) return (size_t)got;
  const std::string why = err == Z_BUF_ERROR ? "it ends early (truncated?)" : err == Z_ERRNO ? std::strerror(errno) : msg;
  throw std::runtime_error((gzip_ ? "gzip file '" : "corpus file '") + path_ + "' is damaged: " + why + ", after " +
                           with_commas(file_bytes_read()) + " of its " +
                           with_commas((int64_t)fs::file_size(path_)) + " bytes; check it with `gzip -t`, or pass "
                           "it decompressed");
}

std::string CorpusFileReader::read_all() {
  std::string out;
  char buf[1 << 16];  // not a zeroed vector: corpora of many small files would clear it each
  while (const size_t n = read(buf, sizeof buf)) out.append(buf, n);
  return out;
}

std::string CorpusFileReader::content_name() const {
  return gzip_ && ends_with(path_, ".gz") ? path_.substr(0, path_.size() - 3) : path_;
}

int64_t CorpusFileReader::file_bytes_read() const {
  return gzip_ ? (int64_t)gzoffset(static_cast<gzFile>(file_)) : (int64_t)gztell(static_cast<gzFile>(file_));
}

std::string read_gzip_file(const std::string& path) { return CorpusFileReader(path).read_all(); }

bool jsonl_document(std::string_view line, const std::string& name, int64_t line_no, const std::string& text_field,
                    std::string& doc) {
  if (is_blank(line)) return false;
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw std::runtime_error(jsonl_where(name, line_no) + " is not JSON (" + e.what() + "); JSONL holds one JSON "
                             "object a line. Pass --format text to read the file as plain text");
  }
  if (!record.is_object())
    throw std::runtime_error(jsonl_where(name, line_no) + " is a JSON " + record.type_name() +
                             ", not an object; JSONL holds one object a line, its text under \"" + text_field + "\"");
  const auto field = record.find(text_field);
  if (field == record.end()) {
    std::string keys;
    for (const auto& [key, value] : record.items()) {
      if (keys.size() > 200) {
        keys += ", ...";
        break;
      }
      keys += (keys.empty() ? "\"" : ", \"") + key + "\" (" + value.type_name() + ")";
    }
    throw std::runtime_error(jsonl_where(name, line_no) + " has no field \"" + text_field + "\"; it has " +
                             (keys.empty() ? "none" : keys) + ". Pass --text-field NAME for the field that holds "
                             "the document's text");
  }
  if (!field->is_string())
    throw std::runtime_error(jsonl_where(name, line_no) + ": field \"" + text_field + "\" is a " +
                             field->type_name() + ", not a string; pass --text-field NAME for the text's field");
  doc = field->get<std::string>();
  return !is_blank(doc);
}

std::vector<std::string> parse_jsonl(std::string_view text, const std::string& name, const std::string& text_field) {
  std::vector<std::string> docs;
  std::string doc;
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (jsonl_document(text.substr(pos, end - pos), name, ++line_no, text_field, doc)) docs.push_back(std::move(doc));
    pos = end + 1;
  }
  return docs;
}

void append_file_documents(const std::string& path, const std::string& name, std::string text, CorpusFormat format,
                           const std::string& text_field, std::vector<std::string>& docs, CorpusInfo& info) {
  const int64_t invalid = invalid_utf8_bytes(text);
  const double share = text.empty() ? 0 : (double)invalid / (double)text.size();
  if (format == CorpusFormat::text && share > kMaxInvalidUtf8Share)
    throw std::runtime_error("corpus file '" + path + "' is mostly not text: " + percent(share) + " of its " +
                             with_commas((int64_t)text.size()) + " bytes are not UTF-8 (at most " +
                             percent(kMaxInvalidUtf8Share) + " with --format text); pass a text corpus, a token "
                             "file from `gpumix tokenizer encode`, or --format auto to train on it anyway");
  info.bytes += (int64_t)text.size();
  info.invalid_utf8_bytes += invalid;
  if (share > info.worst_share) {
    info.worst_share = share;
    info.worst_file = path;
  }
  const bool auto_detect = format == CorpusFormat::auto_detect;
  if (format == CorpusFormat::jsonl || (auto_detect && looks_like_jsonl(name, text, text_field))) {
    ++info.jsonl_files;
    for (auto& d : parse_jsonl(text, path, text_field)) {
      docs.push_back(std::move(d));
      ++info.jsonl_records;
    }
  } else if (format == CorpusFormat::fortunes || (auto_detect && looks_like_fortunes(name, text))) {
    ++info.fortune_files;
    for (auto& d : parse_fortunes(text)) {
      docs.push_back(std::move(d));
      ++info.records;
    }
  } else {
    ++info.text_files;
    if (!is_blank(text)) docs.push_back(std::move(text));
  }
}

std::vector<std::string> corpus_files(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw std::runtime_error("corpus '" + path + "' does not exist — pass a text, JSONL or fortunes file "
                             "(gzip-compressed or not) or a folder of them (e.g. /usr/share/games/fortunes after "
                             "`apt-get install fortunes`)");
  }
  if (!fs::is_directory(status)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
    if (!entry.is_regular_file()) continue;  // follows symlinks; skips folders
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> read_documents(const std::string& path, CorpusFormat format, CorpusInfo* info_out,
                                        const std::string& text_field) {
  if (format == CorpusFormat::nanogpt)
    throw std::invalid_argument("corpus '" + path + "': --format nanogpt is token data (nanoGPT's uint16 .bin), not text");
  CorpusInfo info;
  std::vector<std::string> docs;
  for (const std::string& file : corpus_files(path)) {
    CorpusFileReader reader(file);
    info.gzip_files += reader.gzip();
    append_file_documents(file, reader.content_name(), reader.read_all(), format, text_field, docs, info);
  }
  if (docs.empty()) {
    throw std::runtime_error("corpus '" + path + "' holds no text — pass a non-empty text file or folder");
  }
  if (info_out) *info_out = info;
  return docs;
}

std::string join_documents(const std::vector<std::string>& docs) {
  size_t total = 0;
  for (const auto& d : docs) total += d.size() + eot_text.size();
  std::string out;
  out.reserve(total);
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i > 0) out.append(eot_text);
    out.append(docs[i]);
  }
  return out;
}

std::string read_corpus(const std::string& path, CorpusFormat format, CorpusInfo* info, const std::string& text_field) {
  return join_documents(read_documents(path, format, info, text_field));
}

}  // namespace gpumix::data
