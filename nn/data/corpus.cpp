#include "nn/data/corpus.h"

#include <algorithm>
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

bool has_percent_line(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") return true;
    pos = end + 1;
  }
  return false;
}

void read_file_documents(const std::string& path, std::vector<std::string>& docs) {
  std::string text = read_file(path);
  if (has_percent_line(text)) {
    for (auto& d : parse_fortunes(text)) docs.push_back(std::move(d));
  } else if (!is_blank(text)) {
    docs.push_back(std::move(text));
  }
}

}  // namespace

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

std::vector<std::string> read_documents(const std::string& path) {
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
    for (const auto& f : files) read_file_documents(f, docs);
  } else {
    read_file_documents(path, docs);
  }
  if (docs.empty()) {
    throw std::runtime_error("corpus '" + path + "' holds no text — pass a non-empty text file or folder");
  }
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

std::string read_corpus(const std::string& path) { return join_documents(read_documents(path)); }

}  // namespace gpumix::data
