// The BPE tokenizer: pre-tokenizer, training (incremental vs naive), round trips on any
// bytes, the special token, save/load and the content hash.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/file_util.h"
#include "test_util.h"

namespace gpumix::data {
namespace {

using test::tiny_corpus;

std::vector<std::string> pieces_of(std::string_view text, Pretokenizer kind) {
  std::vector<std::string> out;
  for (const auto& p : pretokenize(text, kind)) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

constexpr Pretokenizer both_pretokenizers[] = {Pretokenizer::gpt2, Pretokenizer::gpumix_v1};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tok = Tokenizer::train(tiny_corpus(), 512);
  return tok;
}

using V = std::vector<std::string>;

TEST(Pretokenize, WordsTakeOneLeadingSpace) {
  for (const Pretokenizer kind : both_pretokenizers) {
    SCOPED_TRACE(pretokenizer_name(kind));
    EXPECT_EQ(pieces_of("Hello world", kind), (V{"Hello", " world"}));
    EXPECT_EQ(pieces_of("abc123def", kind), (V{"abc", "123", "def"}));
    EXPECT_EQ(pieces_of("x = 3.14!", kind), (V{"x", " =", " 3", ".", "14", "!"}));
    EXPECT_EQ(pieces_of("(about 49%)", kind), (V{"(", "about", " 49", "%)"}));
  }
}

TEST(Pretokenize, Contractions) {
  for (const Pretokenizer kind : both_pretokenizers) {
    SCOPED_TRACE(pretokenizer_name(kind));
    EXPECT_EQ(pieces_of("don't", kind), (V{"don", "'t"}));
    EXPECT_EQ(pieces_of("we'll they've you're I'm he'd it's", kind),
              (V{"we", "'ll", " they", "'ve", " you", "'re", " I", "'m", " he", "'d", " it", "'s"}));
    EXPECT_EQ(pieces_of("rock'n'roll", kind), (V{"rock", "'", "n", "'", "roll"}));
    EXPECT_EQ(pieces_of("DON'T", kind), (V{"DON", "'", "T"}));  // case-sensitive, as GPT-2
  }
}

TEST(Pretokenize, WhitespaceRunsLeaveTheirLastSpace) {
  for (const Pretokenizer kind : both_pretokenizers) {
    SCOPED_TRACE(pretokenizer_name(kind));
    EXPECT_EQ(pieces_of("a  b", kind), (V{"a", " ", " b"}));
    EXPECT_EQ(pieces_of("a    b", kind), (V{"a", "   ", " b"}));
    EXPECT_EQ(pieces_of("a\n\nb", kind), (V{"a", "\n", "\n", "b"}));
    EXPECT_EQ(pieces_of("a \n b", kind), (V{"a", " \n", " b"}));
    EXPECT_EQ(pieces_of("end  ", kind), (V{"end", "  "}));
    EXPECT_EQ(pieces_of("  hi", kind), (V{" ", " hi"}));
    EXPECT_EQ(pieces_of("\tx", kind), (V{"\t", "x"}));
  }
}

TEST(Pretokenize, V1CountsHighBytesAsLetters) {
  const auto v1 = Pretokenizer::gpumix_v1;
  EXPECT_EQ(pieces_of("caf\xc3\xa9 na\xc3\xafve", v1), (V{"caf\xc3\xa9", " na\xc3\xafve"}));
  EXPECT_EQ(pieces_of("\xff\xfe!", v1), (V{"\xff\xfe", "!"}));
  EXPECT_EQ(pieces_of("x\xe2\x80\x94y", v1), (V{"x\xe2\x80\x94y"}));  // an em dash is a "letter"
}

TEST(Pretokenize, Gpt2UsesUnicodeClasses) {
  const auto g = Pretokenizer::gpt2;
  EXPECT_EQ(pieces_of("caf\xc3\xa9 na\xc3\xafve", g), (V{"caf\xc3\xa9", " na\xc3\xafve"}));  // letters
  EXPECT_EQ(pieces_of("a \xe2\x80\x94 b", g), (V{"a", " \xe2\x80\x94", " b"}));        // punctuation
  EXPECT_EQ(pieces_of("x\xe2\x80\x94y", g), (V{"x", "\xe2\x80\x94", "y"}));
  EXPECT_EQ(pieces_of("\xd9\xa3\xd9\xa4 \xc2\xb2", g), (V{"\xd9\xa3\xd9\xa4", " \xc2\xb2"}));  // Arabic-Indic digits, superscript two
  EXPECT_EQ(pieces_of("hi \xf0\x9f\x98\x80!", g), (V{"hi", " \xf0\x9f\x98\x80!"}));  // an emoji is not a letter
  EXPECT_EQ(pieces_of("a\xc2\xa0\xc2\xa0" "b", g), (V{"a", "\xc2\xa0", "\xc2\xa0", "b"}));  // NBSP is a space...
  EXPECT_EQ(pieces_of("a\xc2\xa0\xc2\xa0", g), (V{"a", "\xc2\xa0\xc2\xa0"}));
  // ... but only ' ' is the optional leading space of a word.
  EXPECT_EQ(pieces_of("a\xe3\x80\x80" "b", g), (V{"a", "\xe3\x80\x80", "b"}));
}

TEST(Pretokenize, Gpt2KeepsInvalidUtf8AsPiecesOfTheirOwn) {
  const auto g = Pretokenizer::gpt2;
  EXPECT_EQ(pieces_of("ab\xff\xfe" "cd", g), (V{"ab", "\xff\xfe", "cd"}));
  EXPECT_EQ(pieces_of("\xc3 x", g), (V{"\xc3", " x"}));
  EXPECT_EQ(pieces_of("x\x80", g), (V{"x", "\x80"}));
}

TEST(Pretokenize, PiecesCoverAnyBytes) {
  for (const Pretokenizer kind : both_pretokenizers) {
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const std::string s = random_bytes(1000 + seed, seed);
      std::string joined;
      for (const auto& p : pieces_of(s, kind)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, s) << pretokenizer_name(kind);
    }
  }
}

TEST(Pretokenize, ChunkCutsDoNotChangePieces) {
  // Unicode spaces before ' ' (U+00A0, U+3000) must not be cut after: to gpt2 they are spaces.
  std::string text = tiny_corpus() + random_bytes(3000, 7) + "  \n  x y\n\n z";
  for (int i = 0; i < 200; ++i) text += i % 2 ? "a\xc2\xa0 \n b" : "c\xe3\x80\x80 \n d ";
  for (const Pretokenizer kind : both_pretokenizers) {
    const auto whole = pieces_of(text, kind);
    for (int n : {2, 3, 8, 64, 500}) {
      std::vector<std::string> joined;
      size_t begin = 0;
      auto cuts = chunk_cuts(text, n);
      EXPECT_LE(cuts.size(), static_cast<size_t>(n - 1));
      cuts.push_back(text.size());
      for (size_t cut : cuts) {
        ASSERT_GT(cut, begin);
        for (auto& p : pieces_of(std::string_view(text).substr(begin, cut - begin), kind)) joined.push_back(p);
        begin = cut;
      }
      EXPECT_EQ(joined, whole) << pretokenizer_name(kind) << ", n = " << n;
    }
  }
}

TEST(Train, IncrementalEqualsNaive) {
  for (int vocab : {300, 600, 1024}) {
    const Tokenizer fast = Tokenizer::train(tiny_corpus(), vocab);
    const Tokenizer naive = Tokenizer::train_naive(tiny_corpus(), vocab);
    EXPECT_EQ(fast.merges(), naive.merges()) << "vocab " << vocab;
    // 40 KB of text runs out of pairs a little before 1024.
    EXPECT_LE(fast.vocab_size(), vocab);
    EXPECT_GE(fast.vocab_size(), std::min(vocab, 1000));
  }
}

TEST(Train, IncrementalEqualsNaiveOnOddText) {
  // Repeated bytes exercise overlapping pairs ("aaaa"), and random bytes ties everywhere.
  const std::string text = "aaaa aaa aa a bbbbbbbb abababab aaabbb " + random_bytes(4000, 3) +
                           "<|endoftext|>aaaa" + std::string(300, '-');
  const Tokenizer fast = Tokenizer::train(text, 700);
  const Tokenizer naive = Tokenizer::train_naive(text, 700);
  EXPECT_EQ(fast.merges(), naive.merges());
}

TEST(Train, FirstMergesAreCommonPairs) {
  // The most frequent pair of the tiny corpus wins the first merge.
  const auto& m = tiny_tokenizer().merges();
  ASSERT_GE(m.size(), 2u);
  EXPECT_EQ(tiny_tokenizer().token_bytes(256), "he");
  EXPECT_EQ(tiny_tokenizer().token_bytes(257), " t");
}

TEST(Train, IsDeterministic) {
  const Tokenizer a = Tokenizer::train(tiny_corpus(), 512);
  const Tokenizer b = Tokenizer::train(tiny_corpus(), 512);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(a.hash(), b.hash());
  const Tokenizer c = Tokenizer::train(tiny_corpus(), 511);
  EXPECT_NE(a.hash(), c.hash());
}

TEST(Train, StopsEarlyWhenNothingIsLeftToMerge) {
  const Tokenizer t = Tokenizer::train("ab ab ab", 1000);
  // "ab" (x3), then " ab" + nothing else: ' ' + "ab" merges once more.
  EXPECT_EQ(t.num_merges(), 2);
  EXPECT_EQ(t.vocab_size(), 256 + 2 + 1);
}

TEST(Train, NeverMergesAcrossPreTokensOrTheSpecialToken) {
  const Tokenizer t = Tokenizer::train("abc.abc.<|endoftext|>abc.abc.", 400);
  for (int id = 256; id < t.eot_id(); ++id) {
    const std::string& s = t.token_bytes(id);
    EXPECT_FALSE(s.find('.') != std::string::npos && s.find('c') != std::string::npos) << s;
    EXPECT_EQ(s.find('<'), std::string::npos) << s;
  }
}

TEST(Train, RejectsTooSmallVocabulary) {
  EXPECT_ERROR_HAS(Tokenizer::train("hello", 100), "100", "257");
}

TEST(Encode, RoundTripsTheCorpus) {
  const auto& tok = tiny_tokenizer();
  const auto ids = tok.encode(tiny_corpus());
  EXPECT_EQ(tok.decode(ids), tiny_corpus());
  const double bytes_per_token = static_cast<double>(tiny_corpus().size()) / ids.size();
  EXPECT_GT(bytes_per_token, 2.4);  // 255 merges on 40 KB of repetitive English
}

TEST(Encode, RoundTripsAnyBytes) {
  const auto& tok = tiny_tokenizer();
  const std::vector<std::string> cases = {
      "",
      " ",
      "\n",
      "a",
      std::string(1, '\0'),
      "\xff\xfe\xfd invalid \xc3 UTF-8 \x80\x80",
      "caf\xc3\xa9 na\xc3\xafve Zo\xc3\xab",
      std::string(20000, '-'),  // one long pre-token: the heap merge path
      std::string(5000, ' ') + "x",
      random_bytes(5000, 11),
  };
  for (const auto& s : cases) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << "length " << s.size();
    EXPECT_EQ(tok.decode(tok.encode(s, false)), s);
  }
}

