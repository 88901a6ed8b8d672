#include "nn/data/corpus_encode.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <stdexcept>

#include "nn/data/file_util.h"
#include "nn/data/llmc_format.h"
#include "nn/data/progress.h"
#include "nn/data/shards.h"

namespace gpumix::data {

namespace fs = std::filesystem;

namespace {

// A corpus's documents in order, one at a time: JSONL files a line at a time, the others
// whole (read_documents' rules, so the same documents).
class DocumentStream {
 public:
  DocumentStream(const std::string& corpus, const CorpusEncodeOptions& o) : files_(corpus_files(corpus)), o_(o) {
    for (const std::string& f : files_) total_bytes_ += (int64_t)fs::file_size(f);
  }

  bool next(std::string& doc) {
    while (true) {
      if (!pending_.empty()) {
        doc = std::move(pending_.front());
        pending_.pop_front();
        return true;
      }
      if (reader_ && jsonl_) {
        std::string line;
        while (read_line(line)) {
          if (jsonl_document(line, files_[file_ - 1], ++line_no_, o_.text_field, doc)) {
            ++info.jsonl_records;
            return true;
          }
        }
      }
      if (reader_) {
        done_bytes_ += (int64_t)fs::file_size(files_[file_ - 1]);
        reader_.reset();
      }
      if (file_ == files_.size()) return false;
      open(files_[file_++]);
    }
  }

  // Of the files on disk (compressed), for the progress bar.
  int64_t file_bytes_done() const { return done_bytes_ + (reader_ ? reader_->file_bytes_read() : 0); }
  int64_t total_bytes() const { return total_bytes_; }

  CorpusInfo info;

 private:
  void open(const std::string& path) {
    reader_ = std::make_unique<CorpusFileReader>(path);
    info.gzip_files += reader_->gzip();
    buf_.clear();
    pos_ = 0;
    line_no_ = 0;
    jsonl_ = false;
    const std::string name = reader_->content_name();
    jsonl_ = o_.format == CorpusFormat::jsonl ||
             (o_.format == CorpusFormat::auto_detect && looks_like_jsonl(name, first_line(), o_.text_field));
    if (jsonl_) {
      ++info.jsonl_files;
      info.bytes += (int64_t)buf_.size();  // and fill() counts the rest
      return;
    }
    // One document or small records: read whole, as read_documents does.
    std::string text = buf_ + reader_->read_all();
    buf_.clear();
    std::vector<std::string> docs;
    append_file_documents(path, name, std::move(text), o_.format, o_.text_field, docs, info);
    for (std::string& d : docs) pending_.push_back(std::move(d));
  }

  // Fills buf_ through the first newline (or the end): what looks_like_jsonl reads.
  std::string_view first_line() {
    while (buf_.find('\n') == std::string::npos && fill()) {}
    return buf_;
  }

  bool fill() {
    char chunk[1 << 16];
    const size_t n = reader_->read(chunk, sizeof chunk);
    buf_.append(chunk, n);
    if (jsonl_) info.bytes += (int64_t)n;
    return n > 0;
  }

  bool read_line(std::string& line) {
    while (true) {
      const size_t nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        line.assign(buf_, pos_, nl - pos_);
        pos_ = nl + 1;
        return true;
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      if (!fill()) {
        if (buf_.empty()) return false;
        line = std::move(buf_);  // the last line, without a newline
        buf_.clear();
        return true;
      }
    }
  }

