// Corpus reading: fortunes records, overstrikes, JSONL, gzip, folders, plain files, errors.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/file_util.h"
#include "gzip_test_util.h"
#include "test_util.h"

namespace gpumix::data {
namespace {

using D = std::vector<std::string>;

TEST(Corpus, FortunesRecords) {
  const std::string text = "First one.\n  -- Someone\n%\nSecond\nline two\n%\n%\n   \n%\nLast, no newline";
  EXPECT_EQ(parse_fortunes(text), (D{"First one.\n  -- Someone", "Second\nline two", "Last, no newline"}));
}

TEST(Corpus, FortunesWithCrLf) {
  EXPECT_EQ(parse_fortunes("a\r\n%\r\nb\r\n"), (D{"a\r", "b\r"}));
}

TEST(Corpus, Overstrikes) {
  EXPECT_EQ(strip_overstrikes("_\bb_\bo_\bl_\bd"), "bold");
  EXPECT_EQ(strip_overstrikes("B\bBo\bo"), "Bo");
  EXPECT_EQ(strip_overstrikes("\bx"), "x");
  EXPECT_EQ(parse_fortunes("_\bA\n%\n"), (D{"A"}));
}

TEST(Corpus, JoinWithEndOfText) {
  EXPECT_EQ(join_documents({"a", "b c", "d"}), "a<|endoftext|>b c<|endoftext|>d");
  EXPECT_EQ(join_documents({"only"}), "only");
}

TEST(Corpus, FolderSkipsIndexFilesHiddenFilesAndSubfolders) {
  test::TempDir dir;
  write_file_atomic(dir.file("b_jokes"), "joke 1\n%\njoke 2\n");
  write_file_atomic(dir.file("b_jokes.dat"), std::string("\x00\x02\x01", 3));
  write_file_atomic(dir.file("b_jokes.u8"), "joke 1\n%\njoke 2\n");
  write_file_atomic(dir.file(".hidden"), "secret\n");
  write_file_atomic(dir.file("a_plain.txt"), "A plain file\n\nwith two paragraphs.\n");
  std::filesystem::create_directory(dir.file("off"));
  write_file_atomic(dir.file("off/rude"), "no\n%\nno\n");
  EXPECT_EQ(read_documents(dir.path().string()),
            (D{"A plain file\n\nwith two paragraphs.\n", "joke 1", "joke 2"}));
  EXPECT_EQ(read_corpus(dir.path().string()),
            "A plain file\n\nwith two paragraphs.\n<|endoftext|>joke 1<|endoftext|>joke 2");
}

TEST(Corpus, PlainFileIsOneDocument) {
  const auto docs = read_documents(test::tiny_corpus_path());
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], test::tiny_corpus());
  EXPECT_GT(docs[0].size(), 20000u);
}

// --format auto: the fortunes package's files (a .dat twin, or %-separated short records)
// are records; a text that merely holds `%` lines (LaTeX) is one document.
TEST(Corpus, AutoFormatTellsFortunesFromTextWithPercentLines) {
  test::TempDir dir;
  const std::string latex =
      "\\documentclass{article}\n% the preamble\n\\newcommand{\\x}{%\n  y%\n}\n%\n% a comment\n"
      "\\begin{document}\nHello.\n%\n\\end{document}\n";
  write_file_atomic(dir.file("paper.tex"), latex);
  CorpusInfo info;
  EXPECT_EQ(read_documents(dir.file("paper.tex"), CorpusFormat::auto_detect, &info), (D{latex}));
  EXPECT_EQ(info.describe(), "text");
  EXPECT_FALSE(looks_like_fortunes(dir.file("paper.tex"), latex));
  // Asked for, it is read as fortunes all the same.
  EXPECT_EQ(read_documents(dir.file("paper.tex"), CorpusFormat::fortunes, &info).size(), 3u);
  EXPECT_EQ(info.describe(), "fortunes (3 records)");

  // Short records between bare `%` lines, no .dat: fortunes.
  const std::string jokes = "joke 1\n  -- A\n%\njoke 2\n%\njoke 3\n";
  write_file_atomic(dir.file("jokes"), jokes);
  EXPECT_TRUE(looks_like_fortunes(dir.file("jokes"), jokes));
  EXPECT_EQ(read_documents(dir.file("jokes"), CorpusFormat::auto_detect, &info),
            (D{"joke 1\n  -- A", "joke 2", "joke 3"}));
  EXPECT_EQ(info.describe(), "fortunes (3 records)");
  EXPECT_EQ(read_documents(dir.file("jokes"), CorpusFormat::text), (D{jokes}));
  // One `%` line alone is text, unless strfile indexed the file (its .dat twin).
  write_file_atomic(dir.file("two"), "one\n%\ntwo\n");
  EXPECT_EQ(read_documents(dir.file("two")).size(), 1u);
  write_file_atomic(dir.file("two.dat"), std::string("\x00\x02", 2));
  EXPECT_EQ(read_documents(dir.file("two")), (D{"one", "two"}));
  // Long records are not fortunes: a text with a few `%` lines between its sections.
  const std::string sections = std::string(5000, 'a') + "\n%\n" + std::string(5000, 'b') + "\n%\n" +
                               std::string(5000, 'c') + "\n";
  EXPECT_FALSE(looks_like_fortunes(dir.file("sections"), sections));
  EXPECT_THROW(parse_corpus_format("latex"), std::invalid_argument);
  EXPECT_EQ(parse_corpus_format("auto"), CorpusFormat::auto_detect);
}