TEST(Encode, RoundTripsLargeRandomTextInParallelChunks) {
  // Over 1 MB: encoded in parallel chunks; must equal the piece-by-piece result.
  const auto& tok = tiny_tokenizer();
  std::string text;
  while (text.size() < (3u << 19)) text += tiny_corpus() + random_bytes(997, static_cast<uint32_t>(text.size()));
  const auto ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  std::vector<int32_t> serial;
  for (const auto& p : pretokenize(text, tok.pretokenizer())) tok.encode_piece(std::string_view(text).substr(p.begin, p.end - p.begin), serial);
  EXPECT_EQ(ids, serial);
}

TEST(Encode, EmptyGivesNoTokens) { EXPECT_TRUE(tiny_tokenizer().encode("").empty()); }

TEST(Encode, SpecialTokenInsideText) {
  const auto& tok = tiny_tokenizer();
  const std::string text = "first<|endoftext|>second <|endoftext|><|endoftext|> third<|endoftext";
  const auto ids = tok.encode(text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eot_id()), 3);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(ids.front(), tok.encode("first").front());
  // Without allow_special the same text is plain bytes.
  const auto plain = tok.encode(text, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), tok.eot_id()), 0);
  EXPECT_EQ(tok.decode(plain), text);
  const std::vector<int32_t> only = {tok.eot_id()};
  EXPECT_EQ(tok.encode("<|endoftext|>"), only);
}

