// End-to-end tests of the gpumix program: `gpumix train` and `gpumix generate` on a tiny
// GPT (L=2, C=32, T=16, a 512-token BPE of tests/data/tiny_corpus.txt), run as a child
// process. Bad input must end with a non-zero exit, a message that names the problem (the
// file, the numbers) and the fix, and nothing half written: no new checkpoint, and the
// previous checkpoint still verifies. Resume must be bitwise exact; generation must
// continue the prompt and be deterministic at temperature 0.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime.h"
#include "nn/checkpoint.h"
#include "nn/data/loader.h"
#include "nn/data/shards.h"
#include "nn/gpt_config.h"
#include "../data/gzip_test_util.h"
#include "../nn/choices_test_file.h"
#include "run_gpumix.h"

namespace {

namespace fs = std::filesystem;

const std::string kGpumix = GPUMIX_EXE;
const std::string kCorpus = std::string(GPUMIX_TESTS_DATA_DIR) + "/tiny_corpus.txt";

using gpumix::test::gpumix;
using gpumix::test::quote;
using gpumix::test::read_file;
using gpumix::test::Result;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string show(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stderr:\n" + r.err + "--- stdout (tail):\n" +
         (r.out.size() > 2000 ? r.out.substr(r.out.size() - 2000) : r.out);
}

// A program (found on the PATH) started in the background with one OpenMP thread, its
// output to scratch/background.out.
pid_t start_program(std::vector<std::string> argv_text, const std::string& scratch) {
  const std::string out = scratch + "/background.out";
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("OMP_NUM_THREADS", "1", 1);
    if (!freopen(out.c_str(), "w", stdout) || !freopen(out.c_str(), "a", stderr)) _exit(127);
    std::vector<char*> argv;
    for (std::string& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// `gpumix <args>` started in the background.
pid_t start_gpumix(const std::vector<std::string>& args, const std::string& scratch) {
  std::vector<std::string> argv_text = {kGpumix};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  return start_program(argv_text, scratch);
}

// Waits until `pred` holds (polling every 2 ms), at most `seconds`.
bool wait_for(const std::function<bool()>& pred, double seconds) {
  for (int i = 0; i < seconds * 500; ++i) {
    if (pred()) return true;
    usleep(2000);
  }
  return pred();
}

// The steps of a run's log lines, in the order written.
std::vector<int> log_steps(const std::string& run) {
  std::vector<int> steps;
  std::ifstream in(run + "/log.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("final")) steps.push_back(j.at("step").get<int>());
  }
  return steps;
}

// The last line of a run's log (the run's result: "final"), or null when there is none.
nlohmann::json log_final(const std::string& run) {
  std::ifstream in(run + "/log.jsonl");
  std::string line;
  nlohmann::json final_line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("final")) final_line = std::move(j);
  }
  return final_line;
}

// An environment variable set for a scope (the gpumix processes a test starts inherit it),
// then put back as it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) before_ = v;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (before_) setenv(name_, before_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

// Expects a clear failure: exit 1 and every part in stderr.
void expect_failure(const Result& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.code, 1) << show(r);
  for (const std::string& part : parts)
    EXPECT_NE(r.err.find(part), std::string::npos) << "stderr lacks '" << part << "'\n" << show(r);
}

// The loss field of every step line of a log, as the JSON text wrote it.
std::vector<std::string> log_losses(const std::string& run, int first_step = 1) {
  std::vector<std::string> losses;
  std::ifstream in(run + "/log.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("final") || j.at("step").get<int>() < first_step) continue;
    losses.push_back(j.at("loss").dump());
  }
  return losses;
}

// One run folder and the data, made once: a tokenizer and token file from the tiny corpus
// (through `gpumix tokenizer`), and a 6-step run with checkpoints at steps 3 and 6.
class Tools : public ::testing::Test {
 protected:
  static std::string dir_;

  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("gpumix_test_tools_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Result r = gpumix({"tokenizer", "train", "--data", kCorpus, "--vocab", "512", "--out", tokenizer()}, dir_);
    ASSERT_EQ(r.code, 0) << show(r);
    r = gpumix({"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", kCorpus, "--out", tokens()}, dir_);
    ASSERT_EQ(r.code, 0) << show(r);
    // The run folder gets a copy of --tokenizer (generate and export look for it there).
    r = gpumix(train_args(base(), {"--ckpt-interval", "3"}), dir_);
    ASSERT_EQ(r.code, 0) << show(r);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string tokenizer() { return dir_ + "/tiny.bpe"; }
  static std::string tokens() { return dir_ + "/tiny.tok"; }
  static std::string base() { return dir_ + "/base"; }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }

  // `train` with the tiny model's flags, 6 steps, and `extra` flags (pairs of flag and value).
  static std::vector<std::string> train_args(const std::string& out, std::vector<std::string> extra = {},
                                             const std::string& data = "") {
    std::vector<std::string> args = {"train", "--data", data.empty() ? tokens() : data, "--tokenizer", tokenizer(),
                                     "--model", "gpt-nano", "--layers", "2", "--channels", "32", "--seq", "16",
                                     "--batch", "4", "--steps", "6", "--lr", "3e-3", "--warmup", "2",
                                     "--eval-interval", "0", "--eval-windows", "4", "--seed", "11",
                                     "--threads", "1", "--quiet", "--out", out};
    // CLI11 takes each option once: a flag in `extra` replaces the default's value.
    for (size_t i = 0; i < extra.size(); ++i) {
      const bool has_value = i + 1 < extra.size() && extra[i + 1].rfind("--", 0) != 0;
      auto it = std::find(args.begin(), args.end(), extra[i]);
      if (it != args.end() && has_value) {
        *(it + 1) = extra[++i];
        continue;
      }
      args.push_back(extra[i]);
      if (has_value) args.push_back(extra[++i]);
    }
    return args;
  }

  // No checkpoint and no log lines were written into `out`.
  static void expect_nothing_written(const std::string& out) {
    if (!fs::exists(out)) return;
    const gpumix::CheckpointScan scan = gpumix::scan_checkpoints(out);
    EXPECT_TRUE(scan.complete.empty()) << out << " holds " << scan.complete[0];
    EXPECT_TRUE(scan.leftovers.empty()) << out << " holds " << scan.leftovers[0];
    EXPECT_TRUE(log_losses(out).empty()) << out << "/log.jsonl has step lines";
  }

  // The base run is as SetUpTestSuite left it.
  static void expect_base_intact() {
    const gpumix::CheckpointScan scan = gpumix::scan_checkpoints(base());
    ASSERT_EQ(scan.steps, (std::vector<int64_t>{3, 6}));
    EXPECT_EQ(scan.latest_name, "ckpt-000006");
    EXPECT_TRUE(scan.leftovers.empty());
    for (const std::string& c : scan.complete)
      EXPECT_NO_THROW(gpumix::CheckpointReader(base() + "/" + c).verify()) << c;
    EXPECT_EQ(log_losses(base()).size(), 6u);
  }
};
std::string Tools::dir_;

// ---- train: bad input ---------------------------------------------------------------------

TEST_F(Tools, MissingCorpus) {
  const std::string out = path("missing");
  const Result r = gpumix(train_args(out, {}, path("no_such_corpus.txt")), dir_);
  expect_failure(r, {"no_such_corpus.txt", "does not exist", "--data"});
  expect_nothing_written(out);
}

TEST_F(Tools, EmptyCorpus) {
  const std::string corpus = path("empty.txt"), out = path("empty");
  write_file(corpus, "");
  const Result r = gpumix(train_args(out, {}, corpus), dir_);
  expect_failure(r, {"empty.txt", "empty"});
  expect_nothing_written(out);
}

TEST_F(Tools, CorpusSmallerThanOneWindow) {
  const std::string corpus = path("small.txt"), out = path("small");
  write_file(corpus, "A few words, far fewer than two windows of sixteen tokens.\n");
  const Result r = gpumix(train_args(out, {}, corpus), dir_);
  expect_failure(r, {"T + 1 = 17", "larger corpus", "--seq"});
  expect_nothing_written(out);
}

TEST_F(Tools, TokenFileWithAWrongMagic) {
  std::string bytes = read_file(tokens());
  ASSERT_GT(bytes.size(), 64u);
  bytes[0] = 'X';  // "XPMXTOK\0": otherwise a valid file
  const std::string file = path("wrong_magic.tok"), out = path("wrong_magic");
  write_file(file, bytes);
  const Result r = gpumix(train_args(out, {}, file), dir_);
  expect_failure(r, {"wrong_magic.tok", "token file"});
  expect_nothing_written(out);
}

TEST_F(Tools, TokenFileWithATruncatedBody) {
  const std::string bytes = read_file(tokens());
  const std::string file = path("truncated.tok"), out = path("truncated");
  write_file(file, bytes.substr(0, bytes.size() - 3));  // mid-token
  const Result r = gpumix(train_args(out, {}, file), dir_);
  expect_failure(r, {"truncated.tok", std::to_string(bytes.size() - 3)});
  expect_nothing_written(out);
}

TEST_F(Tools, CheckpointOfAnotherModelShape) {
  const std::string out = path("other_shape");
  const Result r = gpumix(train_args(out, {"--layers", "3", "--resume", base() + "/ckpt-000003"}), dir_);
  expect_failure(r, {"ckpt-000003", "L: 2 vs 3", "start a new run"});
  expect_nothing_written(out);
  expect_base_intact();
}

TEST_F(Tools, CorruptedCheckpoint) {
  // A copy of the base run's step-3 checkpoint with one byte of master.bin flipped.
  const std::string copy = path("corrupt_src/ckpt-000003"), out = path("corrupt");
  fs::create_directories(path("corrupt_src"));
  fs::copy(base() + "/ckpt-000003", copy, fs::copy_options::recursive);
  std::fstream f(copy + "/master.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(1000);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(1000);
  f.write(&c, 1);
  f.close();
  const Result r = gpumix(train_args(out, {"--resume", copy}), dir_);
  expect_failure(r, {"master.bin"});
  EXPECT_TRUE(r.err.find("checksum") != std::string::npos || r.err.find("hash") != std::string::npos ||
              r.err.find("XXH64") != std::string::npos)
      << show(r);
  expect_nothing_written(out);
  EXPECT_THROW(gpumix::CheckpointReader(copy).verify(), gpumix::CheckpointError);
  expect_base_intact();
}

TEST_F(Tools, UnknownPreset) {
  const std::string out = path("preset");
  const Result r = gpumix(train_args(out, {"--model", "gpt-enormous"}), dir_);
  expect_failure(r, {"unknown model preset 'gpt-enormous'", "gpt-nano", "gpt2"});
  expect_nothing_written(out);
}

TEST_F(Tools, BatchThatDoesNotFitTheDeviceMemory) {
  // The model's state (~42k parameters, 16 bytes each) fits in 1 MiB; 64 x 16 tokens of
  // activations and logits do not.
  const std::string out = path("oom");
  const Result r = gpumix(train_args(out, {"--batch", "64", "--device-memory", "1MiB"}), dir_);
  expect_failure(r, {"out of memory", "1.00 MiB", "smaller batch"});
  expect_nothing_written(out);
}

TEST_F(Tools, ExistingRunFolderWithoutResume) {
  const std::string log_before = read_file(base() + "/log.jsonl");
  const Result r = gpumix(train_args(base()), dir_);
  // A user's mistake on one rank: the message alone, without a collective's wrapper or a
  // source location.
  EXPECT_EQ(r.err, "gpumix train: error: run folder " + base() + " already holds a run (" + base() +
                       "/log.jsonl); continue it with --resume " + base() + ", or pass another --out\n")
      << show(r);
  EXPECT_EQ(read_file(base() + "/log.jsonl"), log_before);
  expect_base_intact();
}

// Whether this gpumix runs under mpirun (built with MPI, and mpirun on the PATH: a build
// with -Dmpi=disabled treats every process as a rank 0), and how the tests start it (as
// root in CI, on 2 cores).
bool have_mpirun() {
#if defined(GPUMIX_HAVE_MPI)
  return std::system("command -v mpirun >/dev/null 2>&1") == 0;
#else
  return false;
#endif
}
const char* const kMpirun =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np 3";

TEST_F(Tools, ExistingRunFolderIsOneSentenceOnAnyNumberOfRanks) {
  const std::string log_before = read_file(base() + "/log.jsonl");
  const std::string said = "gpumix train: error: run folder " + base() + " already holds a run (" + base() +
                           "/log.jsonl); continue it with --resume " + base() + ", or pass another --out\n";
  // Thread ranks: rank 0 checks the folder for all of them; no rank is named.
  const Result threads = gpumix(train_args(base(), {"--ranks", "3"}), dir_);
  EXPECT_EQ(threads.code, 1) << show(threads);
  EXPECT_EQ(threads.err, said) << show(threads);
  if (have_mpirun()) {
    // Under mpirun every rank fails together: said once (by rank 0), and no MPI_Abort.
    const Result mpi = gpumix(train_args(base()), dir_, kMpirun);
    EXPECT_NE(mpi.code, 0) << show(mpi);
    EXPECT_EQ(mpi.err.rfind(said, 0), 0u) << show(mpi);  // first; mpirun's own note may follow
    EXPECT_EQ(mpi.err.find("already holds", said.size()), std::string::npos) << show(mpi);
    EXPECT_EQ(mpi.err.find("aborts the MPI job"), std::string::npos) << show(mpi);
  }
  EXPECT_EQ(read_file(base() + "/log.jsonl"), log_before);
  expect_base_intact();
}

TEST_F(Tools, ARanksOwnDeviceIsNamed) {
  // Rank 1's device is too small for a micro-batch: its own failure, so the rank is named.
  const std::string out = path("rank_own");
  // Where it fails first depends on the machine (its default dtype, bf16 where the CPU has
  // avx512_bf16, and the profiled plan): the memory model's check ("200 KiB") or the
  // allocator's ("of 200.0 KiB capacity"). Either names the rank and its capacity.
  const Result r = gpumix(train_args(out, {"--devices", "cpu,cpu:mem=200KiB,cpu"}), dir_);
  expect_failure(r, {"rank 1: "});
  EXPECT_TRUE(r.err.find("200 KiB") != std::string::npos || r.err.find("of 200.0 KiB capacity") != std::string::npos)
      << show(r);
  expect_nothing_written(out);
}

TEST_F(Tools, CorpusFormatIsExplicitAndSaid) {
  // The tiny corpus with bare `%` lines among long paragraphs, as a LaTeX file has them:
  // auto reads it as text, as before the `%` lines were there.
  const std::string corpus = read_file(kCorpus);
  const std::string latex = path("latex.tex");
  write_file(latex, corpus.substr(0, corpus.size() / 2) + "\n%\n" + corpus.substr(corpus.size() / 2) + "\n%\n");
  Result r = gpumix(train_args(path("latex_auto"), {"--steps", "1"}, latex), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("| format "), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("text (--format auto)"), std::string::npos) << show(r);
  r = gpumix(train_args(path("latex_fortunes"), {"--steps", "1", "--format", "fortunes"}, latex), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("fortunes (2 records)"), std::string::npos) << show(r);
  r = gpumix(train_args(path("latex_bad"), {"--format", "latex"}, latex), dir_);
  expect_failure(r, {"--format latex", "auto", "text", "fortunes"});

  // Bytes that are mostly not UTF-8 (no NUL): a warning naming the share, or with --format
  // text an error.
  std::string noise;
  uint32_t x = 7;
  for (int i = 0; i < 6000; ++i) {
    x = x * 1103515245u + 12345u;
    noise += (char)(1 + (x >> 16) % 255);
  }
  const std::string bin = path("noise.bin");
  write_file(bin, noise);
  r = gpumix(train_args(path("noise_auto"), {"--steps", "1"}, bin), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("warning: corpus " + bin + " is mostly not text: "), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("% of its 6,000 bytes are not UTF-8"), std::string::npos) << show(r);
  const std::string out = path("noise_text");
  r = gpumix(train_args(out, {"--format", "text"}, bin), dir_);
  expect_failure(r, {"noise.bin", "mostly not text", "6,000 bytes are not UTF-8", "--format auto"});
  expect_nothing_written(out);
  // The tokenizer reads corpora alike.
  r = gpumix({"tokenizer", "train", "--data", bin, "--vocab", "300", "--format", "text", "--out", path("n.bpe")}, dir_);
  expect_failure(r, {"noise.bin", "mostly not text"});
  r = gpumix({"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", latex, "--out", path("latex.tok")}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("format     text (--format auto)"), std::string::npos) << show(r);
}

TEST_F(Tools, TrainsOnGzippedJsonlAsOnItsText) {
  // The tiny corpus as the one record of a gzip-compressed JSONL file: the base run's tokens,
  // so its losses and weights.
  const std::string corpus = read_file(kCorpus);
  const std::string jsonl = path("tiny.jsonl.gz");
  write_file(jsonl, gpumix::data::test::gzip_compress(nlohmann::json({{"id", 1}, {"text", corpus}}).dump() + "\n"));
  Result r = gpumix(train_args(path("jsonl"), {}, jsonl), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("jsonl (1 record), 1 gzip-compressed (--format auto)"), std::string::npos) << show(r);
  EXPECT_EQ(log_losses(path("jsonl")), log_losses(base()));
  EXPECT_TRUE(read_file(path("jsonl") + "/ckpt-000006/master.bin") == read_file(base() + "/ckpt-000006/master.bin"));
  // Records under another field, in a file that --format jsonl names as JSONL; the tokenizer
  // reads them alike.
  const std::string body = path("body.json");
  std::string lines;
  for (const char* part : {"First record.", "Second record, longer than the first.", "Third."})
    lines += nlohmann::json({{"body", std::string(part) + " " + corpus.substr(0, 400)}}).dump() + "\n";
  write_file(body, lines);
  r = gpumix(train_args(path("body"), {"--steps", "1", "--format", "jsonl", "--text-field", "body"}, body), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("| format              | jsonl (3 records) "), std::string::npos) << show(r);
  r = gpumix({"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", body, "--text-field", "body", "--out",
              path("body.tok")}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("format     jsonl (3 records) (--format auto)"), std::string::npos) << show(r);
  // The wrong field, a broken line, a damaged gzip file: named, before anything is written.
  const std::string out = path("jsonl_bad");
  expect_failure(gpumix(train_args(out, {"--format", "jsonl"}, body), dir_),
                 {"body.json", "line 1", "no field \"text\"", "\"body\" (string)", "--text-field"});
  write_file(path("broken.jsonl"), lines + "{\"body\": \"no end\n");
  expect_failure(gpumix(train_args(out, {"--text-field", "body"}, path("broken.jsonl")), dir_),
                 {"broken.jsonl", "line 4", "is not JSON"});
  const std::string packed = read_file(jsonl);
  write_file(path("cut.jsonl.gz"), packed.substr(0, packed.size() - 10));
  expect_failure(gpumix(train_args(out, {}, path("cut.jsonl.gz")), dir_), {"cut.jsonl.gz", "damaged", "gzip -t"});
  expect_nothing_written(out);
}

TEST_F(Tools, EncodeWritesLlmcShardsAlikeOnAnyThreadCount) {
  // The tiny corpus in shards of 1,000 tokens, on one thread and on two: the same bytes, and
  // a run on them is the base run (whose token file holds the same tokens).
  const auto encode = [&](const std::string& prefix, const std::string& threads) {
    return gpumix({"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", kCorpus, "--out", prefix,
                   "--shard-tokens", "1000", "--threads", threads, "--quiet"}, dir_);
  };
  Result r = encode(path("enc1/tiny"), "1");
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("on 1 thread ("), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("llm.c shards " + path("enc1/tiny") + "_000000.bin .. "), std::string::npos) << show(r);
  r = encode(path("enc2/tiny"), "2");
  ASSERT_EQ(r.code, 0) << show(r);
  std::vector<std::string> one, two;
  for (const auto& e : fs::directory_iterator(path("enc1"))) one.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(path("enc2"))) two.push_back(e.path().filename().string());
  std::sort(one.begin(), one.end());
  std::sort(two.begin(), two.end());
  ASSERT_EQ(one, two);
  ASSERT_GE(one.size(), 3u);
  for (const std::string& name : one)
    EXPECT_TRUE(read_file(path("enc1/" + name)) == read_file(path("enc2/" + name))) << name;
  EXPECT_EQ(fs::file_size(path("enc1/" + one[0])), 1024u + 2000u);
  r = gpumix(train_args(path("enc_run"), {"--vocab-size", "512"}, path("enc1/tiny") + "_*.bin"), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(log_losses(path("enc_run")), log_losses(base()));
  // Refused: shards already there (kept as they were), --shard-tokens with a .tok file, a
  // corpus that fails half-way (no shard left behind).
  const std::string before = read_file(path("enc1/" + one[0]));
  expect_failure(encode(path("enc1/tiny"), "1"), {"enc1/tiny_000000.bin", "already exist", "--out"});
  EXPECT_TRUE(read_file(path("enc1/" + one[0])) == before);
  expect_failure(gpumix({"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", kCorpus, "--out",
                         path("x.tok"), "--shard-tokens", "5"}, dir_),
                 {"--shard-tokens", "x.tok", "shard prefix"});
  const std::string mixed = path("enc_mixed");
  fs::create_directories(mixed);
  fs::copy_file(kCorpus, mixed + "/a.txt");
  write_file(mixed + "/b.jsonl", "{\"text\": \"one\"}\n{\"text\": 2}\n");
  expect_failure(gpumix({"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", mixed, "--out",
                         path("enc_bad/tiny"), "--shard-tokens", "100"}, dir_),
                 {"b.jsonl", "line 2", "is a number"});
  EXPECT_TRUE(fs::is_empty(path("enc_bad")));
}