TEST(Corpus, TheFortunesPackageReadsAsFortunes) {
  const std::string folder = "/usr/share/games/fortunes";
  if (!std::filesystem::is_directory(folder)) GTEST_SKIP() << folder << " is not installed (Debian's fortunes)";
  CorpusInfo info;
  const auto docs = read_documents(folder, CorpusFormat::auto_detect, &info);
  EXPECT_EQ(info.text_files, 0) << info.describe();
  EXPECT_GT(info.fortune_files, 10);
  EXPECT_GT(info.records, 1000);
  EXPECT_EQ((int64_t)docs.size(), info.records);
  EXPECT_EQ(info.warning(folder), "") << "the package's text counts as not UTF-8";
}

TEST(Corpus, InvalidUtf8IsCountedAndMostlyBinaryDataIsSaid) {
  EXPECT_EQ(invalid_utf8_bytes("plain ASCII"), 0);
  EXPECT_EQ(invalid_utf8_bytes("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"), 0);  // é, €, an emoji
  EXPECT_EQ(invalid_utf8_bytes("\xff\xfe"), 2);
  EXPECT_EQ(invalid_utf8_bytes("\xc0\xaf"), 2);          // overlong '/'
  EXPECT_EQ(invalid_utf8_bytes("\xed\xa0\x80"), 3);      // a UTF-16 surrogate
  EXPECT_EQ(invalid_utf8_bytes("ok\xe2\x82"), 2);        // cut short
  EXPECT_EQ(invalid_utf8_bytes("caf\xe9 latin-1"), 1);

  test::TempDir dir;
  // Bytes 1..255 in a fixed pseudo-random order: no NUL, mostly not UTF-8.
  std::string noise;
  uint32_t x = 12345;
  for (int i = 0; i < 4000; ++i) {
    x = x * 1103515245u + 12345u;
    noise += (char)(1 + (x >> 16) % 255);
  }
  write_file_atomic(dir.file("noise.bin"), noise);
  const double share = (double)invalid_utf8_bytes(noise) / (double)noise.size();
  ASSERT_GT(share, kMaxInvalidUtf8Share);
  CorpusInfo info;
  read_documents(dir.file("noise.bin"), CorpusFormat::auto_detect, &info);
  const std::string warning = info.warning(dir.file("noise.bin"));
  char said[16];
  std::snprintf(said, sizeof said, "%.0f%%", share * 100);
  EXPECT_NE(warning.find("mostly not text"), std::string::npos) << warning;
  EXPECT_NE(warning.find(said), std::string::npos) << warning << " lacks " << said;
  EXPECT_ERROR_HAS(read_documents(dir.file("noise.bin"), CorpusFormat::text), "noise.bin", "mostly not text", said,
                   "--format auto");
  // A Latin-1 text's few accented letters stay under the bar.
  write_file_atomic(dir.file("latin1.txt"), "Caf\xe9 au lait, cr\xe8me br\xfbl\xe9" "e, and plain words besides.\n");
  read_documents(dir.file("latin1.txt"), CorpusFormat::text, &info);
  EXPECT_EQ(info.warning(dir.file("latin1.txt")), "");
}

TEST(Corpus, JsonlDocumentsUnderTheTextField) {
  const std::string text = "{\"text\": \"first doc\\nwith two lines\", \"id\": 1}\n\n"
                           "{\"id\": 2, \"text\": \"  \"}\r\n"
                           "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\", \"meta\": {\"text\": \"not this\"}}";
  EXPECT_EQ(parse_jsonl(text, "a.jsonl"), (D{"first doc\nwith two lines", "caf\xc3\xa9 \xf0\x9f\x98\x80"}));
  EXPECT_EQ(parse_jsonl("{\"body\": \"x\", \"text\": \"y\"}\n", "a.jsonl", "body"), (D{"x"}));
}