TEST(Encode, TrainingWordsUseTheirMerges) {
  // A frequent word of the corpus becomes one token.
  const auto& tok = tiny_tokenizer();
  EXPECT_EQ(tok.encode(" the").size(), 1u);
  EXPECT_EQ(tok.encode(" the the the").size(), 3u);
}

TEST(Encode, ByteTokenizerIsIdentity) {
  const Tokenizer bytes;
  EXPECT_EQ(bytes.vocab_size(), 257);
  EXPECT_EQ(bytes.eot_id(), 256);
  const auto ids = bytes.encode("hi!");
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 'i', '!'}));
}

TEST(Decode, RejectsUnknownIds) {
  const auto& tok = tiny_tokenizer();
  const std::vector<int32_t> ids = {1, 2, 512};
  EXPECT_ERROR_HAS(tok.decode(ids), "512", "position 2", "512 ids");
  const std::vector<int32_t> neg = {-1};
  EXPECT_ERROR_HAS(tok.decode(neg), "-1");
}

TEST(SaveLoad, RoundTripsAndKeepsTheHash) {
  test::TempDir dir;
  const auto& tok = tiny_tokenizer();
  const std::string path = dir.file("tok.bpe");
  tok.save(path);
  const Tokenizer back = Tokenizer::load(path);
  EXPECT_EQ(back.merges(), tok.merges());
  EXPECT_EQ(back.hash(), tok.hash());
  EXPECT_EQ(back.encode(tiny_corpus()), tok.encode(tiny_corpus()));
  back.save(dir.file("again.bpe"));
  EXPECT_EQ(read_file(dir.file("again.bpe")), read_file(path));  // byte-identical
}