// ---- token shards ---------------------------------------------------------------------------

// The validation loss over every window at the last step of a run's log, as JSON wrote it.
std::string full_val_loss(const std::string& run) {
  std::ifstream in(run + "/log.jsonl");
  std::string line, loss;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("val_full_loss")) loss = j.at("val_full_loss").dump();
  }
  return loss;
}

// The base run's tokens as llm.c shards of 29 to 61 tokens, uint16 and uint32 in turn (so
// that most windows of T + 1 = 17 tokens cross a shard's edge), and as nanoGPT's train.bin
// and val.bin: its training split as train_*.bin, its validation split as val_*.bin.
class Shards : public Tools {
 protected:
  static std::string shards() { return path("shards"); }

  static void SetUpTestSuite() {
    Tools::SetUpTestSuite();
    namespace data = gpumix::data;
    const std::vector<int32_t> ids = data::TokenFile(tokens()).tokens().to_vector();
    const data::Split split = data::split_train_val(data::TokenView(ids), 16, 0.05);  // as the base run split
    fs::create_directories(shards() + "/nanogpt");
    for (const auto& [prefix, t] : {std::pair{"train", split.train}, std::pair{"val", split.val}}) {
      for (size_t at = 0, i = 0; at < t.size(); ++i) {
        const size_t n = std::min(t.size() - at, 29 + (i * 13) % 33);
        data::write_llmc_shard(shards() + "/" + std::string(prefix) + "_" + std::to_string(1000 + i) + ".bin", t.slice(at, at + n),
                               i % 2 ? 4 : 2);
        at += n;
      }
      std::string raw;
      for (int32_t id : t.to_vector()) raw.append(reinterpret_cast<const char*>(&id), 2);  // uint16, little-endian
      write_file(shards() + "/nanogpt/" + std::string(prefix) + ".bin", raw);
    }
  }
};

