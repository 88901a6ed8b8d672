#include "nn/data/corpus.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "nn/data/bpe.h"
#include "nn/data/file_util.h"

namespace gpumix::data {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, share >= 0.1 ? "%.0f%%" : "%.1f%%", share * 100);
  return buf;
}

void read_file_documents(const std::string& path, CorpusFormat format, std::vector<std::string>& docs,
                         CorpusInfo& info) {
  std::string text = read_file(path);
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
  const bool fortunes = format == CorpusFormat::fortunes ||
                        (format == CorpusFormat::auto_detect && looks_like_fortunes(path, text));
  if (fortunes) {
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

}  // namespace

CorpusFormat parse_corpus_format(const std::string& name) {
  if (name == "auto") return CorpusFormat::auto_detect;
  if (name == "text") return CorpusFormat::text;
  if (name == "fortunes") return CorpusFormat::fortunes;
  if (name == "nanogpt") return CorpusFormat::nanogpt;
  throw std::invalid_argument("--format " + name + " is not a data format; pass auto (token files by their header, "
                              "fortunes where a file looks like the fortunes package's, else text), text, fortunes or "
                              "nanogpt (nanoGPT's headerless uint16 train.bin / val.bin)");
}

const char* corpus_format_name(CorpusFormat format) {
  switch (format) {
    case CorpusFormat::auto_detect: return "auto";
    case CorpusFormat::text: return "text";
    case CorpusFormat::fortunes: return "fortunes";
    case CorpusFormat::nanogpt: return "nanogpt";
  }
  return "?";
}

std::string CorpusInfo::describe() const {
  const std::string fortunes =
      fortune_files == 1 ? "fortunes (" + with_commas(records) + " records)"
                         : "fortunes (" + with_commas(fortune_files) + " files, " + with_commas(records) + " records)";
  if (fortune_files == 0) return text_files > 1 ? "text (" + with_commas(text_files) + " files)" : "text";
  if (text_files == 0) return fortunes;
  return fortunes + " + text (" + with_commas(text_files) + (text_files == 1 ? " file)" : " files)");
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

std::vector<std::string> read_documents(const std::string& path, CorpusFormat format, CorpusInfo* info_out) {
  if (format == CorpusFormat::nanogpt)
    throw std::invalid_argument("corpus '" + path + "': --format nanogpt is token data (nanoGPT's uint16 .bin), not text");
  CorpusInfo info;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw std::runtime_error("corpus '" + path + "' does not exist — pass a text file, a fortunes file or a "
                             "folder of them (e.g. /usr/share/games/fortunes after `apt-get install fortunes`)");
  }
  std::vector<std::string> docs;
  if (fs::is_directory(status)) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(path)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.' || ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
      if (!entry.is_regular_file()) continue;  // follows symlinks; skips folders
      files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) read_file_documents(f, format, docs, info);
  } else {
    read_file_documents(path, format, docs, info);
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

std::string read_corpus(const std::string& path, CorpusFormat format, CorpusInfo* info) {
  return join_documents(read_documents(path, format, info));
}

}  // namespace gpumix::data
