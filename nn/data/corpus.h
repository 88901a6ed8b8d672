// Reading a text corpus into documents, and joining them for the tokenizer.
//
// A path is read as:
//   - a folder: every regular file in it (not in subfolders), in name order, skipping
//     hidden files and the fortune index files `*.dat` and `*.u8`; each file as below;
//   - a file in the fortunes format: one document per record (the text between lines
//     holding only `%`), with backspace overstrikes ("_\bx", "x\bx") reduced to the last
//     character and records that are only whitespace dropped;
//   - any other file (text): one document, its whole contents.
//
// Which files are fortunes is the format's choice (`--format`): `text` none, `fortunes`
// every file, `auto` (the default) a file that
//   - has a `.dat` twin (FILE.dat: strfile's index, which `fortune` needs, so every file of
//     the fortunes package, /usr/share/games/fortunes, has one), or else
//   - reads as fortune records: at least 2 lines holding only `%`, at least 90% of the
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
enum class CorpusFormat { auto_detect, text, fortunes, nanogpt };

// "auto", "text", "fortunes", "nanogpt" -> the format; throws std::invalid_argument naming them.
CorpusFormat parse_corpus_format(const std::string& name);
const char* corpus_format_name(CorpusFormat format);

// A corpus file whose invalid UTF-8 bytes are more than this share of it is mostly not
// text: a warning with `auto`, an error with `text`.
constexpr double kMaxInvalidUtf8Share = 0.10;

// What reading a corpus found, for the settings table and the warning above.
struct CorpusInfo {
  int64_t text_files = 0, fortune_files = 0;
  int64_t records = 0;  // documents from the fortune files
  int64_t bytes = 0, invalid_utf8_bytes = 0;  // over every file read
  std::string worst_file;                     // the file with the largest invalid share
  double worst_share = 0;
  // "text", "fortunes (1,234 records)", "fortunes (3 files, 1,234 records) + text (2 files)".
  std::string describe() const;
  // "" or the warning: "corpus X is mostly not text: 43% of its bytes are not UTF-8 ...".
  std::string warning(const std::string& path) const;
};

// Whether `auto` reads the file `path` holding `text` as fortunes (the rule above).
bool looks_like_fortunes(const std::string& path, std::string_view text);

// Bytes of `text` that are not part of a well-formed UTF-8 sequence.
int64_t invalid_utf8_bytes(std::string_view text);

// Throws std::runtime_error naming the path when it is missing, unreadable, or yields no
// text at all; with CorpusFormat::text also when a file is mostly not UTF-8 text.
std::vector<std::string> read_documents(const std::string& path, CorpusFormat format = CorpusFormat::auto_detect,
                                        CorpusInfo* info = nullptr);

// The records of one fortunes-format text.
std::vector<std::string> parse_fortunes(std::string_view text);

// Removes backspace overstrikes: each '\b' deletes the byte before it.
std::string strip_overstrikes(std::string_view text);

// The documents joined with <|endoftext|> between them (GPT-2's convention).
std::string join_documents(const std::vector<std::string>& docs);

// read_documents then join_documents.
std::string read_corpus(const std::string& path, CorpusFormat format = CorpusFormat::auto_detect,
                        CorpusInfo* info = nullptr);

}  // namespace gpumix::data