TEST_F(Shards, TrainFromGlobsAsFromTheTokenFileAndResumeBitwise) {
  // The same tokens in the same order, cut into shards: the base run's losses and weights.
  const std::string out = path("sharded"), train = shards() + "/train_*.bin";
  Result r = gpumix(train_args(out, {"--val-data", shards() + "/val_*.bin", "--ckpt-interval", "3"}, train), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("llm.c shards (uint16 and uint32), validation: "), std::string::npos) << show(r);
  EXPECT_EQ(log_losses(out), log_losses(base()));
  EXPECT_EQ(full_val_loss(out), full_val_loss(base()));
  EXPECT_FALSE(full_val_loss(out).empty());
  EXPECT_TRUE(read_file(out + "/ckpt-000006/master.bin") == read_file(base() + "/ckpt-000006/master.bin"));
  // Resumed at step 3 (the vocabulary given, as without a tokenizer it must be).
  const std::vector<std::string> data = {"--val-data", shards() + "/val_*.bin", "--vocab-size", "512"};
  std::vector<std::string> flags = data;
  flags.insert(flags.end(), {"--resume", out + "/ckpt-000003"});
  r = gpumix(train_args(path("sharded_resumed"), flags, train), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(log_losses(path("sharded_resumed")), log_losses(base(), 4));
  EXPECT_TRUE(read_file(path("sharded_resumed") + "/ckpt-000006/master.bin") == read_file(out + "/ckpt-000006/master.bin"));
  // Three thread ranks with an uneven plan, straight and resumed: bitwise alike.
  const std::vector<std::string> plan = {"--ranks", "3", "--batches", "1,0,3", "--micro-batches", "1,0,2",
                                         "--shares", "0.5,0.2,0.3"};
  flags = data;
  flags.insert(flags.end(), plan.begin(), plan.end());
  flags.insert(flags.end(), {"--ckpt-interval", "3"});
  r = gpumix(train_args(path("sharded3"), flags, train), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  flags.insert(flags.end(), {"--resume", path("sharded3") + "/ckpt-000003"});
  r = gpumix(train_args(path("sharded3_resumed"), flags, train), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(log_losses(path("sharded3_resumed")), log_losses(path("sharded3"), 4));
  EXPECT_TRUE(read_file(path("sharded3_resumed") + "/ckpt-000006/master.bin") ==
              read_file(path("sharded3") + "/ckpt-000006/master.bin"));
  // nanoGPT's headerless train.bin / val.bin: the same run again.
  r = gpumix(train_args(path("nanogpt"), {"--val-data", shards() + "/nanogpt/val.bin", "--format", "nanogpt"},
                        shards() + "/nanogpt/train.bin"), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("nanoGPT .bin (uint16)"), std::string::npos) << show(r);
  EXPECT_EQ(log_losses(path("nanogpt")), log_losses(base()));
}

TEST_F(Shards, ResumeOnChangedShardsIsRefusedByName) {
  // A run on a copy of the shards, checkpointed at step 3; then its data moves, changes,
  // loses a file, gains one, or becomes text.
  const std::string mine = path("own_shards"), moved = path("moved_shards");
  fs::create_directories(mine);
  for (const auto& e : fs::directory_iterator(shards()))
    if (e.is_regular_file()) fs::copy_file(e.path(), mine + "/" + e.path().filename().string());
  const std::vector<std::string> val = {"--val-data", mine + "/val_*.bin", "--vocab-size", "512"};
  std::vector<std::string> flags = val;
  flags.insert(flags.end(), {"--steps", "3", "--ckpt-interval", "3"});
  Result r = gpumix(train_args(path("identity"), flags, mine + "/train_*.bin"), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  const std::string ckpt = path("identity") + "/ckpt-000003";
  const auto resume = [&](const std::string& out, const std::string& train, const std::string& val_glob) {
    return gpumix(train_args(out, {"--val-data", val_glob, "--vocab-size", "512", "--resume", ckpt}, train), dir_);
  };
  // The same files in another folder: names, sizes and headers agree, so it resumes.
  fs::copy(mine, moved);
  r = resume(path("identity_moved"), moved + "/train_*.bin", moved + "/val_*.bin");
  EXPECT_EQ(r.code, 0) << show(r);
  // A shard rewritten one token shorter: named, with both sizes.
  const std::string second = mine + "/train_1001.bin";
  const std::vector<int32_t> ids = gpumix::data::TokenShards(second, false, 512).tokens().to_vector();
  gpumix::data::write_llmc_shard(second, gpumix::data::TokenView(ids).slice(0, ids.size() - 1), 4);
  const std::string bytes_now = std::to_string(fs::file_size(second)), bytes_then = std::to_string(fs::file_size(moved + "/train_1001.bin"));
  expect_failure(resume(path("identity_changed"), mine + "/train_*.bin", mine + "/val_*.bin"),
                 {"--data file 2", "train_1001.bin", bytes_now + " bytes", bytes_then + " bytes", ckpt, "--init-from"});
  expect_nothing_written(path("identity_changed"));
  // A validation shard missing, and a training shard more.
  fs::remove(moved + "/val_1001.bin");
  expect_failure(resume(path("identity_missing"), moved + "/train_*.bin", moved + "/val_*.bin"),
                 {"--val-data", "val_1001.bin", "is missing"});
  fs::copy_file(moved + "/train_1000.bin", moved + "/train_9999.bin");
  expect_failure(resume(path("identity_new"), moved + "/train_*.bin", mine + "/val_*.bin"),
                 {"--data", "train_9999.bin", "is new"});
  // Text instead of the token data.
  expect_failure(gpumix(train_args(path("identity_text"), {"--resume", ckpt}, kCorpus), dir_),
                 {ckpt, "was trained on token data", "text"});
  // A checkpoint of a GPUMix that drew windows with replacement (no data_position.order):
  // refused before any file is compared, as its data stream cannot be continued.
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(ckpt + "/meta.json"));
  meta["data_position"].erase("order");
  std::ofstream(ckpt + "/meta.json") << meta.dump(2);
  expect_failure(resume(path("identity_old"), moved + "/train_*.bin", moved + "/val_*.bin"),
                 {ckpt, "with replacement", "shuffled-epochs", "--init-from"});
  expect_nothing_written(path("identity_old"));
}

TEST_F(Shards, BadTokenDataIsRefusedWithNothingWritten) {
  const std::string out = path("bad_shards"), train = shards() + "/train_*.bin";
  const std::vector<std::string> val = {"--val-data", shards() + "/val_*.bin"};
  // A vocabulary the tokens do not fit: the first shard holding a larger id, and its offset.
  const std::vector<int32_t> first = gpumix::data::TokenShards(shards() + "/train_1000.bin", false, 512).tokens().to_vector();
  const auto big = std::find_if(first.begin(), first.end(), [](int32_t id) { return id >= 300; });
  ASSERT_NE(big, first.end());
  std::vector<std::string> flags = val;
  flags.insert(flags.end(), {"--vocab-size", "300"});
  expect_failure(gpumix(train_args(out, flags, train), dir_),
                 {"train_1000.bin", "token " + std::to_string(*big), "offset " + std::to_string(big - first.begin()),
                  "vocabulary of 300", "--vocab-size"});
  expect_nothing_written(out);
  // A vocabulary other than the tokenizer's.
  flags = val;
  flags.insert(flags.end(), {"--vocab-size", "600"});
  expect_failure(gpumix(train_args(out, flags, train), dir_), {"vocabulary 600", "tiny.bpe", "has 512", "--tokenizer"});
  // A glob that matches nothing, for either flag.
  expect_failure(gpumix(train_args(out, val, shards() + "/nothing_*.bin"), dir_),
                 {"--data", "nothing_*.bin", "matches no file", "quote"});
  expect_failure(gpumix(train_args(out, {"--val-data", shards() + "/nothing_*.bin"}, train), dir_),
                 {"--val-data", "nothing_*.bin", "matches no file"});
  // Shards beside text, and validation data beside a text corpus.
  const std::string mixed = path("mixed");
  fs::create_directories(mixed);
  fs::copy_file(shards() + "/train_1000.bin", mixed + "/a.bin");
  write_file(mixed + "/b.txt", "some text\n");
  expect_failure(gpumix(train_args(out, {}, mixed), dir_), {"mixed", "mixes token files (1 of 2)", "alone"});
  expect_failure(gpumix(train_args(out, val, kCorpus), dir_), {"--val-data takes token data", "is text", "--val-fraction"});
  // Validation data shorter than one window.
  expect_failure(gpumix(train_args(out, {"--val-data", shards() + "/val_1000.bin", "--seq", "32"}, train), dir_),
                 {"validation data (--val-data)", "T + 1 = 33", "--seq"});
  expect_nothing_written(out);
}

// ---- eval -----------------------------------------------------------------------------------

// The JSON line `gpumix eval` prints last on stdout.
nlohmann::json eval_line(const Result& r) {
  const size_t end = r.out.find_last_not_of('\n');
  const size_t begin = r.out.rfind('\n', end);
  return nlohmann::json::parse(r.out.substr(begin == std::string::npos ? 0 : begin + 1));
}

TEST_F(Tools, EvalOfARunOnTextAndOnItsTokenFile) {
  Result r = gpumix({"eval", "--ckpt", base(), "--data", kCorpus, "--threads", "1"}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  const nlohmann::json text = eval_line(r);
  EXPECT_EQ(text.at("context").get<int64_t>(), 16);
  EXPECT_EQ(text.at("windows").get<int64_t>(), text.at("windows_total").get<int64_t>());
  EXPECT_EQ(text.at("windows_total").get<int64_t>(), (text.at("tokens").get<int64_t>() - 1) / 16);
  EXPECT_EQ(text.at("tokenizer").get<std::string>(), base() + "/tokenizer.bpe");
  EXPECT_EQ(text.at("model").get<std::string>(), base() + "/ckpt-000006");
  const double loss = text.at("loss").get<double>();
  EXPECT_GT(loss, 0);
  EXPECT_LT(loss, std::log(512.0) + 1);  // trained 6 steps: near the uniform's log V at worst
  EXPECT_DOUBLE_EQ(text.at("perplexity").get<double>(), std::exp(loss));
  // The token file the tokenizer made of the same text: the same tokens, the same number.
  r = gpumix({"eval", "--ckpt", base(), "--data", tokens(), "--threads", "1"}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  const nlohmann::json file = eval_line(r);
  EXPECT_EQ(file.at("tokens"), text.at("tokens"));
  EXPECT_EQ(file.at("loss").get<double>(), loss);
  EXPECT_EQ(file.at("format").get<std::string>(), "token file (uint16)");
  // The first 4 windows only.
  r = gpumix({"eval", "--ckpt", base() + "/ckpt-000003", "--data", tokens(), "--windows", "4"}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(eval_line(r).at("windows").get<int64_t>(), 4);
  EXPECT_EQ(eval_line(r).at("model").get<std::string>(), base() + "/ckpt-000003");
  // A Hugging Face folder with its own tokenizer.
  r = gpumix({"eval", "--model", GPUMIX_HF_GOLDEN_DIR, "--data", kCorpus, "--windows", "2"}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(eval_line(r).at("windows").get<int64_t>(), 2);
  EXPECT_NE(eval_line(r).at("tokenizer").get<std::string>().find("vocab.json"), std::string::npos);
  // Its token file (2-byte ids: vocabulary 417) gives the same number as its text.
  const double hf_text = eval_line(r).at("loss").get<double>();
  const std::string hf_tokens = path("hf_golden.tok");
  r = gpumix({"tokenizer", "encode", "--tokenizer", GPUMIX_HF_GOLDEN_DIR, "--data", kCorpus, "--out", hf_tokens}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  r = gpumix({"eval", "--model", GPUMIX_HF_GOLDEN_DIR, "--data", hf_tokens, "--windows", "2"}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(eval_line(r).at("loss").get<double>(), hf_text);
}

TEST_F(Tools, EvalRejectsBadInput) {
  // Fewer tokens than a window + 1.
  const std::string small = path("eval_small.txt");
  write_file(small, "Too short.");
  expect_failure(gpumix({"eval", "--ckpt", base(), "--data", small}, dir_),
                 {"eval_small.txt", "fewer than one window", "+ 1 = 17", "larger corpus"});
  // A token file of another vocabulary (bytes: 256, the model: 512).
  const std::string bytes = path("eval_bytes.tok");
  ASSERT_EQ(gpumix({"tokenizer", "encode", "--bytes", "--data", kCorpus, "--out", bytes}, dir_).code, 0);
  expect_failure(gpumix({"eval", "--ckpt", base(), "--data", bytes}, dir_),
                 {"eval_bytes.tok", "vocabulary 256", "has 512", "gpumix tokenizer encode --tokenizer"});
  // A run without its tokenizer, on text.
  const std::string lone = path("eval_lone");
  fs::create_directories(lone);
  fs::copy(base() + "/ckpt-000006", lone + "/ckpt-000006", fs::copy_options::recursive);
  expect_failure(gpumix({"eval", "--ckpt", lone, "--data", kCorpus}, dir_),
                 {"no tokenizer next to checkpoint", "tokenizer.bpe", "token file", "512"});
  // ...which a token file of its vocabulary does not need.
  EXPECT_EQ(gpumix({"eval", "--ckpt", lone, "--data", tokens(), "--windows", "1"}, dir_).code, 0);
  expect_failure(gpumix({"eval", "--data", kCorpus}, dir_), {"--ckpt", "--model"});
  expect_failure(gpumix({"eval", "--ckpt", base(), "--data", path("nowhere.txt")}, dir_),
                 {"nowhere.txt", "does not exist"});
}

// Examples of the tiny model's vocabulary (512) and context (16): 4 completions each, of
// 1 to 4 tokens; example 5's context (20 tokens) is longer than the context window.
std::vector<gpumix::test::Choice> tiny_choices(int label = -1) {
  std::vector<gpumix::test::Choice> examples;
  for (int k = 0; k < 6; ++k) {
    gpumix::test::Choice e;
    e.index = k;
    e.label = label >= 0 ? label : k % 4;
    for (int i = 0; i < (k == 5 ? 20 : 3 + k); ++i) e.context.push_back((37 * k + 11 * i) % 512);
    for (int c = 0; c < 4; ++c) {
      std::vector<int32_t> completion;
      for (int i = 0; i <= (k + c) % 4; ++i) completion.push_back((101 * c + 7 * i + 13 * k) % 512);
      e.completions.push_back(completion);
    }
    examples.push_back(e);
  }
  return examples;
}

TEST_F(Tools, EvalChoicesScoresEachExampleOnce) {
  // The same examples labelled 0, 1, 2 and 3 in turn: each example's prediction is one of the
  // four, so the correct answers add up to the examples.
  int64_t correct = 0, correct_sum = 0;
  for (int label = 0; label < 4; ++label) {
    const std::string file = path("choices_label" + std::to_string(label) + ".bin");
    write_file(file, gpumix::test::choices_file_bytes(tiny_choices(label)));
    const Result r = gpumix({"eval", "--ckpt", base(), "--choices", file, "--threads", "1"}, dir_);
    ASSERT_EQ(r.code, 0) << show(r);
    const nlohmann::json j = eval_line(r);
    EXPECT_EQ(j.at("examples").get<int64_t>(), 6) << j.dump();
    EXPECT_EQ(j.at("examples_total").get<int64_t>(), 6) << j.dump();
    EXPECT_EQ(j.at("truncated").get<int64_t>(), 1) << j.dump();  // example 5's context
    EXPECT_DOUBLE_EQ(j.at("choices_chance").get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(j.at("choices_acc").get<double>(), j.at("correct").get<int64_t>() / 6.0);
    EXPECT_NE(j.at("rule").get<std::string>().find("mean loss"), std::string::npos);
    correct += j.at("correct").get<int64_t>();
    correct_sum += (int64_t)std::lround(6 * j.at("choices_acc_sum").get<double>());
  }
  EXPECT_EQ(correct, 6);
  EXPECT_EQ(correct_sum, 6);
  const Result first = gpumix({"eval", "--ckpt", base(), "--choices", path("choices_label0.bin"), "--examples", "2"}, dir_);
  ASSERT_EQ(first.code, 0) << show(first);
  EXPECT_EQ(eval_line(first).at("examples").get<int64_t>(), 2);
}

TEST_F(Tools, EvalChoicesRejectsBadFiles) {
  std::vector<gpumix::test::Choice> examples = tiny_choices();
  const std::string shard = path("choices_shard.bin");
  write_file(shard, gpumix::test::choices_file_bytes(examples, 20240520));
  expect_failure(gpumix({"eval", "--ckpt", base(), "--choices", shard}, dir_),
                 {"choices_shard.bin", "magic is 20240520", "expected 20240522", "pass it as --data"});
  const std::string cut = path("choices_cut.bin");
  const std::string bytes = gpumix::test::choices_file_bytes(examples);
  write_file(cut, bytes.substr(0, bytes.size() - 5));
  expect_failure(gpumix({"eval", "--ckpt", base(), "--choices", cut}, dir_), {"choices_cut.bin", "truncated", "example 5"});
  examples[2].completions[1][0] = 600;
  const std::string vocab = path("choices_vocab.bin");
  write_file(vocab, gpumix::test::choices_file_bytes(examples));
  expect_failure(gpumix({"eval", "--ckpt", base(), "--choices", vocab}, dir_),
                 {"example 2 (index 2)", "completion 1 token 0 is id 600", "vocabulary of 512"});
  examples = tiny_choices();
  examples[3].label = 7;
  const std::string label = path("choices_label.bin");
  write_file(label, gpumix::test::choices_file_bytes(examples));
  expect_failure(gpumix({"eval", "--ckpt", base(), "--choices", label}, dir_),
                 {"example 3 (index 3)", "label 7", "past its 4 completions"});
  expect_failure(gpumix({"eval", "--ckpt", base()}, dir_), {"pass --data", "or --choices"});
  // In training: refused before the run folder is made.
  const std::string out = path("choices_refused");
  expect_failure(gpumix(train_args(out, {"--eval-choices", label}), dir_), {"label 7", "past its 4 completions"});
  EXPECT_FALSE(fs::exists(out));
  expect_failure(gpumix(train_args(out, {"--eval-choices", vocab}), dir_), {"id 600", "vocabulary of 512"});
  expect_nothing_written(out);
  // A completion longer than --seq (16): refused at the start, not at the first pass.
  examples = tiny_choices();
  examples[4].completions[2].assign(17, 5);
  const std::string long_completion = path("choices_long.bin");
  write_file(long_completion, gpumix::test::choices_file_bytes(examples));
  expect_failure(gpumix(train_args(out, {"--eval-choices", long_completion}), dir_),
                 {"(index 4)", "a completion of 17 tokens", "context of 16 tokens", "--seq"});
  expect_nothing_written(out);
  const Result lone = gpumix(train_args(out, {"--eval-choices-interval", "2"}), dir_);  // CLI11's own refusal
  EXPECT_NE(lone.code, 0) << show(lone);
  EXPECT_NE(lone.err.find("--eval-choices-interval requires --eval-choices"), std::string::npos) << show(lone);
}

TEST_F(Tools, TrainingScoresTheChoicesAndLogsMfuAndEta) {
  const std::string file = path("choices_train.bin");
  write_file(file, gpumix::test::choices_file_bytes(tiny_choices()));
  const std::string out = path("choices_run");
  // fp32, so that gpumix eval (fp32) scores the same model alike.
  std::vector<std::string> args = train_args(out, {"--eval-choices", file, "--eval-interval", "3", "--dtype", "fp32"});
  args.erase(std::find(args.begin(), args.end(), "--quiet"));
  const Result r = gpumix(args, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  std::ifstream in(out + "/log.jsonl");
  std::string text;
  std::vector<int> scored;
  // llm.c's count for the tiny model (L 2, C 32, V 512, T 16), batch 4: 6 x the matmul
  // weights + 6 L (T + 1) C per token.
  const double flops_per_step = (6.0 * (12 * 32 * 32 * 2 + 32 * 512) + 6.0 * 2 * 17 * 32) * 16 * 4;
  double peak = 0;
  while (std::getline(in, text)) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.contains("final")) continue;
    if (j.at("step").get<int>() == 1) {  // the first line says what MFU is measured with
      EXPECT_DOUBLE_EQ(j.at("flops_per_step").get<double>(), flops_per_step) << text;
      peak = j.at("peak_flops").get<double>();
      EXPECT_GT(peak, 0) << text;
      EXPECT_NE(j.at("peak").get<std::string>().find("measured at start-up"), std::string::npos) << text;
    }
    // (A peak measured while the machine was busy can be low: no bound of 1 here.)
    EXPECT_NEAR(j.at("mfu").get<double>(), flops_per_step / (j.at("ms").get<double>() / 1e3 * peak),
                1e-9 * j.at("mfu").get<double>())
        << text;
    EXPECT_GE(j.at("eta_s").get<double>(), 0) << text;
    if (j.at("step").get<int>() == 6) {
      EXPECT_EQ(j.at("eta_s").get<double>(), 0) << text;
    }
    if (!j.contains("choices_acc")) continue;
    scored.push_back(j.at("step").get<int>());
    EXPECT_EQ(j.at("choices_examples").get<int64_t>(), 6) << text;
    const double acc = j.at("choices_acc").get<double>();
    EXPECT_DOUBLE_EQ(acc * 6, std::round(acc * 6)) << text;
  }
  EXPECT_EQ(scored, (std::vector<int>{3, 6}));  // with each validation (--eval-interval 3)
  // The last model's accuracy is gpumix eval's on the same file.
  const Result e = gpumix({"eval", "--ckpt", out, "--choices", file, "--threads", "1"}, dir_);
  ASSERT_EQ(e.code, 0) << show(e);
  std::string last_line;
  for (std::ifstream again(out + "/log.jsonl"); std::getline(again, text);)
    if (text.find("\"choices_acc\"") != std::string::npos) last_line = text;
  EXPECT_EQ(eval_line(e).at("correct").get<int64_t>(),
            std::lround(6 * nlohmann::json::parse(last_line).at("choices_acc").get<double>()));
  // On 2 thread ranks of uneven batches the examples are split between them: the same count
  // as gpumix eval on that run's model.
  const std::string two = path("choices_run_2ranks");
  ASSERT_EQ(gpumix(train_args(two, {"--eval-choices", file, "--dtype", "fp32", "--ranks", "2", "--batches", "3,1"}), dir_)
                .code,
            0);
  const nlohmann::json two_final = nlohmann::json::parse([&] {
    std::string l, last;
    for (std::ifstream again(two + "/log.jsonl"); std::getline(again, l);)
      if (l.find("\"choices_acc\"") != std::string::npos) last = l;
    return last;
  }());
  EXPECT_EQ(two_final.at("step").get<int>(), 6);  // --eval-interval 0: at the end only
  const Result e2 = gpumix({"eval", "--ckpt", two, "--choices", file, "--threads", "1"}, dir_);
  ASSERT_EQ(e2.code, 0) << show(e2);
  EXPECT_EQ(eval_line(e2).at("correct").get<int64_t>(), std::lround(6 * two_final.at("choices_acc").get<double>()));
  EXPECT_EQ(two_final.at("choices_examples").get<int64_t>(), 6);
  // The console: the settings name the peak, each step line its MFU and ETA.
  for (const char* part : {"MFU peak", "measured at start-up", "| MFU ", "| ETA ", "| choices ", "eval choices"})
    EXPECT_NE(r.out.find(part), std::string::npos) << "stdout lacks '" << part << "'\n" << show(r);
  // The plot draws the accuracy.
  const std::string svg_path = path("choices_run.svg");
  ASSERT_EQ(gpumix({"plot", out, "--svg", svg_path}, dir_).code, 0);
  const std::string svg = read_file(svg_path);
  EXPECT_NE(svg.find("class='choices-acc'"), std::string::npos);
  EXPECT_NE(svg.find(">accuracy (6 examples)<"), std::string::npos);
  EXPECT_NE(svg.find(">chance 25%<"), std::string::npos);
}

TEST_F(Tools, TheRunFolderKeepsACopyOfItsTokenizer) {
  // The base run trained with --tokenizer from outside its folder.
  EXPECT_TRUE(read_file(base() + "/tokenizer.bpe") == read_file(tokenizer()));
  const Result g = gpumix({"generate", "--ckpt", base(), "--prompt", "The", "--tokens", "4", "--threads", "1"}, dir_);
  EXPECT_EQ(g.code, 0) << show(g);
  const Result x = gpumix({"export", "--ckpt", base(), "--out", path("exported_with_copy")}, dir_);
  EXPECT_EQ(x.code, 0) << show(x);
  // A folder that holds another tokenizer is refused, naming both.
  const std::string other_tok = path("other.bpe"), out = path("other_tokenizer");
  ASSERT_EQ(gpumix({"tokenizer", "train", "--data", kCorpus, "--vocab", "300", "--out", other_tok}, dir_).code, 0);
  fs::create_directories(out);
  fs::copy_file(other_tok, out + "/tokenizer.bpe");
  expect_failure(gpumix(train_args(out), dir_),
                 {"holds a tokenizer (" + out + "/tokenizer.bpe) other than --tokenizer " + tokenizer()});
  expect_nothing_written(out);
  // A checkpoint beside a tokenizer it was not trained with: refused by its tokenizer_hash.
  const std::string swapped = path("swapped_tokenizer");
  fs::create_directories(swapped);
  fs::copy(base() + "/ckpt-000006", swapped + "/ckpt-000006", fs::copy_options::recursive);
  const std::string readme = std::string(GPUMIX_TESTS_DATA_DIR) + "/../../README.md";  // other text, same vocabulary
  ASSERT_EQ(gpumix({"tokenizer", "train", "--data", readme, "--vocab", "512", "--out", swapped + "/tokenizer.bpe"}, dir_).code, 0);
  expect_failure(gpumix({"generate", "--ckpt", swapped, "--prompt", "The", "--tokens", "2"}, dir_),
                 {"is not the one checkpoint", "was trained with", "tokenizer_hash"});
  // With the tokenizer it was trained with, it generates.
  write_file(swapped + "/tokenizer.bpe", read_file(tokenizer()));
  EXPECT_EQ(gpumix({"generate", "--ckpt", swapped, "--prompt", "The", "--tokens", "2"}, dir_).code, 0);
}

TEST_F(Tools, ResumeFromTheLastStep) {
  // --resume of the base run picks ckpt-000006, which is already at --steps 6.
  const std::string out = path("resume_done");
  const Result r = gpumix(train_args(out, {"--resume", base()}), dir_);
  expect_failure(r, {"step 6", "--steps"});
  expect_nothing_written(out);
  expect_base_intact();
}

TEST_F(Tools, BadPlansOnTheCommandLine) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> says;
  };
  const Case cases[] = {
      {{"--ranks", "3", "--shares", "0.5,0.5,0.5"}, {"shares sum to 1.5", "not 1"}},
      {{"--ranks", "3", "--batches", "1,2"}, {"--batches has 2 values but 3 ranks"}},
      {{"--ranks", "2", "--batches", "1,2"}, {"batches sum to 3 but the global batch is 4"}},
      {{"--ranks", "2", "--batches", "2,2", "--micro-batches", "0,1"},
       {"rank 0", "micro-batch 0 must be at least 1 for its batch of 2"}},
      {{"--ranks", "2", "--shares", "0.5,x"}, {"--shares", "cannot read 'x'"}},
  };
  for (const Case& c : cases) {
    const std::string out = path("bad_plan");
    const Result r = gpumix(train_args(out, c.flags), dir_);
    SCOPED_TRACE(c.says[0]);
    EXPECT_EQ(r.code, 1) << show(r);
    for (const std::string& part : c.says) EXPECT_NE(r.err.find(part), std::string::npos) << show(r);
    expect_nothing_written(out);
  }
}

TEST_F(Tools, TheStartUpProfileIsBoundedAndCachedPerBound) {
  // --profile-repeats and --profile-max-micro-batch bound the profile a planner measures at
  // start-up: the settings table says so, the cached device profiles hold micro-batches up
  // to the bound only, and other bounds are measured and cached apart (a quick profile never
  // stands in for a full one), while the same bounds read the cache.
  const std::string cache = path("bounded_cache");
  const ScopedEnv cache_here("GPUMIX_CACHE", cache);
  auto train = [&](const std::string& name, const std::string& repeats, const std::string& max_m) {
    const Result r = gpumix(train_args(path(name), {"--devices", "cpu,cpu:slow=2", "--steps", "2",
                                                    "--profile-repeats", repeats, "--profile-max-micro-batch", max_m}),
                            dir_);
    EXPECT_EQ(r.code, 0) << show(r);
    return r;
  };
  // The cached device profiles: file name -> the largest micro-batch measured.
  auto cached = [&] {
    std::map<std::string, int> files;
    if (fs::exists(cache))
      for (const auto& f : fs::directory_iterator(cache)) {
        const nlohmann::json device = nlohmann::json::parse(read_file(f.path().string()));
        int largest = 0;
        for (const auto& s : device.at("samples")) largest = std::max(largest, s.at("m").get<int>());
        files[f.path().filename().string()] = largest;
      }
    return files;
  };
  Result r = train("bounded_2x1", "1", "2");
  EXPECT_NE(r.out.find("micro-batches <= 2, 1 repeat "), std::string::npos) << show(r);
  const auto first = cached();
  ASSERT_EQ(first.size(), 2u) << "one per device type: cpu and cpu:slow=2";
  for (const auto& [file, largest] : first) EXPECT_EQ(largest, 2) << file;
  train("bounded_2x1_again", "1", "2");
  EXPECT_EQ(cached(), first) << "the same bounds read the cache";
  r = train("bounded_1x1", "1", "1");
  EXPECT_NE(r.out.find("micro-batches <= 1, 1 repeat "), std::string::npos) << show(r);
  auto now = cached();
  EXPECT_EQ(now.size(), 4u) << "another largest micro-batch: measured apart";
  int at_one = 0;
  for (const auto& [file, largest] : now) at_one += largest == 1;
  EXPECT_EQ(at_one, 2);
  r = train("bounded_1x2", "2", "1");
  EXPECT_NE(r.out.find("micro-batches <= 1, 2 repeats "), std::string::npos) << show(r);
  EXPECT_EQ(cached().size(), 6u) << "other repeats: measured apart";
}

// A run of a plan file measures itself against the file's predictions as a planned run
// does: the plan table, per rank and per collective kind, the step; printed and logged.
TEST_F(Tools, APlanFileRunPrintsPredictedVsMeasured) {
  auto train = [&](const std::string& name, const std::vector<std::string>& how) {
    std::vector<std::string> extra = {"--devices", "cpu,cpu:slow=2", "--steps", "4"};
    extra.insert(extra.end(), how.begin(), how.end());
    const Result r = gpumix(train_args(path(name), extra), dir_);
    EXPECT_EQ(r.code, 0) << show(r);
    return r;
  };
  {
    const ScopedEnv no_cache("GPUMIX_CACHE", "-");
    train("planned_for_file", {"--profile-repeats", "1", "--profile-max-micro-batch", "2"});
  }
  const std::string plan_file = path("planned_for_file/plan.json");
  ASSERT_TRUE(fs::exists(plan_file));
  const double planned_step_s = nlohmann::json::parse(read_file(plan_file))["predicted"]["step_s"].get<double>();
  ASSERT_GT(planned_step_s, 0);

  const Result r = train("from_plan_file", {"--plan", plan_file});
  for (const char* part : {"predicted vs measured, per rank", "predicted vs measured, per collective kind",
                           "predicted vs measured, the step"})
    EXPECT_NE(r.out.find(part), std::string::npos) << "stdout lacks '" << part << "'\n" << show(r);
  // The collectives, measured before the first step and not again: their table once.
  const std::string table = "predicted vs measured, per collective kind";
  EXPECT_EQ(r.out.find(table), r.out.rfind(table)) << "the collectives' table is shown twice\n" << show(r);
  const nlohmann::json final_line = log_final(path("from_plan_file"));
  const std::string last = final_line.dump();
  ASSERT_TRUE(final_line.contains("step_ms")) << last;
  EXPECT_DOUBLE_EQ(final_line["step_ms"]["predicted"].get<double>(), planned_step_s * 1e3);
  EXPECT_GT(final_line["step_ms"]["measured"].get<double>(), 0);
  EXPECT_EQ(final_line["busy_ms"]["predicted"].size(), 2u);
  EXPECT_TRUE(final_line["collectives"].contains("all_gather")) << last;
}

// ---- train: resume ------------------------------------------------------------------------

TEST_F(Tools, ResumeIsBitwiseExact) {
  // The base run trained 6 steps straight; this one resumes its step-3 checkpoint (the same
  // --steps 6, so the same LR schedule) and trains steps 4..6.
  const std::string out = path("resumed");
  const Result r = gpumix(train_args(out, {"--resume", base() + "/ckpt-000003"}), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << show(r);
  const std::vector<std::string> resumed = log_losses(out), straight = log_losses(base(), 4);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed, straight);
  for (const char* array : {"master.bin", "adam_m.bin", "adam_v.bin"}) {
    const std::string a = read_file(out + "/ckpt-000006/" + array), b = read_file(base() + "/ckpt-000006/" + array);
    ASSERT_FALSE(a.empty()) << array;
    EXPECT_TRUE(a == b) << array << " differs from the uninterrupted run's";
  }
  EXPECT_NO_THROW(gpumix::CheckpointReader(out + "/ckpt-000006").verify());

  // And the same through the local backend with an uneven plan: bitwise against itself.
  const std::string out3 = path("resumed3"), full3 = path("full3");
  const std::vector<std::string> plan = {"--ranks", "3", "--batches", "1,0,3", "--micro-batches", "1,0,2",
                                         "--shares", "0.5,0.2,0.3"};
  std::vector<std::string> flags = plan;
  flags.insert(flags.end(), {"--ckpt-interval", "3"});
  Result f = gpumix(train_args(full3, flags), dir_);
  ASSERT_EQ(f.code, 0) << show(f);
  flags = plan;
  flags.insert(flags.end(), {"--resume", full3 + "/ckpt-000003"});
  f = gpumix(train_args(out3, flags), dir_);
  ASSERT_EQ(f.code, 0) << show(f);
  EXPECT_EQ(log_losses(out3), log_losses(full3, 4));
  EXPECT_TRUE(read_file(out3 + "/ckpt-000006/master.bin") == read_file(full3 + "/ckpt-000006/master.bin"));
}

TEST_F(Tools, ResumeWithoutOutContinuesInTheRunFolderWithItsTokenizer) {
  // A run whose tokenizer is its own (<run>/tokenizer.bpe, no --tokenizer flag), 6 steps.
  const std::string run = path("continued");
  fs::copy(base(), run, fs::copy_options::recursive);
  auto without_tokenizer_flag = [](std::vector<std::string> args) {
    auto it = std::find(args.begin(), args.end(), "--tokenizer");
    args.erase(it, it + 2);
    return args;
  };
  std::vector<std::string> args = without_tokenizer_flag(train_args(run, {"--steps", "9", "--resume", run}));
  auto out = std::find(args.begin(), args.end(), "--out");
  args.erase(out, out + 2);
  const fs::path default_out = fs::current_path() / "runs" / "gpt";
  const bool default_out_existed = fs::exists(default_out);
  Result r = gpumix(args, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(r.out.find("trained a"), std::string::npos) << "a new tokenizer was trained\n" << show(r);
  EXPECT_EQ(fs::exists(default_out), default_out_existed) << default_out << " was written";
  EXPECT_EQ(gpumix::scan_checkpoints(run).steps, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(log_losses(run).size(), 9u);  // steps 1..6, then 7..9 appended
  EXPECT_TRUE(read_file(run + "/tokenizer.bpe") == read_file(tokenizer()));

  // Into another folder: the resumed run's tokenizer comes along, so the new run folder
  // generates on its own.
  const std::string other = path("continued_elsewhere");
  r = gpumix(without_tokenizer_flag(train_args(other, {"--steps", "9", "--resume", base() + "/ckpt-000006"})), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_TRUE(read_file(other + "/tokenizer.bpe") == read_file(tokenizer()));
  r = gpumix({"generate", "--ckpt", other, "--prompt", "The", "--tokens", "4", "--threads", "1"}, dir_);
  EXPECT_EQ(r.code, 0) << show(r);

  // A run folder without its tokenizer: say which one to pass, write nothing.
  const std::string lost = path("continued_no_tokenizer");
  fs::copy(base(), lost, fs::copy_options::recursive);
  fs::remove(lost + "/tokenizer.bpe");
  const std::string lost_log = read_file(lost + "/log.jsonl");
  args = without_tokenizer_flag(train_args(lost, {"--steps", "9", "--resume", lost}));
  out = std::find(args.begin(), args.end(), "--out");
  args.erase(out, out + 2);
  r = gpumix(args, dir_);
  expect_failure(r, {"its run folder has no tokenizer.bpe", "pass the --tokenizer the run was trained with"});
  EXPECT_FALSE(fs::exists(lost + "/tokenizer.bpe"));
  EXPECT_EQ(read_file(lost + "/log.jsonl"), lost_log);
  EXPECT_EQ(gpumix::scan_checkpoints(lost).steps, (std::vector<int64_t>{3, 6}));
}

TEST_F(Tools, KeepCheckpointsKeepsTheNewest) {
  const std::string out = path("keep2");
  const Result r = gpumix(train_args(out, {"--ckpt-interval", "1", "--keep-checkpoints", "2"}), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  const gpumix::CheckpointScan scan = gpumix::scan_checkpoints(out);
  EXPECT_EQ(scan.steps, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(scan.latest_name, "ckpt-000006");
  EXPECT_TRUE(scan.leftovers.empty());
  EXPECT_NO_THROW(gpumix::CheckpointReader(out + "/ckpt-000006").verify());
  // The losses are the run's that kept every checkpoint.
  EXPECT_EQ(log_losses(out), log_losses(base()));
}

// ---- plot ----------------------------------------------------------------------------------

TEST_F(Tools, PlotOfARun) {
  // The first step line carries the unigram baseline, so a run in progress has it too.
  std::ifstream log(base() + "/log.jsonl");
  std::string first;
  std::getline(log, first);
  EXPECT_TRUE(nlohmann::json::parse(first).contains("unigram_loss")) << first;

  const std::string svg_path = path("base.svg");
  Result r = gpumix({"plot", base(), "--svg", svg_path}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("6 steps, 1 validation points, 1 rank"), std::string::npos) << show(r);
  const std::string svg = read_file(svg_path);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const char* part : {"class='train-loss'", "class='val-loss'", "class='unigram'", "class='tokens-per-s'",
                           "1 rank (no busy shares)"})
    EXPECT_NE(svg.find(part), std::string::npos) << part;

  // Three ranks: a busy share per rank (and a trace of two steps, through the flags).
  const std::string three = path("plot3"), trace = path("plot3_trace.json");
  r = gpumix(train_args(three, {"--ranks", "3", "--trace", trace, "--trace-steps", "2:3"}), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  std::set<int> traced_ranks, traced_steps;
  const nlohmann::json trace_json = nlohmann::json::parse(read_file(trace));
  for (const nlohmann::json& e : trace_json.at("traceEvents")) {
    traced_ranks.insert(e.at("pid").get<int>());
    if (e.at("ph") == "X") traced_steps.insert(e.at("args").at("step").get<int>());
  }
  EXPECT_EQ(traced_ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(traced_steps, (std::set<int>{2, 3}));
  r = gpumix({"plot", three + "/log.jsonl", "--svg", svg_path}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  const std::string svg3 = read_file(svg_path);
  size_t ranks = 0;
  for (size_t p = svg3.find("class='busy-rank'"); p != std::string::npos; p = svg3.find("class='busy-rank'", p + 1))
    ++ranks;
  EXPECT_EQ(ranks, 3u);
}

// ---- generate ------------------------------------------------------------------------------

TEST_F(Tools, ValidationUsesTheSameWindowsAtEveryStepAndTheFullSetAtTheEnd) {
  const std::string out = path("val_windows");
  Result r = gpumix(train_args(out, {"--eval-interval", "2", "--eval-windows", "2"}), dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  std::ifstream in(out + "/log.jsonl");
  std::string text;
  std::vector<nlohmann::json> evals;
  while (std::getline(in, text)) {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.contains("final") && j.contains("val_loss")) evals.push_back(j);
  }
  const nlohmann::json final_line = log_final(out);
  ASSERT_EQ(evals.size(), 3u);  // steps 2, 4, 6
  const int64_t total = evals[0].at("val_windows_total").get<int64_t>();
  ASSERT_GT(total, 2) << "the corpus must give more validation windows than --eval-windows";
  for (const nlohmann::json& j : evals) {
    EXPECT_EQ(j.at("val_windows").get<int64_t>(), 2) << j.dump();  // the last step's too
    EXPECT_EQ(j.at("val_windows_total").get<int64_t>(), total) << j.dump();
    EXPECT_EQ(j.contains("val_full_loss"), j.at("step").get<int>() == 6) << j.dump();
  }
  // The run's result is the full estimate, with its window count.
  EXPECT_EQ(final_line.at("val_loss").get<double>(), evals[2].at("val_full_loss").get<double>());
  EXPECT_EQ(final_line.at("val_windows").get<int64_t>(), total);
  EXPECT_NE(r.out.find("windows) vs unigram baseline"), std::string::npos) << show(r);
  // The plot draws them as two series.
  const std::string svg_path = path("val_windows.svg");
  r = gpumix({"plot", out, "--svg", svg_path}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  const std::string svg = read_file(svg_path);
  EXPECT_NE(svg.find("class='val-loss'"), std::string::npos);
  EXPECT_NE(svg.find("class='val-full-loss'"), std::string::npos);
  EXPECT_NE(svg.find(">validation, first 2 windows<"), std::string::npos);
  EXPECT_NE(svg.find(">full validation (" + std::to_string(total) + " windows)<"), std::string::npos);
}

TEST_F(Tools, GenerateContinuesThePromptAndIsGreedyAtTemperatureZero) {
  const std::string prompt = "The meaning of";
  const std::vector<std::string> greedy = {"generate", "--ckpt", base(), "--prompt", prompt, "--tokens", "24",
                                           "--temperature", "0", "--threads", "1"};
  const Result a = gpumix(greedy, dir_), b = gpumix(greedy, dir_);
  ASSERT_EQ(a.code, 0) << show(a);
  EXPECT_EQ(a.out.rfind(prompt, 0), 0u) << a.out;
  EXPECT_GT(a.out.size(), prompt.size() + 1) << "nothing was generated";
  EXPECT_EQ(a.out, b.out);
  // A checkpoint folder works as well as its run folder; sampling starts with the prompt too.
  const Result s = gpumix({"generate", "--ckpt", base() + "/ckpt-000006", "--prompt", prompt, "--tokens", "24",
                           "--temperature", "0.8", "--top-k", "20", "--seed", "3", "--threads", "1"},
                          dir_);
  ASSERT_EQ(s.code, 0) << show(s);
  EXPECT_EQ(s.out.rfind(prompt, 0), 0u) << s.out;
  const Result s2 = gpumix({"generate", "--ckpt", base() + "/ckpt-000006", "--prompt", prompt, "--tokens", "24",
                            "--temperature", "0.8", "--top-k", "20", "--seed", "3", "--threads", "1"},
                           dir_);
  EXPECT_EQ(s.out, s2.out) << "the same seed sampled different text";
}

// ---- export: a Hugging Face GPT-2 folder ----------------------------------------------------

TEST_F(Tools, ExportedFolderGeneratesAsTheCheckpoint) {
  const std::string out = path("exported");
  const Result e = gpumix({"export", "--ckpt", base(), "--out", out}, dir_);
  ASSERT_EQ(e.code, 0) << show(e);
  for (const char* f : {"model.safetensors", "config.json", "vocab.json", "merges.txt"})
    EXPECT_TRUE(fs::is_regular_file(out + "/" + f)) << f;
  const std::vector<std::string> greedy = {"--prompt", "The meaning of", "--tokens", "12", "--temperature", "0",
                                           "--threads", "1"};
  std::vector<std::string> from_ckpt = {"generate", "--ckpt", base(), "--dump-logits", path("ckpt_logits.json")};
  std::vector<std::string> from_model = {"generate", "--model", out, "--dump-logits", path("model_logits.json")};
  from_ckpt.insert(from_ckpt.end(), greedy.begin(), greedy.end());
  from_model.insert(from_model.end(), greedy.begin(), greedy.end());
  const Result a = gpumix(from_ckpt, dir_), b = gpumix(from_model, dir_);
  ASSERT_EQ(a.code, 0) << show(a);
  ASSERT_EQ(b.code, 0) << show(b);
  EXPECT_EQ(a.out, b.out);
  // fp32 export: the same logits, bit for bit.
  const nlohmann::json la = nlohmann::json::parse(read_file(path("ckpt_logits.json")));
  const nlohmann::json lb = nlohmann::json::parse(read_file(path("model_logits.json")));
  EXPECT_EQ(la["tokens"], lb["tokens"]);
  EXPECT_EQ(la["logits"], lb["logits"]);
  EXPECT_EQ(la["logits"].size(), la["tokens"].size() * 512);
  // bf16: a loadable folder too.
  const Result h = gpumix({"export", "--ckpt", base(), "--out", path("exported_bf16"), "--dtype", "bf16"}, dir_);
  ASSERT_EQ(h.code, 0) << show(h);
  EXPECT_EQ(nlohmann::json::parse(read_file(path("exported_bf16/config.json")))["torch_dtype"], "bfloat16");
  const Result g = gpumix({"generate", "--model", path("exported_bf16"), "--prompt", "The", "--tokens", "4"}, dir_);
  EXPECT_EQ(g.code, 0) << show(g);
}

TEST_F(Tools, InitFromAGpt2FolderTrainsGeneratesAndExportsItsTokenizer) {
  // tests/hf/golden: a GPT-2 made in PyTorch with its own vocab.json + merges.txt.
  const std::string golden = GPUMIX_HF_GOLDEN_DIR, run = path("from_hf"), out = path("from_hf_exported");
  const Result t = gpumix({"train", "--data", kCorpus, "--init-from", golden, "--steps", "4", "--batch", "4",
                           "--seq", "8", "--threads", "1", "--quiet", "--out", run},
                          dir_);
  ASSERT_EQ(t.code, 0) << show(t);
  EXPECT_NE(t.out.find("initialised from " + golden), std::string::npos) << t.out;
  const Result g = gpumix({"generate", "--ckpt", run, "--prompt", "Don't", "--tokens", "6", "--temperature", "0"}, dir_);
  ASSERT_EQ(g.code, 0) << show(g);
  EXPECT_EQ(g.out.rfind("Don't", 0), 0u) << g.out;
  // The fine-tuned model goes back out with GPT-2's ids, and its context n_positions (16),
  // not the 8 it was trained on.
  const Result e = gpumix({"export", "--ckpt", run, "--out", out}, dir_);
  ASSERT_EQ(e.code, 0) << show(e);
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/vocab.json")), nlohmann::json::parse(read_file(golden + "/vocab.json")));
  EXPECT_EQ(read_file(out + "/merges.txt"), read_file(golden + "/merges.txt"));
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/config.json"))["n_positions"], 16);
  // Continued with --resume and the same --init-from (which gives the shape).
  const Result r = gpumix({"train", "--data", kCorpus, "--init-from", golden, "--resume", run, "--steps", "6",
                           "--batch", "4", "--seq", "8", "--threads", "1", "--quiet", "--out", run},
                          dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(log_losses(run).size(), 6u);
}

TEST_F(Tools, GenerateFromTokenIdsWithoutATokenizer) {
  // A run on raw bytes (`tokenizer encode --bytes`, vocabulary 256) has no tokenizer; its
  // model continues token ids, the same ones for the same seed.
  const std::string bytes = path("bytes.tok"), run = path("bytes_run");
  Result r = gpumix({"tokenizer", "encode", "--bytes", "--data", kCorpus, "--out", bytes}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("vocabulary 256"), std::string::npos) << r.out;
  r = gpumix({"train", "--data", bytes, "--model", "gpt-nano", "--layers", "2", "--channels", "32", "--seq", "16",
              "--batch", "4", "--steps", "3", "--threads", "1", "--quiet", "--out", run},
             dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_FALSE(fs::exists(run + "/tokenizer.bpe"));
  const std::vector<std::string> args = {"generate", "--ckpt", run, "--prompt-ids", "84,104,101", "--tokens", "12",
                                         "--temperature", "0.8", "--top-k", "20", "--seed", "5", "--threads", "1"};
  const Result a = gpumix(args, dir_), b = gpumix(args, dir_);
  ASSERT_EQ(a.code, 0) << show(a);
  std::istringstream ids(a.out);
  std::vector<int> got;
  for (int id; ids >> id;) got.push_back(id);
  ASSERT_EQ(got.size(), 15u) << a.out;
  EXPECT_EQ(std::vector<int>(got.begin(), got.begin() + 3), (std::vector<int>{84, 104, 101}));
  for (int id : got) EXPECT_TRUE(id >= 0 && id < 256) << id;
  EXPECT_EQ(a.out, b.out) << "the same seed sampled other ids";
  // --num-samples 3: three lines after their headers, the first the single sample's; --stop
  // at the single sample's 4th new id ends sample 0 there (the id kept).
  std::vector<std::string> three = args;
  three.insert(three.end(), {"--num-samples", "3"});
  const Result n = gpumix(three, dir_);
  ASSERT_EQ(n.code, 0) << show(n);
  const std::string first_line = a.out.substr(0, a.out.find('\n'));
  EXPECT_EQ(n.out.find("--- sample 0 ---\n" + first_line + "\n--- sample 1 ---\n"), 0u) << n.out;
  EXPECT_NE(n.out.find("--- sample 2 ---\n"), std::string::npos) << n.out;
  std::vector<std::string> stopped = args;
  stopped.insert(stopped.end(), {"--stop", std::to_string(got[6])});
  const Result st = gpumix(stopped, dir_);
  ASSERT_EQ(st.code, 0) << show(st);
  std::istringstream sids(st.out);
  std::vector<int> sgot;
  for (int id; sids >> id;) sgot.push_back(id);
  const auto stop_at = std::find(got.begin() + 3, got.end(), got[6]);
  EXPECT_EQ(sgot, std::vector<int>(got.begin(), stop_at + 1)) << st.out;
  expect_failure(gpumix({"generate", "--ckpt", run, "--prompt-ids", "84", "--top-p", "0"}, dir_), {"top-p", "0"});
  expect_failure(gpumix({"generate", "--ckpt", run, "--prompt-ids", "84", "--num-samples", "0"}, dir_),
                 {"--num-samples", "0"});
  expect_failure(gpumix({"generate", "--ckpt", run, "--prompt", "x"}, dir_), {"tokenizer", "--prompt-ids"});
  expect_failure(gpumix({"generate", "--ckpt", run, "--prompt-ids", "84,300"}, dir_), {"prompt", "300", "256"});
  expect_failure(gpumix({"generate", "--ckpt", run, "--prompt-ids", "84", "--prompt", "x"}, dir_), {"contradict"});
  expect_failure(gpumix({"tokenizer", "encode", "--data", kCorpus, "--out", path("never_bytes.tok")}, dir_),
                 {"--tokenizer", "--bytes"});
  EXPECT_FALSE(fs::exists(path("never_bytes.tok")));
}

// One run per folder: a second run on a folder in use is refused at once, naming the folder
// and the holder, and the first goes on undisturbed; a holder killed with SIGKILL leaves no
// stale lock.
TEST_F(Tools, ASecondRunOnTheSameFolderIsRefused) {
  const std::string run = path("locked_run");
  const pid_t first = start_gpumix(train_args(run, {"--steps", "400"}), dir_);
  const std::string holder = "pid " + std::to_string(first) + " on ";
  ASSERT_TRUE(wait_for([&] { return read_file(run + "/lock").find(holder) != std::string::npos; }, 60))
      << "the first run never took the lock";
  ASSERT_EQ(kill(first, SIGSTOP), 0);  // it holds the lock, paused, while the second tries
  const Result second = gpumix(train_args(run), dir_);
  ASSERT_EQ(kill(first, SIGCONT), 0);
  expect_failure(second, {"run folder " + run + " is in use by another run", holder, "lock file " + run + "/lock"});
  int status = 0;
  ASSERT_EQ(waitpid(first, &status, 0), first);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(dir_ + "/background.out");
  std::vector<int> expected(400);
  for (int i = 0; i < 400; ++i) expected[i] = i + 1;
  EXPECT_EQ(log_steps(run), expected) << "the log holds another run's lines";
}

TEST_F(Tools, AKilledRunLeavesNoStaleLock) {
  const std::string run = path("killed_run");
  const pid_t first = start_gpumix(train_args(run, {"--steps", "100000", "--ckpt-interval", "2"}), dir_);
  ASSERT_TRUE(wait_for([&] { return fs::exists(run + "/latest"); }, 60)) << "no checkpoint was written";
  ASSERT_EQ(kill(first, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(first, &status, 0), first);
  ASSERT_TRUE(WIFSIGNALED(status));
  const gpumix::CheckpointScan scan = gpumix::scan_checkpoints(run);
  ASSERT_FALSE(scan.steps.empty());
  const int64_t last = scan.steps.back();
  const Result next = gpumix(train_args(run, {"--resume", run, "--steps", std::to_string(last + 2)}), dir_);
  ASSERT_EQ(next.code, 0) << show(next);
  EXPECT_EQ(log_steps(run).back(), last + 2);
}

// ---- SIGTERM / SIGINT: stop after the step in flight, with a checkpoint (dist/engine/stop.h) ----

// Signals a background run once it has logged a few steps past its first checkpoint, then
// checks that it stopped as a stopped run must: exit 128 + signo, a checkpoint of the last
// logged step (no step lost), the final log line naming the signal; and that --resume goes
// on from the step after it.
void expect_stops_cleanly(const std::string& run, pid_t pid, pid_t signalled, int signo, int exit_code,
                          const std::function<Result(std::vector<std::string>)>& resume) {
  ASSERT_TRUE(wait_for([&] { return fs::exists(run + "/latest") && log_steps(run).size() >= 8; }, 120))
      << "the run never got going";
  ASSERT_EQ(kill(signalled, signo), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string out = read_file(fs::path(run).parent_path().string() + "/background.out");
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), exit_code) << out;
  const std::vector<int> steps = log_steps(run);
  ASSERT_FALSE(steps.empty());
  const gpumix::CheckpointScan scan = gpumix::scan_checkpoints(run);
  ASSERT_FALSE(scan.steps.empty());
  EXPECT_EQ(scan.steps.back(), steps.back()) << "the steps after the last checkpoint were lost";
  std::ifstream in(run + "/log.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json final_line = nlohmann::json::parse(last);
  EXPECT_EQ(final_line.value("stopped", ""), signo == SIGINT ? "SIGINT" : "SIGTERM") << last;
  EXPECT_NE(out.find("stopped after this step"), std::string::npos) << out;
  const int next = steps.back() + 2;
  const Result r = resume({"--resume", run, "--steps", std::to_string(next)});
  ASSERT_EQ(r.code, 0) << show(r);
  const std::vector<int> after = log_steps(run);
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(after[after.size() - 2], steps.back() + 1);
  EXPECT_EQ(after.back(), next);
}

TEST_F(Tools, SigtermOnThreadRanksStopsAfterTheStepWithACheckpoint) {
  const std::string run = path("sigterm_threads");
  const auto args = train_args(run, {"--steps", "1000000", "--ckpt-interval", "4", "--ranks", "3", "--batch", "6"});
  const pid_t pid = start_gpumix(args, dir_);
  expect_stops_cleanly(run, pid, pid, SIGTERM, 128 + SIGTERM, [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--ranks", "3", "--batch", "6", "--ckpt-interval", "4"});
    return gpumix(train_args(run, extra), dir_);
  });
}

TEST_F(Tools, SigintStopsOneRankAfterTheStepWithACheckpoint) {
  const std::string run = path("sigint_one");
  const pid_t pid = start_gpumix(train_args(run, {"--steps", "1000000", "--ckpt-interval", "4"}), dir_);
  expect_stops_cleanly(run, pid, pid, SIGINT, 128 + SIGINT, [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--ckpt-interval", "4"});
    return gpumix(train_args(run, extra), dir_);
  });
}

#if defined(GPUMIX_HAVE_MPI)
// mpirun forwards SIGTERM to its ranks and kills them odls_base_sigkill_timeout seconds
// later (1 s by default, 10 here; the README says to raise it for a large model's checkpoint).
TEST_F(Tools, SigtermToMpirunStopsEveryRankAfterTheSameStep) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun on the PATH";
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_odls_base_sigkill_timeout", "10", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  const std::string run = path("sigterm_mpi");
  std::vector<std::string> argv = {"mpirun", "-np", "3", kGpumix};
  const auto args = train_args(run, {"--steps", "1000000", "--ckpt-interval", "4", "--batch", "6"});
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = start_program(argv, dir_);
  // mpirun's own exit status is its own (1 when it was signalled), not the ranks' 143.
  expect_stops_cleanly(run, pid, pid, SIGTERM, 1, [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--batch", "6", "--ckpt-interval", "4"});
    return gpumix(train_args(run, extra, ""), dir_);  // resumed on one rank: checkpoints are layout-free
  });
}
#endif

TEST_F(Tools, ASecondSignalStopsAtOnce) {
  const std::string run = path("sigterm_twice");
  // Steps long enough (~0.1 s) that the second signal lands inside the step in flight.
  const pid_t pid = start_gpumix(train_args(run, {"--steps", "1000000", "--ckpt-interval", "1000", "--channels", "192",
                                                  "--layers", "4", "--seq", "64", "--batch", "16"}),
                                 dir_);
  ASSERT_TRUE(wait_for([&] { return log_steps(run).size() >= 2; }, 120)) << "the run never got going";
  const std::string out = dir_ + "/background.out";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  ASSERT_TRUE(wait_for([&] { return read_file(out).find("stopping after the step in flight") != std::string::npos; }, 10))
      << read_file(out);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << read_file(out);
  EXPECT_TRUE(gpumix::scan_checkpoints(run).steps.empty()) << "a checkpoint was written after the second signal";
}

TEST_F(Tools, GenerateFromAnUnknownCheckpoint) {
  const Result r = gpumix({"generate", "--ckpt", path("no_such_run"), "--prompt", "x"}, dir_);
  expect_failure(r, {"no_such_run", "does not exist"});
  const Result t = gpumix({"generate", "--ckpt", base(), "--temperature", "-1"}, dir_);
  expect_failure(t, {"temperature", "-1"});
}

}  // namespace

namespace {

// ---- the other subcommands: bad input ---------------------------------------------------

// Expects a non-zero exit with every part in stderr, and no `out` file left behind.
void expect_rejected(const Result& r, std::initializer_list<std::string> parts, const std::string& out = "") {
  EXPECT_NE(r.code, 0) << show(r);
  for (const std::string& part : parts)
    EXPECT_NE(r.err.find(part), std::string::npos) << "stderr lacks '" << part << "'\n" << show(r);
  if (!out.empty()) {
    EXPECT_FALSE(std::filesystem::exists(out)) << out << " was written";
  }
}

TEST_F(Tools, TokenizerRejectsBadInput) {
  const std::string out = path("tok_bad.bpe");
  expect_rejected(gpumix({"tokenizer", "train", "--data", path("nothing.txt"), "--vocab", "300", "--out", out}, dir_),
                  {"nothing.txt"}, out);
  const std::string broken = path("broken.bpe");
  write_file(broken, "not a tokenizer\n");
  const std::string tok_out = path("never.tok");
  expect_rejected(gpumix({"tokenizer", "encode", "--tokenizer", broken, "--data", kCorpus, "--out", tok_out}, dir_),
                  {"broken.bpe"}, tok_out);
}

// gpumix simulate --sync local:H: the every-step table as without it, then local updates'
// prediction (dist/plan/simulator.h); --json adds it as "local".
TEST_F(Tools, SimulateLocalUpdates) {
  const std::string cluster =
      std::string(GPUMIX_TESTS_DATA_DIR) + "/../../bench/clusters/two-sites-h100-a100-1gbit.json";
  const std::vector<std::string> args = {"simulate", "--cluster", cluster, "--model", "gpt2", "-B", "64", "--seq", "1024"};
  const Result every = gpumix(args, dir_);
  ASSERT_EQ(every.code, 0) << show(every);
  EXPECT_EQ(every.out.find("local updates"), std::string::npos);
  std::vector<std::string> local = args;
  local.insert(local.end(), {"--sync", "local:100"});
  const Result r = gpumix(local, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  EXPECT_EQ(r.out.rfind(every.out, 0), 0u) << "the every-step table changed:\n" << r.out;
  for (const char* part : {"local updates (--sync local:100): 2 groups (one per node)", "8 x H100", "8 x A100-40GB",
                           "across groups per step", "per leader", "wait (s)"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  local.push_back("--json");
  const Result j = gpumix(local, dir_);
  ASSERT_EQ(j.code, 0) << show(j);
  const nlohmann::json parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed.at("local").at("groups").size(), 2u);
  EXPECT_EQ(parsed.at("local").at("cross_group_bytes_per_step_per_leader").get<double>(),
            2.0 * (double)gpumix::gpt_preset("gpt2").total_params() / 100);  // 2P(G - 1)/H
}

TEST_F(Tools, PlanAndSimulateRejectBadInput) {
  const std::string out = path("never_plan.json");
  expect_rejected(gpumix({"plan", "--profile", path("no_profile.json"), "--global-batch", "8", "--out", out}, dir_),
                  {"no_profile.json"}, out);
  const std::string bad_profile = path("bad_profile.json");
  write_file(bad_profile, R"({"format": "gpumix-profile", "model": {"L": 2}, "devices": []})");
  expect_rejected(gpumix({"plan", "--profile", bad_profile, "--global-batch", "8", "--out", out}, dir_),
                  {"profile"}, out);
  const std::string bad_cluster = path("bad_cluster.json");
  write_file(bad_cluster, R"({"intra_node": {"bandwidth_GBps": 1}, "nodes": [{"devices": ["Z80"]}]})");
  expect_rejected(gpumix({"simulate", "--cluster", bad_cluster, "--model", "gpt-1.3b", "--global-batch", "8"}, dir_),
                  {"nodes[0].devices[0].type"});
  expect_rejected(gpumix({"simulate", "--cluster", bad_cluster, "--model", "gpt-99b", "--global-batch", "8"}, dir_),
                  {"gpt-99b"});
  // --sharding: a group size that does not divide the 1024 ranks, and a word it does not know.
  const std::string cluster = std::string(GPUMIX_TESTS_DATA_DIR) + "/../../bench/clusters/mix1024-8types.json";
  expect_rejected(gpumix({"plan", "--cluster", cluster, "--model", "gpt-1.3b", "-B", "4096", "--sharding", "5",
                          "--out", out}, dir_),
                  {"--sharding 5", "divides the 1024 ranks"}, out);
  expect_rejected(gpumix({"plan", "--cluster", cluster, "--model", "gpt-1.3b", "-B", "4096", "--sharding", "half",
                          "--out", out}, dir_),
                  {"--sharding half is not auto, full or a group size"}, out);
}

TEST_F(Tools, ProfileAndDevicesRejectBadInput) {
  const std::string out = path("never_profile.json");
  expect_rejected(gpumix({"profile", "--devices", "cpu:mem=lots", "--out", out}, dir_), {"mem"}, out);
  expect_rejected(gpumix({"profile", "--devices", "cpu:colour=red", "--out", out}, dir_), {"colour"}, out);
  const std::string run = path("never_run");
  expect_rejected(gpumix(train_args(run, {"--devices", "cpu,cpu", "--ranks", "3"}), dir_), {"--ranks 3", "2 devices"});
  expect_rejected(gpumix(train_args(run, {"--devices", "cpu,cpu", "--plan", "even", "--batches", "4,4"}), dir_),
                  {"contradicts"});
  EXPECT_FALSE(std::filesystem::exists(run + "/log.jsonl"));
}

TEST_F(Tools, SelfcheckListsTheDevicesAndChecksEachInItsComputeDtype) {
  const Result r = gpumix({"selfcheck"}, dir_);
  EXPECT_EQ(r.code, 0) << show(r);
  EXPECT_NE(r.out.find("cpu:0"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("self-check passed"), std::string::npos) << show(r);
  std::string why;
  const int gpus = gpumix::cuda_device_count(&why);
  if (gpus == 0) {
    EXPECT_NE(r.out.find("(no CUDA GPU: " + why + ")"), std::string::npos) << show(r);
  }
  for (int i = 0; i < gpus; ++i)  // each GPU listed and checked in bf16
    EXPECT_NE(r.out.find("cuda:" + std::to_string(i) + "   gradient check in bf16 passed"), std::string::npos)
        << show(r);
}

TEST_F(Tools, CudaDevicesAreRefusedClearlyWhereTheyCannotRun) {
  const std::string run = path("never_cuda_run"), out = path("never_cuda_profile.json");
  expect_rejected(gpumix(train_args(run, {"--devices", "H200"}), dir_), {"'H200'", "plans and simulation", "cuda:0"});
  expect_rejected(gpumix(train_args(run, {"--devices", "cpu,cuda:0"}), dir_), {"mixes cpu and cuda", "'cpu'", "'cuda:0'"});
  expect_rejected(gpumix(train_args(run, {"--devices", "cuda:0:colour=red"}), dir_), {"colour"});
  std::string why;
  if (gpumix::cuda_device_count(&why) > 0) {  // a GPU is here: cuda:0 runs, in bf16 only
    expect_rejected(gpumix(train_args(run, {"--devices", "cuda:0", "--dtype", "fp32"}), dir_),
                    {"--dtype f32 on cuda:0", "the CUDA backend computes in bf16", "use --dtype bf16"});
    return;
  }
  // No GPU can be used here (no driver, or a build without CUDA): the runtime's reason and the fix.
  expect_rejected(gpumix(train_args(run, {"--devices", "cuda:0,cuda:0:mem=6GiB:slow=3"}), dir_),
                  {"--devices cuda:0", "names a CUDA GPU, but none can be used here", why, "or use cpu devices"});
  expect_rejected(gpumix({"profile", "--devices", "cuda:0", "--out", out}, dir_), {"none can be used here", why}, out);
  EXPECT_FALSE(std::filesystem::exists(run + "/log.jsonl"));
}

}  // namespace

namespace {

// ---- the bad-input matrix: every subcommand, table-driven --------------------------------
// Missing, empty, truncated, wrong-typed and oversized inputs and contradictory flags. Each
// case must end with a non-zero exit and a message that names the problem, and must leave
// nothing behind: its output files do not exist, files it would overwrite are unchanged,
// and a run folder holds no checkpoint and no step lines (the base run stays intact).

struct BadInput {
  std::string name;                        // what is wrong
  std::vector<std::string> args;           // the gpumix command line
  std::vector<std::string> says;           // parts of stderr
  std::vector<std::string> never_written;  // files or folders that must not exist after
  std::vector<std::string> unchanged;      // existing files whose bytes must stay the same
  std::string run;                         // a run folder: no checkpoint, no step lines

  BadInput(std::string name_, std::vector<std::string> args_, std::vector<std::string> says_,
           std::vector<std::string> never_written_ = {}, std::vector<std::string> unchanged_ = {},
           std::string run_ = {})
      : name(std::move(name_)), args(std::move(args_)), says(std::move(says_)),
        never_written(std::move(never_written_)), unchanged(std::move(unchanged_)), run(std::move(run_)) {}
};

class BadInputs : public Tools {
 protected:
  // Inputs made from the good ones, once: truncated, empty, wrong-typed copies.
  static void SetUpTestSuite() {
    Tools::SetUpTestSuite();
    if (HasFatalFailure()) return;
    const std::string tok = read_file(tokenizer()), tokens_bytes = read_file(tokens());
    write_file(path("m_trunc.bpe"), tok.substr(0, 100));
    write_file(path("m_empty.bpe"), "");
    write_file(path("m_empty.txt"), "");
    write_file(path("m_trunc.tok"), tokens_bytes.substr(0, tokens_bytes.size() / 2 + 1));
    // Checkpoints: one with a truncated master.bin, one with a truncated meta.json, an
    // empty run folder, and an intact copy without the tokenizer beside it.
    for (const char* c : {"m_ckpt_trunc_bin", "m_ckpt_trunc_meta", "m_ckpt_no_tok", "m_ckpt_bad_model"}) {
      fs::create_directories(path(c));
      fs::copy(base() + "/ckpt-000003", path(std::string(c) + "/ckpt-000003"), fs::copy_options::recursive);
    }
    fs::resize_file(path("m_ckpt_trunc_bin/ckpt-000003/master.bin"), 1000);
    const std::string meta = read_file(base() + "/ckpt-000003/meta.json");
    write_file(path("m_ckpt_trunc_meta/ckpt-000003/meta.json"), meta.substr(0, meta.size() / 2));
    nlohmann::json bad_model = nlohmann::json::parse(meta);
    bad_model["model"]["NH"] = "four";
    write_file(path("m_ckpt_bad_model/ckpt-000003/meta.json"), bad_model.dump());
    fs::copy_file(tokenizer(), path("m_ckpt_bad_model/tokenizer.bpe"));
    fs::create_directories(path("m_ckpt_empty"));
    // A profile of one small emulated device, and its plan (both good), then bad copies.
    Result r = gpumix({"profile", "--devices", "cpu:mem=64MiB", "--model", "gpt-nano", "--seq", "16", "--vocab",
                       "512", "--max-micro-batch", "2", "--repeats", "1", "--cache", "-", "--out",
                       path("m_profile.json")},
                      dir_);
    ASSERT_EQ(r.code, 0) << show(r);
    r = gpumix({"plan", "--profile", path("m_profile.json"), "--global-batch", "4", "--out", path("m_plan.json")},
               dir_);
    ASSERT_EQ(r.code, 0) << show(r);
    nlohmann::json profile = nlohmann::json::parse(read_file(path("m_profile.json")));
    profile["devices"][0]["memory_bytes"] = "lots";
    write_file(path("m_profile_wrong_type.json"), profile.dump());
    const std::string profile_text = read_file(path("m_profile.json"));
    write_file(path("m_profile_trunc.json"), profile_text.substr(0, profile_text.size() / 2));
    nlohmann::json plan = nlohmann::json::parse(read_file(path("m_plan.json")));
    plan["global_batch"] = "eight";
    write_file(path("m_plan_wrong_type.json"), plan.dump());
    plan = nlohmann::json::parse(read_file(path("m_plan.json")));
    nlohmann::json left_out = plan["ranks"][0];
    for (const char* k : {"batch", "micro_batch", "num_micro_batches", "share"}) left_out[k] = 0;
    left_out["rank"] = 1;
    left_out["left_out"] = true;
    plan["ranks"].push_back(left_out);
    write_file(path("m_plan_left_out.json"), plan.dump());
    const std::string plan_text = read_file(path("m_plan.json"));
    write_file(path("m_plan_trunc.json"), plan_text.substr(0, plan_text.size() / 2));
    // The same profile and plan in one dtype whatever this CPU's default (f32), and a
    // profile in a dtype that does not exist.
    plan = nlohmann::json::parse(plan_text);
    plan["dtype"] = "f32";
    write_file(path("m_plan_f32.json"), plan.dump());
    profile = nlohmann::json::parse(profile_text);
    profile["dtype"] = "f32";
    write_file(path("m_profile_f32.json"), profile.dump());
    profile["dtype"] = "fp16";
    write_file(path("m_profile_fp16.json"), profile.dump());
    write_file(path("m_cluster.json"),
               R"({"format": "gpumix-cluster", "name": "two L4", "intra_node": {"bandwidth_GBps": 10, "latency_us": 15},)"
               R"( "nodes": [{"name": "n0", "devices": ["L4:count=2"]}]})");
    const std::string cluster = read_file(path("m_cluster.json"));
    write_file(path("m_cluster_trunc.json"), cluster.substr(0, cluster.size() / 2));
    nlohmann::json wrong = nlohmann::json::parse(cluster);
    wrong["intra_node"]["bandwidth_GBps"] = "ten";
    write_file(path("m_cluster_wrong_bw.json"), wrong.dump());
    wrong = nlohmann::json::parse(cluster);
    wrong["nodes"][0]["devices"] = "L4";
    write_file(path("m_cluster_wrong_devices.json"), wrong.dump());
    wrong = nlohmann::json::parse(cluster);
    wrong["nodes"][0]["devices"] = {"L4:count=2147483647", "A6000:count=2147483647"};
    write_file(path("m_cluster_huge_count.json"), wrong.dump());
    // Outputs that exist before a failing command, which must not be touched.
    fs::copy_file(tokenizer(), path("m_existing.bpe"));
    fs::copy_file(path("m_plan.json"), path("m_existing_plan.json"));
  }

  static void run_cases(const std::vector<BadInput>& cases) {
    for (const BadInput& c : cases) {
      SCOPED_TRACE(c.name);
      std::vector<std::string> before;
      for (const std::string& f : c.unchanged) before.push_back(read_file(f));
      const Result r = gpumix(c.args, dir_);
      EXPECT_NE(r.code, 0) << show(r);
      EXPECT_LT(r.code, 128) << "killed by a signal\n" << show(r);
      for (const std::string& part : c.says)
        EXPECT_NE(r.err.find(part), std::string::npos) << "stderr lacks '" << part << "'\n" << show(r);
      EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << show(r);
      EXPECT_EQ(r.err.find("runtime error"), std::string::npos) << show(r);
      // A user's mistake is told without a source location (those mark internal errors).
      EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << show(r);
      for (const std::string& f : c.never_written) EXPECT_FALSE(fs::exists(f)) << f << " was written";
      for (size_t i = 0; i < c.unchanged.size(); ++i)
        EXPECT_TRUE(read_file(c.unchanged[i]) == before[i]) << c.unchanged[i] << " changed";
      if (!c.run.empty()) expect_nothing_written(c.run);
    }
  }

  // `train` into a fresh run folder, with `extra` flags.
  static BadInput train_case(const std::string& name, std::vector<std::string> extra, std::vector<std::string> says,
                             const std::string& data = "") {
    const std::string run = path("m_run_" + std::to_string(counter_++));
    return BadInput{name, train_args(run, std::move(extra), data), std::move(says), {}, {}, run};
  }
  static BadInput never_written(BadInput c, const std::string& file) {
    c.never_written.push_back(file);
    return c;
  }
  // Refused before the run folder is made or locked: no folder (and no lock) is left behind.
  static BadInput before_the_folder(BadInput c) { return never_written(c, c.run); }
  static int counter_;
};
int BadInputs::counter_ = 0;

TEST_F(BadInputs, Train) {
  const std::string ckpt3 = "/ckpt-000003";
  run_cases({
      train_case("truncated tokenizer", {"--tokenizer", path("m_trunc.bpe")},
                 {"m_trunc.bpe", "make it again with `gpumix tokenizer train`"}),
      train_case("empty tokenizer", {"--tokenizer", path("m_empty.bpe")}, {"m_empty.bpe", "ends early"}),
      train_case("truncated checkpoint data", {"--resume", path("m_ckpt_trunc_bin") + ckpt3, "--steps", "8"},
                 {"master.bin", "truncated"}),
      train_case("truncated checkpoint meta.json", {"--resume", path("m_ckpt_trunc_meta") + ckpt3, "--steps", "8"},
                 {"meta.json", "not valid JSON"}),
      before_the_folder(train_case("resume of a missing run", {"--resume", path("no_such_run"), "--steps", "8"},
                                   {"no_such_run", "does not exist"})),
      train_case("resume of an empty run folder", {"--resume", path("m_ckpt_empty"), "--steps", "8"},
                 {"m_ckpt_empty", "no checkpoint"}),
      train_case("--steps 1e12 is not an integer", {"--steps", "1e12"}, {"--steps", "1e12"}),
      train_case("--steps beyond int", {"--steps", "1000000000000"}, {"--steps", "1000000000000"}),
      train_case("--batch 99999999999 does not fit", {"--batch", "99999999999"}, {"out of memory", "smaller batch"}),
      before_the_folder(train_case("--batch 0", {"--batch", "0"}, {"--batch", "got 0"})),
      before_the_folder(train_case("--steps -3", {"--steps", "-3"}, {"--steps", "got -3"})),
      train_case("--seq longer than the corpus allows", {"--seq", "100000"}, {"T + 1 = 100001", "--seq"}),
      before_the_folder(train_case("--seq 0", {"--seq", "0"},
                                   {"--seq must be at least 1, got 0", "leave --seq out for the model's context"})),
      before_the_folder(train_case("--seq -1", {"--seq", "-1"}, {"--seq must be at least 1, got -1"})),
      before_the_folder(train_case("--lr nan", {"--lr", "nan"}, {"--lr must be positive and finite, got nan"})),
      before_the_folder(train_case("--lr inf", {"--lr", "inf"}, {"--lr", "got inf"})),
      before_the_folder(train_case("--warmup -5", {"--warmup", "-5"}, {"--warmup", "got -5", "leave --warmup out"})),
      before_the_folder(train_case("--weight-decay nan", {"--weight-decay", "nan"}, {"--weight-decay", "got nan"})),
      before_the_folder(train_case("--grad-clip -1", {"--grad-clip", "-1"}, {"--grad-clip", "got -1"})),
      before_the_folder(train_case("--eval-interval -1", {"--eval-interval", "-1"}, {"--eval-interval", "got -1"})),
      before_the_folder(train_case("--threads -2", {"--threads", "-2"}, {"--threads", "got -2"})),
      before_the_folder(train_case("--layers 0", {"--layers", "0"}, {"--layers", "got 0", "leave --layers out"})),
      train_case("--device-memory negative", {"--device-memory", "-5MiB"}, {"-5MiB", "memory size"}),
      before_the_folder(train_case("--val-fraction 1.5", {"--val-fraction", "1.5"}, {"--val-fraction", "(0, 1)", "got 1.5"})),
      before_the_folder(train_case("--keep-checkpoints -1", {"--keep-checkpoints", "-1"}, {"--keep-checkpoints", "got -1"})),
      train_case("--trace-steps without --trace", {"--trace-steps", "2:3"}, {"--trace-steps needs --trace FILE"}),
      train_case("--trace-steps not A:B", {"--trace", path("m_never_trace.json"), "--trace-steps", "3"},
                 {"--trace-steps: cannot read '3' as A:B"}),
      train_case("--trace-steps backwards", {"--trace", path("m_never_trace.json"), "--trace-steps", "4:2"},
                 {"cannot read '4:2'", "1 <= A <= B"}),
      never_written(train_case("--trace-steps after the last step",
                               {"--trace", path("m_never_trace.json"), "--trace-steps", "10:12"},
                               {"--trace-steps 10:12 holds none of the steps this run trains (1 to 6)"}),
                    path("m_never_trace.json")),
      train_case("--trace in a missing folder", {"--trace", path("no_dir/trace.json")},
                 {"--trace", "no_dir", "does not exist"}),
      before_the_folder(train_case("--channels not a multiple of the heads", {"--channels", "33"}, {"C (channels) = 33", "NH"})),
      before_the_folder(train_case("--model of a family without stages", {"--model", "llama-nano"},
                                   {"model llama-nano(custom): the llama family has a shape but no stages",
                                    "`gpumix plan` and `gpumix simulate` plan it"})),
      train_case("--resume with another --model", {"--resume", base(), "--model", "gpt-micro", "--steps", "12"},
                 {"gpt-micro", "use the same --model"}),
      train_case("--resume with other --channels", {"--resume", base(), "--channels", "64", "--steps", "12"},
                 {"C: 32 vs 64", "use the same --model"}),
      train_case("--plan file missing", {"--devices", "cpu,cpu", "--plan", path("no_plan.json")},
                 {"no_plan.json", "cannot open"}),
      train_case("--plan file truncated", {"--devices", "cpu,cpu", "--plan", path("m_plan_trunc.json")},
                 {"m_plan_trunc.json", "not valid JSON"}),
      train_case("--plan file with a wrong-typed field", {"--plan", path("m_plan_wrong_type.json")},
                 {"m_plan_wrong_type.json", "global_batch"}),
      train_case("--plan for another number of ranks", {"--devices", "cpu,cpu", "--plan", path("m_plan.json")},
                 {"is for 1 ranks but 2 are running"}),
      train_case("--plan that leaves a rank out", {"--devices", "cpu,cpu", "--plan", path("m_plan_left_out.json")},
                 {"leaves rank 1", "gpumix plan --no-leave-out"}),
      train_case("--dtype unknown", {"--dtype", "fp16"},
                 {"--dtype: unknown value 'fp16'", "valid: bf16, fp32 (or f32)"}),
      train_case("--dtype contradicts the plan file", {"--plan", path("m_plan_f32.json"), "--dtype", "bf16"},
                 {"m_plan_f32.json was made for f32 but --dtype is bf16", "gpumix plan --dtype bf16", "drop --dtype"}),
      train_case("--profile-repeats 0", {"--devices", "cpu,cpu", "--profile-repeats", "0"},
                 {"--profile-repeats must be at least 1, got 0"}),
      train_case("--profile-max-micro-batch negative", {"--devices", "cpu,cpu", "--profile-max-micro-batch", "-2"},
                 {"--profile-max-micro-batch must be at least 1, got -2"}),
      train_case("--profile-repeats where nothing is profiled", {"--profile-repeats", "1"},
                 {"--profile-repeats bounds the profile", "this run profiles nothing", "without --devices",
                  "drop --profile-repeats"}),
      train_case("--profile-max-micro-batch with a given plan",
                 {"--devices", "cpu,cpu", "--batches", "2,2", "--profile-max-micro-batch", "2"},
                 {"--profile-max-micro-batch bounds the profile", "its plan is given", "drop --profile-max-micro-batch"}),
      train_case("--profile-repeats with a plan file", {"--plan", path("m_plan.json"), "--profile-repeats", "2"},
                 {"--profile-repeats bounds the profile", "it runs the plan file", "m_plan.json"}),
  });
  expect_base_intact();
}

TEST_F(BadInputs, Plot) {
  const std::string svg = path("m_never.svg");
  write_file(path("m_garbled.jsonl"), "{\"step\":1,\"loss\":7}\n{\"step\":2,\"lo\n{\"step\":3,\"loss\":6}\n");
  write_file(path("m_wrong_type.jsonl"), "{\"step\":1,\"loss\":\"high\"}\n");
  write_file(path("m_existing.svg"), "<svg/>");
  run_cases({
      {"missing run folder", {"plot", path("no_such_run"), "--svg", svg}, {"no_such_run", "does not exist"}, {svg}},
      {"run folder without a log", {"plot", path("m_ckpt_empty"), "--svg", svg}, {"log.jsonl", "does not exist"}, {svg}},
      {"empty log", {"plot", path("m_empty.txt"), "--svg", svg}, {"m_empty.txt", "is empty"}, {svg}},
      {"garbled log", {"plot", path("m_garbled.jsonl"), "--svg", svg}, {"m_garbled.jsonl line 2", "not valid JSON"},
       {svg}},
      {"wrong-typed loss", {"plot", path("m_wrong_type.jsonl"), "--svg", svg}, {"field 'loss'", "not a number"}, {svg}},
      {"a token file for a log", {"plot", tokens(), "--svg", svg}, {"tiny.tok line 1", "not valid JSON"}, {svg}},
      {"no --svg", {"plot", base()}, {"--svg"}},
      {"--svg in a missing folder", {"plot", base(), "--svg", path("no_dir/p.svg")}, {"no_dir/p.svg"},
       {path("no_dir")}},
      {"a failure leaves an existing picture alone", {"plot", path("m_empty.txt"), "--svg", path("m_existing.svg")},
       {"is empty"}, {}, {path("m_existing.svg")}},
  });
}

TEST_F(BadInputs, Generate) {
  const std::string ckpt3 = "/ckpt-000003";
  auto generate = [](const std::string& ckpt, std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "--ckpt", ckpt, "--prompt", "The", "--tokens", "4", "--threads", "1"};
    for (size_t i = 0; i + 1 < extra.size(); i += 2) {
      auto it = std::find(args.begin(), args.end(), extra[i]);
      if (it != args.end()) *(it + 1) = extra[i + 1];
      else args.insert(args.end(), {extra[i], extra[i + 1]});
    }
    return args;
  };
  run_cases({
      {"truncated checkpoint data", generate(path("m_ckpt_trunc_bin") + ckpt3, {}), {"master.bin", "truncated"}},
      {"truncated meta.json", generate(path("m_ckpt_trunc_meta") + ckpt3, {}), {"meta.json", "not valid JSON"}},
      {"empty run folder", generate(path("m_ckpt_empty"), {}), {"m_ckpt_empty", "no checkpoint"}},
      {"no tokenizer beside the checkpoint", generate(path("m_ckpt_no_tok") + ckpt3, {}), {"tokenizer"}},
      {"meta.json with a wrong-typed model field", generate(path("m_ckpt_bad_model") + ckpt3, {}),
       {"meta.json: model.NH", "positive integer", "\"four\""}},
      {"--tokens beyond int", generate(base(), {"--tokens", "99999999999"}), {"--tokens", "99999999999"}},
      {"--tokens negative", generate(base(), {"--tokens", "-5"}), {"number of tokens", "-5"}},
      {"--top-k negative", generate(base(), {"--top-k", "-3"}), {"top-k", "-3"}},
      {"--temperature nan", generate(base(), {"--temperature", "nan"}), {"temperature", "nan"}},
  });
  expect_base_intact();
}

TEST_F(BadInputs, ExportAndHuggingFaceFolders) {
  const std::string never = path("m_never_exported");
  fs::create_directories(path("m_full"));
  write_file(path("m_full/keep.txt"), "keep");
  // Hugging Face folders made from an export of the base run, then damaged.
  Result r = gpumix({"export", "--ckpt", base(), "--out", path("m_hf")}, dir_);
  ASSERT_EQ(r.code, 0) << show(r);
  for (const char* c : {"m_hf_trunc", "m_hf_config", "m_hf_no_merges"}) {
    fs::create_directories(path(c));
    for (const auto& f : fs::directory_iterator(path("m_hf"))) fs::copy_file(f.path(), fs::path(path(c)) / f.path().filename());
  }
  const std::string weights = read_file(path("m_hf/model.safetensors"));
  write_file(path("m_hf_trunc/model.safetensors"), weights.substr(0, weights.size() - 100));
  nlohmann::json config = nlohmann::json::parse(read_file(path("m_hf/config.json")));
  config["n_embd"] = 48;
  write_file(path("m_hf_config/config.json"), config.dump());
  fs::remove(path("m_hf_no_merges/merges.txt"));
  run_cases({
      {"export: missing checkpoint", {"export", "--ckpt", path("no_such_run"), "--out", never}, {"no_such_run", "does not exist"}, {never}},
      {"export: truncated checkpoint", {"export", "--ckpt", path("m_ckpt_trunc_bin") + "/ckpt-000003", "--out", never},
       {"master.bin", "truncated"}, {never}},
      {"export: into a folder that holds files", {"export", "--ckpt", base(), "--out", path("m_full")},
       {"m_full", "exists and is not empty", "nothing was written"}, {}, {path("m_full/keep.txt")}},
      {"export: --dtype fp16", {"export", "--ckpt", base(), "--out", never, "--dtype", "fp16"}, {"--dtype", "fp16"}, {never}},
      {"generate: --ckpt and --model", {"generate", "--ckpt", base(), "--model", path("m_hf"), "--prompt", "x"},
       {"--ckpt", "--model"}},
      {"generate: --model without config.json", {"generate", "--model", path("m_ckpt_empty"), "--prompt", "x"},
       {"m_ckpt_empty", "has no config.json"}},
      {"generate: truncated model.safetensors", {"generate", "--model", path("m_hf_trunc"), "--prompt", "x"},
       {"model.safetensors", "run past the data region", "truncated"}},
      {"generate: config.json contradicting the tensors", {"generate", "--model", path("m_hf_config"), "--prompt", "x"},
       {"transformer.wte.weight", "n_embd = 48"}},
      {"generate: no merges.txt", {"generate", "--model", path("m_hf_no_merges"), "--prompt", "x"}, {"has no merges.txt"}},
  });
  EXPECT_EQ(read_file(path("m_full/keep.txt")), "keep");
  // train --init-from those folders: refused before the run folder gets anything.
  const std::string golden = GPUMIX_HF_GOLDEN_DIR;
  const auto init_from = [&](const std::string& name, const std::string& folder, std::vector<std::string> extra,
                             std::vector<std::string> says, const std::string& data = kCorpus) {
    const std::string run = path("m_hf_run_" + std::to_string(counter_++));
    std::vector<std::string> args = {"train", "--data", data, "--init-from", folder, "--steps", "2", "--batch",
                                     "2", "--threads", "1", "--quiet", "--out", run};
    args.insert(args.end(), extra.begin(), extra.end());
    return BadInput{name, args, std::move(says), {run + "/tokenizer.bpe"}, {}, run};
  };
  run_cases({
      init_from("--init-from a missing folder", path("no_such_folder"), {}, {"no_such_folder", "has no config.json"}),
      init_from("--init-from with truncated weights", path("m_hf_trunc"), {}, {"model.safetensors", "truncated"}),
      init_from("--init-from whose config.json contradicts the tensors", path("m_hf_config"), {},
                {"transformer.wte.weight", "n_embd = 48"}),
      init_from("--init-from without merges.txt", path("m_hf_no_merges"), {}, {"has no merges.txt"}),
      init_from("--init-from with --model", golden, {"--model", "gpt-micro"}, {"--init-from", "--model"}),
      init_from("--init-from with --layers", golden, {"--layers", "3"}, {"--layers/--heads/--channels contradict"}),
      init_from("--init-from with --tokenizer", golden, {"--tokenizer", tokenizer()}, {"contradicts --init-from"}),
      init_from("--init-from with a longer --seq", golden, {"--seq", "64"}, {"--seq 64 exceeds the context", "n_positions 16"}),
      init_from("--init-from with a token file of another tokenizer", golden, {},
                {"has vocabulary 512 but the tokenizer of"}, tokens()),
  });
  expect_base_intact();
}

TEST_F(BadInputs, Tokenizer) {
  const std::string out = path("m_never.bpe"), tok_out = path("m_never.tok");
  run_cases({
      {"train: empty corpus",
       {"tokenizer", "train", "--data", path("m_empty.txt"), "--vocab", "300", "--out", out},
       {"m_empty.txt", "holds no text"},
       {out}},
      {"train: --vocab oversized",
       {"tokenizer", "train", "--data", kCorpus, "--vocab", "99999999999", "--out", out},
       {"--vocab"},
       {out}},
      {"train: --vocab below the bytes",
       {"tokenizer", "train", "--data", kCorpus, "--vocab", "100", "--out", out},
       {"--vocab"},
       {out}},
      {"train: --out in a missing folder",
       {"tokenizer", "train", "--data", kCorpus, "--vocab", "300", "--out", path("no_dir/t.bpe")},
       {"no_dir/t.bpe"},
       {path("no_dir")}},
      {"train: a failure leaves an existing tokenizer alone",
       {"tokenizer", "train", "--data", path("m_empty.txt"), "--vocab", "300", "--out", path("m_existing.bpe")},
       {"holds no text"},
       {},
       {path("m_existing.bpe")}},
      {"encode: truncated tokenizer",
       {"tokenizer", "encode", "--tokenizer", path("m_trunc.bpe"), "--data", kCorpus, "--out", tok_out},
       {"m_trunc.bpe", "make it again"},
       {tok_out}},
      {"encode: empty tokenizer",
       {"tokenizer", "encode", "--tokenizer", path("m_empty.bpe"), "--data", kCorpus, "--out", tok_out},
       {"m_empty.bpe", "ends early"},
       {tok_out}},
      {"encode: empty corpus",
       {"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", path("m_empty.txt"), "--out", tok_out},
       {"m_empty.txt", "holds no text"},
       {tok_out}},
      {"encode: missing corpus",
       {"tokenizer", "encode", "--tokenizer", tokenizer(), "--data", path("nothing.txt"), "--out", tok_out},
       {"nothing.txt", "does not exist"},
       {tok_out}},
      {"encode: missing tokenizer",
       {"tokenizer", "encode", "--tokenizer", path("nothing.bpe"), "--data", kCorpus, "--out", tok_out},
       {"nothing.bpe"},
       {tok_out}},
  });
}

TEST_F(BadInputs, Profile) {
  const std::string out = path("m_never_profile.json");
  auto profile = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"profile", "--devices", "cpu:mem=64MiB", "--model", "gpt-nano", "--seq", "16",
                                     "--vocab", "512", "--max-micro-batch", "2", "--repeats", "1", "--cache", "-",
                                     "--out", out};
    for (size_t i = 0; i + 1 < extra.size(); i += 2) {
      auto it = std::find(args.begin(), args.end(), extra[i]);
      if (it != args.end()) *(it + 1) = extra[i + 1];
      else args.insert(args.end(), {extra[i], extra[i + 1]});
    }
    return args;
  };
  run_cases({
      {"unknown model", profile({"--model", "gpt-huge"}), {"unknown model preset 'gpt-huge'"}, {out}},
      {"--dtype unknown", profile({"--dtype", "int8"}), {"--dtype: unknown value 'int8'", "valid: bf16"}, {out}},
      {"--repeats 0", profile({"--repeats", "0"}), {"--repeats", "got 0"}, {out}},
      {"--max-micro-batch 0", profile({"--max-micro-batch", "0"}), {"--max-micro-batch", "got 0"}, {out}},
      {"--seq negative", profile({"--seq", "-1"}), {"--seq", "got -1"}, {out}},
      {"--seq 0", profile({"--seq", "0"}), {"--seq must be at least 1, got 0", "leave --seq out"}, {out}},
      {"--vocab negative", profile({"--vocab", "-7"}), {"--vocab", "got -7"}, {out}},
      {"--seq oversized", profile({"--seq", "100000"}), {"out of memory"}, {out}},
      {"device memory too small", profile({"--devices", "cpu:mem=1KiB"}), {"out of memory", "1.00 KiB"}, {out}},
      {"empty --devices", profile({"--devices", ""}), {"--devices is empty"}, {out}},
      {"--devices wrong-typed", profile({"--devices", "cpu:slow=fast"}), {"slow"}, {out}},
  });
}

TEST_F(BadInputs, Plan) {
  const std::string out = path("m_never_plan.json"), good = path("m_profile.json");
  auto plan = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "plan");
    args.insert(args.end(), {"--out", out});
    return args;
  };
  run_cases({
      {"profile: missing", plan({"--profile", path("nothing.json"), "-B", "4"}), {"nothing.json"}, {out}},
      {"profile: truncated", plan({"--profile", path("m_profile_trunc.json"), "-B", "4"}),
       {"m_profile_trunc.json", "not valid JSON"}, {out}},
      {"profile: wrong-typed field", plan({"--profile", path("m_profile_wrong_type.json"), "-B", "4"}),
       {"m_profile_wrong_type.json", "memory_bytes", "'lots'"}, {out}},
      {"cluster: truncated", plan({"--cluster", path("m_cluster_trunc.json"), "--model", "gpt-1.3b", "-B", "4"}),
       {"m_cluster_trunc.json", "not valid JSON"}, {out}},
      {"cluster: wrong-typed number",
       plan({"--cluster", path("m_cluster_wrong_bw.json"), "--model", "gpt-1.3b", "-B", "4"}),
       {"intra_node.bandwidth_GBps", "must be a number"}, {out}},
      {"cluster: wrong-typed array",
       plan({"--cluster", path("m_cluster_wrong_devices.json"), "--model", "gpt-1.3b", "-B", "4"}),
       {"nodes[0].devices", "must be an array"}, {out}},
      {"cluster: oversized device count",
       plan({"--cluster", path("m_cluster_huge_count.json"), "--model", "gpt-1.3b", "-B", "4"}),
       {"nodes[0].devices[0].count", "must lie in"}, {out}},
      {"--global-batch 0", plan({"--profile", good, "-B", "0"}), {"global batch", "got 0"}, {out}},
      {"--global-batch oversized", plan({"--profile", good, "-B", "2000000000"}),
       {"--global-batch 2000000000", "more than the planners handle"}, {out}},
      {"--global-batch beyond int", plan({"--profile", good, "-B", "99999999999"}),
       {"--global-batch 99999999999"}, {out}},
      {"--profile and --cluster", plan({"--profile", good, "--cluster", path("m_cluster.json"), "-B", "4"}),
       {"exactly one of --profile FILE or --cluster FILE"}, {out}},
      {"neither --profile nor --cluster", plan({"-B", "4"}), {"exactly one of --profile FILE or --cluster FILE"},
       {out}},
      {"--cluster without --model", plan({"--cluster", path("m_cluster.json"), "-B", "4"}),
       {"--model is required with --cluster"}, {out}},
      {"--model contradicts the profile", plan({"--profile", good, "--model", "gpt2", "-B", "4"}),
       {"--model gpt2 differs from the profile's model"}, {out}},
      {"--seq 0", plan({"--profile", good, "--seq", "0", "-B", "4"}), {"--seq must be at least 1, got 0"}, {out}},
      {"--seq contradicts the profile", plan({"--profile", good, "--seq", "32", "-B", "4"}),
       {"--seq 32 differs from the profile's seq_len 16"}, {out}},
      {"--dtype contradicts the profile", plan({"--profile", path("m_profile_f32.json"), "--dtype", "bf16", "-B", "4"}),
       {"--dtype bf16 differs from the profile's f32", "gpumix profile --dtype bf16", "drop --dtype"}, {out}},
      {"--dtype unknown", plan({"--profile", good, "--dtype", "fp8", "-B", "4"}), {"--dtype: unknown value 'fp8'"},
       {out}},
      {"profile: unknown dtype", plan({"--profile", path("m_profile_fp16.json"), "-B", "4"}),
       {"m_profile_fp16.json", "profile.dtype: unknown value 'fp16'"}, {out}},
      {"--seq negative", plan({"--cluster", path("m_cluster.json"), "--model", "gpt-1.3b", "--seq", "-5", "-B", "4"}),
       {"--seq", "-5"}, {out}},
      {"--seq longer than the model's", plan({"--cluster", path("m_cluster.json"), "--model", "gpt-1.3b", "--seq",
                                              "100000000", "-B", "4"}),
       {"seq_len", "100000000"}, {out}},
      {"unknown planner", plan({"--profile", good, "--planner", "magic", "-B", "4"}), {"unknown planner 'magic'"},
       {out}},
      {"--out in a missing folder",
       {"plan", "--profile", good, "-B", "4", "--out", path("no_dir/p.json")}, {"no_dir/p.json"}, {path("no_dir")}},
      {"a failure leaves an existing plan alone",
       {"plan", "--profile", path("m_profile_trunc.json"), "-B", "4", "--out", path("m_existing_plan.json")},
       {"not valid JSON"}, {}, {path("m_existing_plan.json")}},
  });
}

TEST_F(BadInputs, Simulate) {
  const std::string svg = path("m_never.svg"), cluster = path("m_cluster.json");
  auto simulate = [&](const std::string& file, std::vector<std::string> extra) {
    std::vector<std::string> args = {"simulate", "--cluster", file, "--model", "gpt-1.3b", "-B", "4", "--svg", svg};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  run_cases({
      {"cluster: missing", simulate(path("nothing.json"), {}), {"nothing.json"}, {svg}},
      {"cluster: truncated", simulate(path("m_cluster_trunc.json"), {}), {"m_cluster_trunc.json", "not valid JSON"},
       {svg}},
      {"cluster: wrong-typed number", simulate(path("m_cluster_wrong_bw.json"), {}),
       {"intra_node.bandwidth_GBps", "must be a number"}, {svg}},
      {"cluster: oversized device count", simulate(path("m_cluster_huge_count.json"), {}),
       {"nodes[0].devices[0].count", "must lie in"}, {svg}},
      {"profile: truncated", simulate(cluster, {"--profile", path("m_profile_trunc.json")}),
       {"m_profile_trunc.json", "not valid JSON"}, {svg}},
      {"profile of another dtype", simulate(cluster, {"--profile", path("m_profile_f32.json")}),
       {"computes in f32 but this simulation in bf16", "--dtype f32", "gpumix profile --dtype bf16"}, {svg}},
      {"--dtype unknown", simulate(cluster, {"--dtype", "half"}), {"--dtype: unknown value 'half'"}, {svg}},
      {"unknown model", {"simulate", "--cluster", cluster, "--model", "gpt-99b", "-B", "4", "--svg", svg},
       {"gpt-99b"}, {svg}},
      {"--global-batch 0", {"simulate", "--cluster", cluster, "--model", "gpt-1.3b", "-B", "0", "--svg", svg},
       {"global batch", "got 0"}, {svg}},
      {"--global-batch oversized",
       {"simulate", "--cluster", cluster, "--model", "gpt-1.3b", "-B", "2000000000", "--svg", svg},
       {"--global-batch 2000000000", "more than the planners handle"}, {svg}},
      {"--seq negative", simulate(cluster, {"--seq", "-5"}), {"--seq must lie in [1, 2048]"}, {svg}},
      {"--seq longer than the model's", simulate(cluster, {"--seq", "4096"}), {"--seq must lie in [1, 2048]"}, {svg}},
      {"--svg in a missing folder",
       {"simulate", "--cluster", cluster, "--model", "gpt-1.3b", "-B", "4", "--svg", path("no_dir/x.svg")},
       {"no_dir/x.svg"}, {path("no_dir")}},
      // Local updates (--sync local:H): the flags' own mistakes, before any planner runs.
      {"--groups without --sync local:H", simulate(cluster, {"--groups", "2"}),
       {"--groups sets up local updates", "give --sync local:H"}, {svg}},
      {"--sync local:0", simulate(cluster, {"--sync", "local:0"}), {"--sync local:0", "must be at least 1"}, {svg}},
      {"--sync local:x", simulate(cluster, {"--sync", "local:x"}), {"H must be a whole number"}, {svg}},
      {"--groups not dividing the ranks", simulate(cluster, {"--sync", "local:10", "--groups", "3"}),
       {"--groups 3 does not divide the 2 ranks", "a divisor of 2"}, {svg}},
  });
}

}  // namespace