TEST(SaveLoad, HashIsStable) {
  // Pinned values: a change means every saved tokenizer and checkpoint changes identity.
  // Version 1's (gpumix-v1, canonical ids) are those of the files written before version 2.
  const auto v1 = Pretokenizer::gpumix_v1;
  const std::vector<Tokenizer::Pair> merges = {{'a', 'b'}, {256, 'c'}, {' ', 257}};
  EXPECT_EQ(Tokenizer({}, v1).hash(), 0xff9a7f62adbbf381ull);
  EXPECT_EQ(Tokenizer(merges, v1).hash(), 0x9501da1534add26dull);
  EXPECT_EQ(Tokenizer().hash(), 0x15bad2e5aa8c5d10ull);
  EXPECT_EQ(Tokenizer(merges).hash(), 0xe87136552daba9a4ull);
  std::vector<int32_t> reversed(260);
  for (int32_t c = 0; c < 260; ++c) reversed[c] = 259 - c;
  EXPECT_EQ(Tokenizer(merges, Pretokenizer::gpt2, reversed).hash(), 0x799fdd0af41038a8ull);
}

TEST(SaveLoad, Version1FilesLoadAsBefore) {
  // A file written before version 2 existed: the gpumix-v1 pre-tokenizer, its hash, and
  // saved again byte for byte.
  test::TempDir dir;
  const std::string v1_file =
      "gpumix-bpe-tokenizer 1\nvocab_size 260\nmerges 3\nspecial <|endoftext|> 259\nhash 9501da1534add26d\n"
      "97 98\n256 99\n32 257\n";
  write_file_atomic(dir.file("v1.bpe"), v1_file);
  const Tokenizer tok = Tokenizer::load(dir.file("v1.bpe"));
  EXPECT_EQ(tok.pretokenizer(), Pretokenizer::gpumix_v1);
  EXPECT_EQ(tok.hash(), 0x9501da1534add26dull);
  tok.save(dir.file("again.bpe"));
  EXPECT_EQ(read_file(dir.file("again.bpe")), v1_file);
}

TEST(SaveLoad, Version2KeepsThePretokenizerAndTheIdMap) {
  test::TempDir dir;
  const std::vector<Tokenizer::Pair> merges = {{'a', 'b'}, {256, 'c'}, {' ', 257}};
  std::vector<int32_t> reversed(260);
  for (int32_t c = 0; c < 260; ++c) reversed[c] = 259 - c;
  const Tokenizer tok(merges, Pretokenizer::gpt2, reversed);
  EXPECT_EQ(tok.eot_id(), 0);
  EXPECT_EQ(tok.encode(" abc"), (std::vector<int32_t>{259 - 258}));
  EXPECT_EQ(tok.encode("a<|endoftext|>"), (std::vector<int32_t>{259 - 'a', 0}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{259 - 258, 0, 259 - 'z'}), " abc<|endoftext|>z");
  EXPECT_EQ(tok.token_bytes(259 - 257), "abc");
  tok.save(dir.file("mapped.bpe"));
  const Tokenizer back = Tokenizer::load(dir.file("mapped.bpe"));
  EXPECT_EQ(back.hash(), tok.hash());
  EXPECT_TRUE(back.ids_mapped());
  EXPECT_EQ(back.encode(tiny_corpus()), tok.encode(tiny_corpus()));
  EXPECT_NE(Tokenizer(merges).hash(), tok.hash());
  EXPECT_NE(Tokenizer(merges, Pretokenizer::gpumix_v1).hash(), Tokenizer(merges).hash());

  const std::string good = read_file(dir.file("mapped.bpe"));
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    write_file_atomic(dir.file("bad.bpe"), s);
    return dir.file("bad.bpe");
  };
  EXPECT_ERROR_HAS(Tokenizer::load(edited("pretokenizer gpt2", "pretokenizer bert")), "bad.bpe", "line 5",
                   "pretokenizer <gpt2 or gpumix-v1>");
  EXPECT_ERROR_HAS(Tokenizer::load(edited("ids mapped", "ids maybe")), "line 6", "ids <canonical or mapped>");
  EXPECT_ERROR_HAS(Tokenizer::load(edited("special <|endoftext|> 0", "special <|endoftext|> 7")), "line 4",
                   "special token's id 7");
  EXPECT_ERROR_HAS(Tokenizer::load(edited("\n259\n258\n", "\n259\n259\n")), "line 12", "id of token 1");
  write_file_atomic(dir.file("short.bpe"), good.substr(0, good.size() - 4));
  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("short.bpe")), "short.bpe", "ends early", "an id line");
}