TEST(Corpus, JsonlErrorsNameTheFileLineAndFix) {
  const std::string ok = "{\"text\": \"fine\"}\n";
  EXPECT_ERROR_HAS(parse_jsonl(ok + ok + "{\"text\": \"cut\n", "web.jsonl"), "web.jsonl", "line 3", "is not JSON",
                   "--format text");
  EXPECT_ERROR_HAS(parse_jsonl(ok + "[1, 2]\n", "web.jsonl"), "line 2", "array", "not an object");
  EXPECT_ERROR_HAS(parse_jsonl(ok + "{\"content\": \"x\", \"id\": 7}\n", "web.jsonl"), "line 2", "no field \"text\"",
                   "\"content\" (string)", "\"id\" (number)", "--text-field");
  EXPECT_ERROR_HAS(parse_jsonl("{\"text\": 42}\n", "web.jsonl"), "line 1", "\"text\" is a number", "--text-field");
  EXPECT_ERROR_HAS(parse_jsonl("{\"text\": null}\n", "web.jsonl"), "line 1", "is a null");
}

TEST(Corpus, JsonlFoundByNameOrFirstLine) {
  test::TempDir dir;
  write_file_atomic(dir.file("a.jsonl"), "{\"text\": \"one\"}\n{\"text\": \"two\"}\n");
  write_file_atomic(dir.file("b.json"), "{\"text\": \"three\"}\n");  // no .jsonl name: the first line says
  write_file_atomic(dir.file("c.txt"), "{ braces in prose, not JSON }\n");
  CorpusInfo info;
  EXPECT_EQ(read_documents(dir.path().string(), CorpusFormat::auto_detect, &info),
            (D{"one", "two", "three", "{ braces in prose, not JSON }\n"}));
  EXPECT_EQ(info.jsonl_files, 2);
  EXPECT_EQ(info.jsonl_records, 3);
  EXPECT_EQ(info.describe(), "jsonl (2 files, 3 records) + text (1 file)");
  // A first line of another field is text unless --text-field names it.
  write_file_atomic(dir.file("d.json"), "{\"body\": \"four\"}\n");
  EXPECT_EQ(read_documents(dir.file("d.json")), (D{"{\"body\": \"four\"}\n"}));
  EXPECT_EQ(read_documents(dir.file("d.json"), CorpusFormat::auto_detect, nullptr, "body"), (D{"four"}));
  // --format jsonl reads every file as JSONL; --format text none.
  EXPECT_ERROR_HAS(read_documents(dir.path().string(), CorpusFormat::jsonl), "c.txt", "line 1", "is not JSON");
  EXPECT_EQ(read_documents(dir.file("a.jsonl"), CorpusFormat::text).size(), 1u);
  EXPECT_EQ(parse_corpus_format("jsonl"), CorpusFormat::jsonl);
}

TEST(Corpus, GzipFilesAreReadDecompressed) {
  test::TempDir dir;
  const std::string jsonl = "{\"text\": \"zipped one\"}\n{\"text\": \"zipped two\"}\n";
  write_file_atomic(dir.file("part.jsonl.gz"), test::gzip_compress(jsonl));
  write_file_atomic(dir.file("jokes.gz"), test::gzip_compress("joke 1\n%\njoke 2\n%\njoke 3\n"));
  // Two members, as `cat a.gz b.gz` makes: zcat reads both.
  write_file_atomic(dir.file("story.txt.gz"), test::gzip_compress("Once upon ") + test::gzip_compress("a time.\n"));
  CorpusInfo info;
  EXPECT_EQ(read_documents(dir.path().string(), CorpusFormat::auto_detect, &info),
            (D{"joke 1", "joke 2", "joke 3", "zipped one", "zipped two", "Once upon a time.\n"}));
  EXPECT_EQ(info.gzip_files, 3);
  EXPECT_EQ(info.describe(), "jsonl (2 records) + fortunes (3 records) + text (1 file), 3 gzip-compressed");
  EXPECT_TRUE(is_gzip_file(dir.file("jokes.gz")));
  EXPECT_FALSE(is_gzip_file(dir.file("nowhere")));
  // Damaged: truncated, and a flipped byte in the deflate stream.
  const std::string packed = test::gzip_compress(std::string(5000, 'x') + "the end\n");
  write_file_atomic(dir.file("cut.gz"), packed.substr(0, packed.size() / 2));
  EXPECT_ERROR_HAS(read_gzip_file(dir.file("cut.gz")), "cut.gz", "damaged", "ends early", "gzip -t");
  std::string flipped = packed;
  flipped[flipped.size() - 3] ^= 0x55;  // the trailer's length: the check zlib makes last
  write_file_atomic(dir.file("bad.gz"), flipped);
  EXPECT_ERROR_HAS(read_gzip_file(dir.file("bad.gz")), "bad.gz", "damaged", "bytes");
}

TEST(Corpus, Errors) {
  test::TempDir dir;
  EXPECT_ERROR_HAS(read_documents(dir.file("nowhere")), "nowhere", "does not exist");
  write_file_atomic(dir.file("blank.txt"), " \n\n");
  EXPECT_ERROR_HAS(read_documents(dir.file("blank.txt")), "blank.txt", "no text");
  test::TempDir empty;
  EXPECT_ERROR_HAS(read_documents(empty.path().string()), "no text");
}

}  // namespace
}  // namespace gpumix::data
