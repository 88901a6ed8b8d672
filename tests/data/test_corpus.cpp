// Corpus reading: fortunes records, overstrikes, folders, plain files, errors.
#include <filesystem>
#include <fstream>

#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/file_util.h"
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