  std::vector<std::string> files_;
  const CorpusEncodeOptions& o_;
  size_t file_ = 0;  // the next file to open
  std::unique_ptr<CorpusFileReader> reader_;
  bool jsonl_ = false;
  int64_t line_no_ = 0;
  std::string buf_;  // read but not yet taken, from pos_
  size_t pos_ = 0;
  std::deque<std::string> pending_;  // the documents of a file read whole
  int64_t done_bytes_ = 0, total_bytes_ = 0;
};

}  // namespace

CorpusEncodeStats encode_corpus(const Tokenizer& tok, const std::string& corpus, const CorpusEncodeOptions& o,
                                const std::function<void(TokenView)>& sink) {
  if (o.format == CorpusFormat::nanogpt)
    throw std::invalid_argument("corpus '" + corpus + "': --format nanogpt is token data (nanoGPT's uint16 .bin), not text");
  const auto t0 = std::chrono::steady_clock::now();
  CorpusEncodeStats stats;
  stats.threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(stats.threads);  // Tokenizer::encode's; restored below
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{saved_threads};
  DocumentStream docs(corpus, o);
  Progress progress("encoding", (double)docs.total_bytes() / 1e6, "MB", o.progress);
  const int64_t round_bytes = std::max<int64_t>(o.round_bytes, 1) * stats.threads;
  // The next round is read (and decompressed) on its own thread while this one is encoded;
  // only that thread touches `docs` until the round is taken.
  struct Round {
    std::string text;
    int64_t file_bytes_done = 0;
  };
  const auto read_round = [&] {
    Round r;
    std::string doc;
    while ((int64_t)r.text.size() < round_bytes && docs.next(doc)) {
      if (stats.documents++ > 0) r.text += eot_text;
      r.text += doc;
    }
    r.file_bytes_done = docs.file_bytes_done();
    return r;
  };
  std::future<Round> next = std::async(std::launch::async, read_round);
  while (true) {
    const Round round = next.get();
    if (round.text.empty()) break;
    next = std::async(std::launch::async, read_round);
    const std::vector<int32_t> ids = tok.encode(round.text);
    stats.tokens += (int64_t)ids.size();
    sink(TokenView(ids));
    progress.update((double)round.file_bytes_done / 1e6);
  }
  progress.finish();
  if (stats.documents == 0)
    throw std::runtime_error("corpus '" + corpus + "' holds no text — pass a non-empty text file or folder");
  stats.info = docs.info;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

std::string shard_path(const std::string& prefix, int index) {
  char num[16];
  std::snprintf(num, sizeof num, "_%06d.bin", index);
  return prefix + num;
}

ShardWriter::ShardWriter(std::string prefix, int64_t shard_tokens, int64_t vocab)
    : prefix_(std::move(prefix)), shard_tokens_(shard_tokens), width_(vocab <= 65536 ? 2 : 4) {
  if (shard_tokens < 1 || shard_tokens > llmc::max_tokens)
    throw std::invalid_argument("--shard-tokens " + std::to_string(shard_tokens) + ": an llm.c shard holds 1 to " +
                                with_commas(llmc::max_tokens) + " tokens");
  const fs::path base(prefix_);
  const fs::path folder = base.has_parent_path() ? base.parent_path() : fs::path(".");
  const std::string stem = base.filename().string() + "_";
  if (base.filename().empty())
    throw std::invalid_argument("--out '" + prefix_ + "' names a folder; pass a shard name prefix such as " +
                                prefix_ + "corpus (shards corpus_000000.bin, ...)");
  std::error_code ec;
  if (fs::is_directory(folder, ec)) {
    std::vector<std::string> there;
    for (const auto& e : fs::directory_iterator(folder)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(stem, 0) == 0 && ends_with(name, ".bin")) there.push_back(e.path().string());
    }
    std::sort(there.begin(), there.end());
    if (!there.empty())
      throw std::runtime_error(
          (there.size() == 1 ? "shard " + there[0] + " already exists"
                             : with_commas((int64_t)there.size()) + " shards " + there[0] + " .. " + there.back() +
                                   " already exist") +
          "; pass another --out prefix, or remove the old shards (a new set beside them would mix with them in a glob)");
  } else {
    fs::create_directories(folder);
  }
}

ShardWriter::~ShardWriter() {
  if (finished_) return;
  std::error_code ec;
  for (const std::string& p : written_) fs::remove(p, ec);  // an unfinished set is no corpus
}

void ShardWriter::add(TokenView tokens) {
  for (size_t i = 0; i < tokens.size();) {
    // As many as the current shard takes, `width_` little-endian bytes each.
    const size_t n = std::min(tokens.size() - i, (size_t)shard_tokens_ - buffer_.size() / width_);
    const size_t at = buffer_.size();
    buffer_.resize(at + n * width_);
    for (size_t k = 0; k < n; ++k) {
      const uint32_t v = (uint32_t)tokens[i + k];
      std::memcpy(buffer_.data() + at + k * width_, &v, width_);
    }
    i += n;
    if ((int64_t)buffer_.size() == shard_tokens_ * width_) flush();
  }
}

void ShardWriter::flush() {
  const std::string path = shard_path(prefix_, (int)written_.size());
  write_llmc_shard(path, TokenView(buffer_.data(), buffer_.size() / width_, width_), width_);
  written_.push_back(path);
  buffer_.clear();
}

const std::vector<std::string>& ShardWriter::finish() {
  if (!buffer_.empty()) flush();
  finished_ = true;
  return written_;
}

}  // namespace gpumix::data