TEST(SaveLoad, BadFilesNameTheFileAndTheProblem) {
  test::TempDir dir;
  Tokenizer({{'a', 'b'}, {256, 'c'}}, Pretokenizer::gpumix_v1).save(dir.file("good.bpe"));
  const std::string good = read_file(dir.file("good.bpe"));

  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("missing.bpe")), "missing.bpe");

  write_file_atomic(dir.file("magic.bpe"), "hello world\n");
  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("magic.bpe")), "magic.bpe", "not a GPUMix tokenizer",
                   "gpumix tokenizer train");

  std::string v2 = good;
  v2.replace(v2.find(" 1\n"), 3, " 9\n");
  write_file_atomic(dir.file("v9.bpe"), v2);
  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("v9.bpe")), "v9.bpe", "version 9");

  write_file_atomic(dir.file("short.bpe"), good.substr(0, good.rfind("256 99")));
  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("short.bpe")), "short.bpe", "ends early");

  std::string edited = good;
  edited.replace(edited.rfind("256 99"), 6, "256 98");
  write_file_atomic(dir.file("edited.bpe"), edited);
  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("edited.bpe")), "edited.bpe", "hash");

  std::string forward = good;
  forward.replace(forward.rfind("256 99"), 6, "300 99");
  write_file_atomic(dir.file("forward.bpe"), forward);
  EXPECT_ERROR_HAS(Tokenizer::load(dir.file("forward.bpe")), "forward.bpe", "line 7", "300");
}

TEST(Timing, FortunesIfInstalled) {
  // Not an assertion (timings live in bench/): prints the training time and compression
  // on the fortunes corpus when the package is installed.
  const char* dir = "/usr/share/games/fortunes";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "fortunes not installed";
  const std::string text = read_corpus(dir);
  for (int vocab : {4096, 8192}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tokenizer tok = Tokenizer::train(text, vocab);
    const auto t1 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text);
    const auto t2 = std::chrono::steady_clock::now();
    const auto s = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("fortunes: %zu bytes, vocab %d: train %.3f s, encode %.3f s, %.3f bytes/token\n", text.size(),
                vocab, s(t0, t1), s(t1, t2), static_cast<double>(text.size()) / ids.size());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

}  // namespace
}  // namespace gpumix::data

// ---- regressions found by tests/fuzz/fuzz_tokenizer ---------------------------------------
namespace gpumix::data {
namespace {

// A merge count near INT64_MAX overflowed 256 + m + 1 (undefined behaviour), and a huge one
// that matched its vocab_size line reserved room for m merges before reading any: both are
// now a line-numbered format error.
TEST(TokenizerFuzzRegression, HugeMergeCountsAreRejected) {
  test::TempDir t;
  const std::string path = t.file("tok.bpe");
  for (const char* counts : {"vocab_size -9223372036854775808\nmerges 9223372036854775807\n",
                             "vocab_size 1000000000257\nmerges 1000000000000\n"}) {
    write_file_atomic(path, std::string("gpumix-bpe-tokenizer 1\n") + counts +
                                "special <|endoftext|> 256\nhash 0000000000000000\n");
    const std::string e = test::error_of([&] { Tokenizer::load(path); });
    EXPECT_NE(e.find("line 3"), std::string::npos) << e;
    EXPECT_NE(e.find("does not equal 256 + merges"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace gpumix::data
