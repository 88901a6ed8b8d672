// Reading a text corpus into documents, and joining them for the tokenizer.
//
// A path is read as:
//   - a folder: every regular file in it (not in subfolders), in name order, skipping
//     hidden files and the fortune index files `*.dat` and `*.u8`; each file as below;
//   - a gzip-compressed file (by its magic bytes, whatever its name): its decompressed
//     contents, read as below by its name without `.gz`;
//   - a JSONL file: one document per line, each line a JSON object holding the document's
//     text as a string under `text_field` ("text" by default, `--text-field`); blank lines
//     and documents of only whitespace are dropped;
//   - a file in the fortunes format: one document per record (the text between lines
//     holding only `%`), with backspace overstrikes ("_\bx", "x\bx") reduced to the last
//     character and records that are only whitespace dropped;
//   - any other file (text): one document, its whole contents.
//
// Which files are JSONL or fortunes is the format's choice (`--format`): `text` none,
// `jsonl` and `fortunes` every file, `auto` (the default)
//   - JSONL: a file named `*.jsonl` or `*.ndjson`, or whose first line is a JSON object
//     holding a string under `text_field`;
//   - fortunes: a file that has a `.dat` twin (FILE.dat: strfile's index, which `fortune`
//     needs, so every file of the fortunes package, /usr/share/games/fortunes, has one), or
//     else reads as fortune records: at least 2 lines holding only `%`, at least 90% of the
//     records they separate at most 2 KiB, and lines that start with `%` but hold more
//     (LaTeX's comments) fewer than a tenth of the bare ones.
// So a LaTeX file or any text that merely holds a `%` line stays one document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpumix::data {

// How --data's files are read (`--format`). nanogpt is token data, not text: nanoGPT's
// headerless uint16 train.bin / val.bin (nn/data/shards.h reads it; read_documents refuses it).
enum class CorpusFormat { auto_detect, text, fortunes, jsonl, nanogpt };

// The JSON field a JSONL line's document is read from unless `--text-field` says otherwise.
inline constexpr const char* kDefaultTextField = "text";

// The text formats as the commands' --format help names them (the rules above).
inline constexpr const char* kTextFormatsHelp =
    "auto (JSONL where a file is named .jsonl or its first line is an object holding --text-field; fortune "
    "records where a file has a .dat twin or reads as %-separated short records; else text), text (every file "
    "one document), fortunes, jsonl; gzip-compressed files are read decompressed";

// "auto", "text", "fortunes", "jsonl", "nanogpt" -> the format; throws std::invalid_argument
// naming them.
CorpusFormat parse_corpus_format(const std::string& name);
const char* corpus_format_name(CorpusFormat format);

// A corpus file whose invalid UTF-8 bytes are more than this share of it is mostly not
// text: a warning with `auto`, an error with `text`.
constexpr double kMaxInvalidUtf8Share = 0.10;

// What reading a corpus found, for the settings table and the warning above.
struct CorpusInfo {
  int64_t text_files = 0, fortune_files = 0, jsonl_files = 0;
  int64_t records = 0;        // documents from the fortune files
  int64_t jsonl_records = 0;  // documents from the JSONL files
  int64_t gzip_files = 0;     // of all the files above, those read through gzip
  int64_t bytes = 0, invalid_utf8_bytes = 0;  // over every file read (decompressed)
  std::string worst_file;                     // the file with the largest invalid share
  double worst_share = 0;
  // "text", "fortunes (1,234 records)", "fortunes (3 files, 1,234 records) + text (2 files)",
  // "jsonl (2 files, 5,000 records; 1 gzip-compressed)".
  std::string describe() const;
  // "" or the warning: "corpus X is mostly not text: 43% of its bytes are not UTF-8 ...".
  std::string warning(const std::string& path) const;
};

// Whether `auto` reads the file `path` holding `text` as fortunes (the rule above).
bool looks_like_fortunes(const std::string& path, std::string_view text);

// Whether `auto` reads the file `name` (without `.gz`) holding `text` as JSONL.
bool looks_like_jsonl(const std::string& name, std::string_view text, const std::string& text_field = kDefaultTextField);

// Whether the file starts with gzip's magic bytes (1f 8b).
bool is_gzip_file(const std::string& path);

// A corpus file's bytes in order, decompressed when it is gzip-compressed (every member, as
// `zcat` reads them). read() throws std::runtime_error naming the file and what zlib found
// (damaged, truncated).
class CorpusFileReader {
 public:
  explicit CorpusFileReader(const std::string& path);
  ~CorpusFileReader();
  CorpusFileReader(const CorpusFileReader&) = delete;
  CorpusFileReader& operator=(const CorpusFileReader&) = delete;
  size_t read(char* out, size_t n);  // 0 at the end
  std::string read_all();
  bool gzip() const { return gzip_; }
  // The name its contents are read by: "a.jsonl" for "a.jsonl.gz".
  std::string content_name() const;
  int64_t file_bytes_read() const;  // of the file on disk (compressed), for progress

 private:
  std::string path_;
  void* file_ = nullptr;  // zlib's gzFile, which reads an uncompressed file as it is
  bool gzip_ = false;
};

// The decompressed contents of a gzip file (CorpusFileReader::read_all).
std::string read_gzip_file(const std::string& path);

// The files a corpus path names: the file itself, or a folder's files as above, in name
// order. Throws std::runtime_error when the path does not exist.
std::vector<std::string> corpus_files(const std::string& path);

// The document of one JSONL line (`line_no` from 1, for errors) into `doc`; false for a
// blank line or a blank document. Throws as parse_jsonl.
bool jsonl_document(std::string_view line, const std::string& name, int64_t line_no, const std::string& text_field,
                    std::string& doc);

// The documents of one corpus file, `text` its whole (decompressed) contents and `name` the
// name they are read by, appended to `docs` by `format` and the rules above; counted in info.
void append_file_documents(const std::string& path, const std::string& name, std::string text, CorpusFormat format,
                           const std::string& text_field, std::vector<std::string>& docs, CorpusInfo& info);

// The documents of one JSONL text (`name` for errors): throws std::runtime_error naming the
// file and line when a line is not a JSON object or its `text_field` is missing or not a
// string (naming the fields the line has).
std::vector<std::string> parse_jsonl(std::string_view text, const std::string& name,
                                     const std::string& text_field = kDefaultTextField);

// Bytes of `text` that are not part of a well-formed UTF-8 sequence.
int64_t invalid_utf8_bytes(std::string_view text);

// Throws std::runtime_error naming the path when it is missing, unreadable, or yields no
// text at all; with CorpusFormat::text also when a file is mostly not UTF-8 text.
std::vector<std::string> read_documents(const std::string& path, CorpusFormat format = CorpusFormat::auto_detect,
                                        CorpusInfo* info = nullptr, const std::string& text_field = kDefaultTextField);

// The records of one fortunes-format text.
std::vector<std::string> parse_fortunes(std::string_view text);

// Removes backspace overstrikes: each '\b' deletes the byte before it.
std::string strip_overstrikes(std::string_view text);

// The documents joined with <|endoftext|> between them (GPT-2's convention).
std::string join_documents(const std::vector<std::string>& docs);

// read_documents then join_documents.
std::string read_corpus(const std::string& path, CorpusFormat format = CorpusFormat::auto_detect,
                        CorpusInfo* info = nullptr, const std::string& text_field = kDefaultTextField);

}  // namespace gpumix::data
