// Checkpoints: round trip, multi-writer / other-layout reading, integrity errors, crash
// leftovers, failed writes, replacement of a step. Each test works in its own folder under
// $TMPDIR (or /tmp).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nn/checkpoint.h"

namespace gpumix {
namespace {

using nlohmann::json;

// ---- helpers -------------------------------------------------------------------------------
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/gpumix_ckpt_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& s) const { return path_ + "/" + s; }

 private:
  std::string path_;
};

bool exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::symlink_status(p, ec));
}

std::string read_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

// The names in dir, sorted (hidden ones too).
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : std::filesystem::directory_iterator(dir)) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

// Deterministic, distinct values per array (no two arrays alike, every element distinct).
std::vector<float> values(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = base + float(i) * 0.001f + std::sin(float(i)) * 1e-4f;
  return v;
}

// Splits n elements by shares into contiguous slices; the last one takes the remainder.
std::vector<std::pair<int64_t, int64_t>> split(int64_t n, const std::vector<double>& shares) {
  std::vector<std::pair<int64_t, int64_t>> r;
  int64_t off = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    int64_t c = i + 1 == shares.size() ? n - off : int64_t(std::llround(double(n) * shares[i]));
    r.emplace_back(off, c);
    off += c;
  }
  return r;
}

json model_a() { return json{{"name", "gpt-nano"}, {"L", 4}, {"NH", 4}, {"C", 128}, {"V", 512}, {"T", 64}}; }

CheckpointMeta meta_a() {
  CheckpointMeta m;
  m.model = model_a();
  m.data_position = {{"batch", 200}, {"epoch", 0}};
  m.rng = {{"seed", 1337}};
  m.tokenizer_hash = 0x0123456789abcdefull;
  m.plan = {{"ranks", 1}};
  m.extra = {{"note", "test"}};
  return m;
}

std::string expect_throw(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg) << "\nlacks: " << (part)

// Saves one checkpoint of three arrays of n elements with a single process.
std::string save_simple(const std::string& out, int64_t step, int64_t n, float base, int64_t block_bytes = 256) {
  std::vector<float> a = values(n, base), m = values(n, base + 1), v = values(n, base + 2);
  return save_checkpoint(out, step, meta_a(),
                         {{"master", a.data(), n}, {"adam_m", m.data(), n}, {"adam_v", v.data(), n}}, block_bytes);
}

// ---- XXH64 ---------------------------------------------------------------------------------
// Bytes (i * 131 + 7) ^ (i >> 8): no two neighbours alike, and every byte value occurs.
std::string xxh_pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char(((i * 131 + 7) ^ (i >> 8)) & 0xff);
  return s;
}

TEST(Checkpoint, Xxh64MatchesReference) {
  // Reference values from libxxhash 0.8.1 (XXH64, seed 0).
  EXPECT_EQ(checkpoint_xxh64("", 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(checkpoint_xxh64("a", 1), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(checkpoint_xxh64("abc", 3), 0x44bc2cf5ad770999ull);
  std::string s;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) s.push_back(char(i));
  s += "xyz";  // 771 bytes
  EXPECT_EQ(checkpoint_xxh64(s.data(), s.size()), 0xe921a1b45bd779f8ull);
  // Streaming in uneven pieces gives the same digest.
  for (size_t piece : {1, 3, 7, 31, 32, 33, 100}) {
    Xxh64 x;
    for (size_t i = 0; i < s.size(); i += piece) x.update(s.data() + i, std::min(piece, s.size() - i));
    EXPECT_EQ(x.digest(), 0xe921a1b45bd779f8ull) << "piece " << piece;
  }
}

TEST(Checkpoint, Xxh64DigestsOfTheHandWrittenImplementation) {
  // Printed by GPUMix's own XXH64 (nn/checkpoint.cpp up to commit bee65ad), before it gave
  // way to libxxhash: checkpoints written then must still verify. The lengths cross every
  // boundary of the algorithm (4- and 8-byte tails, the 32-byte stripe, several stripes).
  const std::pair<size_t, uint64_t> pinned[] = {
      {0, 0xef46db3751d8e999ull},     {1, 0xa96c7f0ce858bbb7ull},      {3, 0xbed43740ee6332bbull},
      {4, 0xfa212ae44b3bb23dull},     {7, 0x2744460dd675d2c0ull},      {8, 0x994b676b71ce94ddull},
      {9, 0x572b84c18b983af8ull},     {15, 0x09e6451ed2ff8b1dull},     {16, 0x94ad0095e72b24d5ull},
      {31, 0x6711d55e306b5d8full},    {32, 0x07f7b8e3bc5d6e25ull},     {33, 0x09f85eeb4e1cbe9full},
      {63, 0xb7c9968c066cb6a5ull},    {64, 0x50d4159a0411632eull},     {65, 0xd277176bff863efcull},
      {100, 0x9ddada11d3dc2d8full},   {255, 0x15a6db05d4e83df4ull},    {256, 0xa2dbe913965256fcull},
      {1000, 0xe680fa9ac84ec77aull},  {4096, 0x366d08e297bd5863ull},   {65537, 0xade2b433d696c22cull},
      {1048576, 0x795fcacebf8a2c43ull}};
  for (const auto& [n, digest] : pinned) {
    const std::string s = xxh_pattern(n);
    EXPECT_EQ(checkpoint_xxh64(s.data(), s.size()), digest) << n << " bytes";
    Xxh64 x;  // the streaming path, in pieces that straddle the 32-byte stripes
    for (size_t i = 0; i < n; i += 45) x.update(s.data() + i, std::min<size_t>(45, n - i));
    EXPECT_EQ(x.digest(), digest) << n << " bytes, streamed";
  }
}

TEST(Checkpoint, CheckpointWrittenByTheHandWrittenXxh64StillLoads) {
  // tests/nn_checkpoint/legacy: a checkpoint of step 7 saved at commit bee65ad (hand-written
  // XXH64) with block_bytes 256, three arrays of 300 elements: element i of array a (master
  // 0, adam_m 1, adam_v 2) is ((i * 37 + a * 11) % 1001 - 500) / 64, exact in fp32.
  const std::string out = GPUMIX_LEGACY_CHECKPOINT_DIR;
  CheckpointReader r = CheckpointReader::open_latest(out);
  EXPECT_EQ(r.step(), 7);
  EXPECT_EQ(r.tokenizer_hash(), 0x0123456789abcdefull);
  EXPECT_NO_THROW(r.verify());
  const std::vector<std::string> names = {"master", "adam_m", "adam_v"};
  ASSERT_EQ(r.array_names(), names);
  for (int a = 0; a < 3; ++a) {
    std::vector<float> got(300), want(300);
    for (int64_t i = 0; i < 300; ++i) want[size_t(i)] = float((i * 37 + a * 11) % 1001 - 500) / 64.0f;
    r.read_slice(names[size_t(a)], 0, got.data(), 300);  // verifies the blocks it reads
    EXPECT_EQ(got, want) << names[size_t(a)];
    r.read_slice(names[size_t(a)], 70, got.data(), 100);  // a slice inside blocks 1 and 2
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + 100, want.begin() + 70)) << names[size_t(a)];
  }
}

// ---- round trip ----------------------------------------------------------------------------
TEST(Checkpoint, SaveLoadRoundTrip) {
  TempDir t;
  const int64_t n = 1003;
  std::vector<float> a = values(n, 0), m = values(n, 1), v = values(n, 2);
  std::string dir = save_checkpoint(t.path(), 200, meta_a(),
                                    {{"master", a.data(), n}, {"adam_m", m.data(), n}, {"adam_v", v.data(), n}});
  EXPECT_EQ(dir, t / "ckpt-000200");
  EXPECT_EQ(read_text(t / "latest"), "ckpt-000200\n");
  EXPECT_TRUE(exists(dir + "/meta.json"));
  EXPECT_TRUE(exists(dir + "/master.bin"));
  // Nothing else is left behind.
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000200", "latest"}));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"adam_m.bin", "adam_v.bin", "master.bin", "meta.json"}));

  CheckpointReader r = CheckpointReader::open_latest(t.path());
  EXPECT_EQ(r.dir(), dir);
  EXPECT_EQ(r.step(), 200);
  EXPECT_EQ(r.model(), model_a());
  EXPECT_EQ(r.data_position()["batch"], 200);
  EXPECT_EQ(r.rng()["seed"], 1337);
  EXPECT_EQ(r.plan()["ranks"], 1);
  EXPECT_EQ(r.extra()["note"], "test");
  EXPECT_EQ(r.tokenizer_hash(), 0x0123456789abcdefull);
  EXPECT_EQ(r.array_names(), (std::vector<std::string>{"master", "adam_m", "adam_v"}));
  EXPECT_EQ(r.array_count("adam_v"), n);
  EXPECT_NO_THROW(r.verify());
  EXPECT_NO_THROW(r.check_model(model_a()));

  std::vector<float> got(static_cast<size_t>(n));
  r.read_slice("master", 0, got.data(), n);
  EXPECT_EQ(got, a);  // bitwise
  r.read_slice("adam_m", 0, got.data(), n);
  EXPECT_EQ(got, m);
  r.read_slice("adam_v", 0, got.data(), n);
  EXPECT_EQ(got, v);

  // The per-array record and the whole-file hash, as xxhsum would print it.
  json meta = r.meta();
  EXPECT_EQ(meta["format"], "gpumix-checkpoint");
  EXPECT_EQ(meta["version"], 1);
  EXPECT_EQ(meta["arrays"][0]["dtype"], "f32");
  EXPECT_EQ(meta["arrays"][0]["count"], n);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)checkpoint_xxh64(a.data(), a.size() * 4));
  EXPECT_EQ(meta["arrays"][0]["xxh64"], hex);

  // Reading an absent array or past the end is a clear error.
  EXPECT_HAS(expect_throw([&] { r.read_slice("grads", 0, got.data(), 1); }), "has no array 'grads'");
  EXPECT_HAS(expect_throw([&] { r.read_slice("master", n - 1, got.data(), 2); }), "the array has 1003 elements");
}

TEST(Checkpoint, NewerStepMovesLatestAndOldOnesStay) {
  TempDir t;
  save_simple(t.path(), 100, 50, 0);
  save_simple(t.path(), 200, 50, 5);
  EXPECT_EQ(read_text(t / "latest"), "ckpt-000200\n");
  EXPECT_EQ(list_checkpoints(t.path()), (std::vector<std::string>{t / "ckpt-000200", t / "ckpt-000100"}));
  CheckpointReader(t / "ckpt-000100").verify();
  CheckpointReader(t / "ckpt-000200").verify();
}

// ---- keeping the newest N -----------------------------------------------------------------
TEST(Checkpoint, PruneKeepsTheNewestNAndTheOneLatestNames) {
  TempDir t;
  for (int64_t step : {100, 200, 300, 400}) save_simple(t.path(), step, 50, float(step));
  EXPECT_EQ(prune_checkpoints(t.path(), 2), (std::vector<std::string>{t / "ckpt-000100", t / "ckpt-000200"}));
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000300", "ckpt-000400", "latest"}));
  CheckpointReader::open_latest(t.path()).verify();
  EXPECT_TRUE(prune_checkpoints(t.path(), 2).empty());  // nothing more to do

  // `latest` naming an older step (a run restarted from there) keeps that one too.
  save_simple(t.path(), 500, 50, 5);
  write_text(t / "latest", "ckpt-000300\n");
  EXPECT_EQ(prune_checkpoints(t.path(), 1), (std::vector<std::string>{t / "ckpt-000400"}));
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000300", "ckpt-000500", "latest"}));
  EXPECT_EQ(CheckpointReader::open_latest(t.path()).step(), 300);

  EXPECT_HAS(expect_throw([&] { prune_checkpoints(t.path(), 0); }), "keep 0 must be at least 1");
}

TEST(Checkpoint, ACrashBetweenCommitAndPruneLeavesAValidLatest) {
  TempDir t;
  save_simple(t.path(), 100, 50, 1);
  save_simple(t.path(), 200, 50, 2);
  // A process commits step 300 and is killed before it prunes.
  const pid_t child = ::fork();
  if (child == 0) {
    save_simple(t.path(), 300, 50, 3);
    ::kill(::getpid(), SIGKILL);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // Every checkpoint is still there and `latest` names the committed one.
  EXPECT_EQ(read_text(t / "latest"), "ckpt-000300\n");
  CheckpointReader r = CheckpointReader::open_latest(t.path());
  EXPECT_EQ(r.step(), 300);
  r.verify();
  EXPECT_EQ(scan_checkpoints(t.path()).steps, (std::vector<int64_t>{100, 200, 300}));
  // The next save's prune catches up.
  save_simple(t.path(), 400, 50, 4);
  prune_checkpoints(t.path(), 2);
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000300", "ckpt-000400", "latest"}));

  // A prune killed after its rename and before the deletion leaves a leftover, which
  // find_latest ignores and remove_checkpoint_leftovers removes.
  std::filesystem::rename(t / "ckpt-000300", t / ".ckpt-000300.old-killed");
  std::string note;
  EXPECT_EQ(*find_latest(t.path(), &note), t / "ckpt-000400");
  EXPECT_HAS(note, "1 leftover(s) of interrupted saves are ignored");
  EXPECT_EQ(remove_checkpoint_leftovers(t.path()), std::vector<std::string>{t / ".ckpt-000300.old-killed"});
}

// ---- several writers, other readers --------------------------------------------------------
void multi_writer_then_read(const std::vector<double>& write_shares, int64_t n, int64_t block_bytes) {
  TempDir t;
  std::vector<std::string> names = {"master", "adam_m", "adam_v"};
  std::vector<std::vector<float>> full = {values(n, 0), values(n, 10), values(n, 20)};
  std::vector<CheckpointArraySpec> specs;
  for (auto& nm : names) specs.push_back({nm, n});

  // Rank 0 begins; every "rank" (a thread) writes its slices from its own buffer; rank 0
  // commits after the join (the barrier).
  CheckpointWriter w;
  std::string tmp = w.begin(t.path(), 300, specs, "", block_bytes);
  auto slices = split(n, write_shares);
  std::vector<std::thread> ranks;
  for (size_t rk = 0; rk < slices.size(); ++rk) {
    ranks.emplace_back([&, rk] {
      int64_t off = slices[rk].first, cnt = slices[rk].second;
      for (size_t a = 0; a < names.size(); ++a) {
        std::vector<float> mine(full[a].begin() + off, full[a].begin() + off + cnt);  // the rank's shard
        CheckpointWriter::write_slice(tmp, names[a], off, cnt ? mine.data() : nullptr, cnt);
      }
    });
  }
  for (auto& th : ranks) th.join();
  std::string dir = w.commit(meta_a());
  CheckpointReader(dir).verify();

  for (const std::vector<double>& read_shares : std::vector<std::vector<double>>{{0.7, 0.3}, {1.0}, {0.0, 0.45, 0.55}}) {
    for (size_t a = 0; a < names.size(); ++a) {
      std::vector<float> assembled;
      for (auto& s : split(n, read_shares)) {
        CheckpointReader r(dir);  // each reader opens the checkpoint on its own
        std::vector<float> part(static_cast<size_t>(s.second));
        r.read_slice(names[a], s.first, part.data(), s.second);
        assembled.insert(assembled.end(), part.begin(), part.end());
      }
      EXPECT_EQ(assembled, full[a]) << names[a] << " read with " << read_shares.size() << " readers";
    }
  }
}

TEST(Checkpoint, ThreeWritersTwoReadersOneReader) {
  // 0.2 / 0.5 / 0.3 of P; small blocks so that slices start and end inside blocks.
  multi_writer_then_read({0.2, 0.5, 0.3}, 1003, 64);
  multi_writer_then_read({0.2, 0.5, 0.3}, 1003, 1 << 20);  // one block per file
}

TEST(Checkpoint, ZeroLengthSlices) {
  multi_writer_then_read({0.0, 0.3, 0.7}, 997, 64);
  multi_writer_then_read({0.5, 0.0, 0.5}, 10, 64);
  // A zero-length read needs no buffer.
  TempDir t;
  std::string dir = save_simple(t.path(), 1, 10, 0);
  CheckpointReader r(dir);
  EXPECT_NO_THROW(r.read_slice("master", 10, nullptr, 0));
  EXPECT_NO_THROW(r.read_slice("master", 0, nullptr, 0));
}

TEST(Checkpoint, PerUnitSlicesLikeAShardLayout) {
  // Each rank holds a slice of every unit (embedding, blocks, head): several slices per
  // rank per array, read back whole.
  TempDir t;
  std::vector<int64_t> units = {300, 120, 120, 7};
  int64_t n = 0;
  for (int64_t u : units) n += u;
  std::vector<float> full = values(n, 3);
  CheckpointWriter w;
  std::string tmp = w.begin(t.path(), 5, {{"master", n}}, "run42", 64);
  EXPECT_EQ(tmp, checkpoint_temp_dir(t.path(), 5, "run42"));  // every rank can compute it
  std::vector<std::thread> ranks;
  for (int rk = 0; rk < 3; ++rk) {
    ranks.emplace_back([&, rk] {
      int64_t base = 0;
      for (int64_t u : units) {
        auto s = split(u, {0.2, 0.5, 0.3})[size_t(rk)];
        CheckpointWriter::write_slice(tmp, "master", base + s.first, full.data() + base + s.first, s.second);
        base += u;
      }
    });
  }
  for (auto& th : ranks) th.join();
  std::string dir = w.commit(meta_a());
  CheckpointReader r(dir);
  r.verify();
  std::vector<float> got(static_cast<size_t>(n));
  r.read_slice("master", 0, got.data(), n);
  EXPECT_EQ(got, full);
}

TEST(Checkpoint, CommitRefusesMissingOrOverlappingSlices) {
  TempDir t;
  std::vector<float> a = values(100, 0);
  {
    CheckpointWriter w;
    std::string tmp = w.begin(t.path(), 7, {{"master", 100}});
    CheckpointWriter::write_slice(tmp, "master", 0, a.data(), 20);
    CheckpointWriter::write_slice(tmp, "master", 70, a.data() + 70, 30);  // [20, 70) missing
    std::string msg = expect_throw([&] { w.commit(meta_a()); });
    EXPECT_HAS(msg, "elements [20, 70) of array 'master' were written by no rank");
    EXPECT_FALSE(exists(tmp));
  }
  {
    CheckpointWriter w;
    std::string tmp = w.begin(t.path(), 7, {{"master", 100}});
    CheckpointWriter::write_slice(tmp, "master", 0, a.data(), 60);
    CheckpointWriter::write_slice(tmp, "master", 50, a.data() + 50, 50);
    EXPECT_HAS(expect_throw([&] { w.commit(meta_a()); }), "the ranks disagree about the layout");
    EXPECT_FALSE(exists(tmp));
  }
  {
    CheckpointWriter w;
    std::string tmp = w.begin(t.path(), 7, {{"master", 100}});
    EXPECT_HAS(expect_throw([&] { CheckpointWriter::write_slice(tmp, "master", 90, a.data(), 20); }),
               "lies outside its 100 elements");
    EXPECT_HAS(expect_throw([&] { CheckpointWriter::write_slice(tmp, "adam_m", 0, a.data(), 1); }),
               "array 'adam_m' is not part of the save");
    EXPECT_HAS(expect_throw([&] { CheckpointWriter::write_slice(t / "nowhere", "master", 0, a.data(), 1); }),
               "does not exist: rank 0 must call begin()");
  }
  // Nothing was committed.
  EXPECT_EQ(entries(t.path()), std::vector<std::string>{});
}

// ---- integrity -----------------------------------------------------------------------------
TEST(Checkpoint, CorruptedFileIsNamed) {
  TempDir t;
  save_simple(t.path(), 100, 500, 0);
  std::string dir = save_simple(t.path(), 200, 500, 1);
  // Flip one byte in the middle of adam_m.bin.
  std::string file = dir + "/adam_m.bin";
  std::string bytes = read_text(file);
  bytes[777] = char(bytes[777] ^ 0x10);
  write_text(file, bytes);

  CheckpointReader r(dir);  // size is right: opening succeeds
  std::string msg = expect_throw([&] { r.verify(); });
  EXPECT_HAS(msg, file);
  EXPECT_HAS(msg, "XXH64 is");
  EXPECT_HAS(msg, "but meta.json records");
  EXPECT_HAS(msg, "[768, 1024)");  // the differing 256-byte block
  EXPECT_HAS(msg, "the checkpoint is corrupted; resume from an earlier one: " + t / "ckpt-000100");

  // Reading a slice that touches the bad block fails; one that does not, succeeds.
  std::vector<float> out(500);
  msg = expect_throw([&] { r.read_slice("adam_m", 190, out.data(), 10); });
  EXPECT_HAS(msg, file);
  EXPECT_HAS(msg, "the checkpoint is corrupted");
  EXPECT_NO_THROW(r.read_slice("adam_m", 0, out.data(), 150));
  EXPECT_NO_THROW(r.read_slice("master", 0, out.data(), 500));
}

TEST(Checkpoint, TruncatedFileIsNamed) {
  TempDir t;
  std::string dir = save_simple(t.path(), 100, 500, 0);
  std::string file = dir + "/master.bin";
  ASSERT_EQ(::truncate(file.c_str(), 1000), 0);
  std::string msg = expect_throw([&] { CheckpointReader r(dir); });
  EXPECT_HAS(msg, file + " has 1000 bytes but meta.json expects 2000 (500 fp32 elements): the file is truncated");
  EXPECT_HAS(msg, "there is no other checkpoint in " + t.path());

  ASSERT_EQ(::unlink(file.c_str()), 0);
  EXPECT_HAS(expect_throw([&] { CheckpointReader r(dir); }), file + " is missing");
}

TEST(Checkpoint, MissingOrBrokenMeta) {
  TempDir t;
  save_simple(t.path(), 100, 20, 0);
  std::string dir = save_simple(t.path(), 200, 20, 0);
  std::string meta = read_text(dir + "/meta.json");
  ASSERT_EQ(::unlink((dir + "/meta.json").c_str()), 0);
  std::string msg = expect_throw([&] { CheckpointReader r(dir); });
  EXPECT_HAS(msg, dir + "/meta.json is missing");
  EXPECT_HAS(msg, "not a complete checkpoint");
  EXPECT_HAS(msg, t / "ckpt-000100");

  write_text(dir + "/meta.json", meta.substr(0, meta.size() / 2));  // cut short
  msg = expect_throw([&] { CheckpointReader r(dir); });
  EXPECT_HAS(msg, "meta.json is not valid JSON");
  EXPECT_HAS(msg, "the checkpoint is corrupted");

  json j = json::parse(meta);
  j["arrays"][1].erase("count");
  write_text(dir + "/meta.json", j.dump());
  EXPECT_HAS(expect_throw([&] { CheckpointReader r(dir); }), "field 'arrays[1].count' is missing");

  j = json::parse(meta);
  j["version"] = 99;
  write_text(dir + "/meta.json", j.dump());
  EXPECT_HAS(expect_throw([&] { CheckpointReader r(dir); }), "format version 99 but this build reads version 1");

  EXPECT_HAS(expect_throw([&] { CheckpointReader r(t / "ckpt-000999"); }), "does not exist; checkpoints there: ");
}

TEST(Checkpoint, OtherModelConfigIsAClearError) {
  TempDir t;
  std::string dir = save_simple(t.path(), 100, 20, 0);
  CheckpointReader r(dir);
  json other = model_a();
  other["L"] = 6;
  other["C"] = 384;
  std::string msg = expect_throw([&] { r.check_model(other); });
  EXPECT_HAS(msg, "checkpoint " + dir + " was written for model {C=128, L=4, NH=4, T=64, V=512, name=gpt-nano}");
  EXPECT_HAS(msg, "but the current model is {C=384, L=6,");
  EXPECT_HAS(msg, "differs in C: 128 vs 384, L: 4 vs 6");
  EXPECT_HAS(msg, "use the same --model (or the same --init-from, for a run that started from one) or start a new run");
  EXPECT_NO_THROW(check_model_config(dir, model_a(), model_a()));
}

// ---- crashes and leftovers -----------------------------------------------------------------
TEST(Checkpoint, FindLatestFallsBackAfterACrash) {
  TempDir t;
  EXPECT_FALSE(find_latest(t.path()).has_value());
  EXPECT_HAS(expect_throw([&] { CheckpointReader::open_latest(t.path()); }), "no checkpoint in " + t.path());

  save_simple(t.path(), 100, 20, 0);
  save_simple(t.path(), 200, 20, 1);
  // A save of step 300 that crashed mid-write: a temp folder with partial data, no meta.json.
  {
    CheckpointWriter w;
    std::string tmp = w.begin(t.path(), 300, {{"master", 20}}, "crashed1");
    std::vector<float> a = values(10, 0);
    CheckpointWriter::write_slice(tmp, "master", 0, a.data(), 10);
    std::string copy = t / ".ckpt-000300.tmp-crashed2";
    std::filesystem::copy(tmp, copy, std::filesystem::copy_options::recursive);  // survives like a crash
  }  // the writer's destructor removed its own temp folder
  EXPECT_FALSE(exists(t / ".ckpt-000300.tmp-crashed1"));
  // A folder that lost its meta.json, and a stale `latest` naming a missing folder.
  std::filesystem::copy(t / "ckpt-000200", t / "ckpt-000350", std::filesystem::copy_options::recursive);
  ASSERT_EQ(::unlink((t / "ckpt-000350/meta.json").c_str()), 0);
  write_text(t / "latest", "ckpt-000400\n");

  std::string note;
  auto found = find_latest(t.path(), &note);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, t / "ckpt-000200");
  EXPECT_HAS(note, "names ckpt-000400, which is missing or incomplete");
  EXPECT_HAS(note, "using the newest complete checkpoint, " + t / "ckpt-000200");
  EXPECT_HAS(note, "1 leftover(s) of interrupted saves are ignored: " + t / ".ckpt-000300.tmp-crashed2");
  EXPECT_EQ(CheckpointReader::open_latest(t.path()).step(), 200);

  // `latest` missing altogether.
  ASSERT_EQ(::unlink((t / "latest").c_str()), 0);
  found = find_latest(t.path(), &note);
  EXPECT_EQ(*found, t / "ckpt-000200");
  EXPECT_HAS(note, "is missing or empty");

  // `latest` naming an older complete checkpoint is honoured.
  write_text(t / "latest", "ckpt-000100\n");
  found = find_latest(t.path(), &note);
  EXPECT_EQ(*found, t / "ckpt-000100");

  // Cleaning the leftovers.
  auto removed = remove_checkpoint_leftovers(t.path());
  EXPECT_EQ(removed, std::vector<std::string>{t / ".ckpt-000300.tmp-crashed2"});
  EXPECT_FALSE(exists(t / ".ckpt-000300.tmp-crashed2"));
  EXPECT_TRUE(exists(t / "ckpt-000100/meta.json"));
  find_latest(t.path(), &note);
  EXPECT_EQ(note, "");
}

// ---- failed writes -------------------------------------------------------------------------
// Lowers the soft RLIMIT_FSIZE of this process: the kernel then fails writes past `bytes`
// of any regular file with EFBIG (SIGXFSZ ignored), a real write error, no privileges
// needed. Restored on scope exit.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    struct rlimit l = old_;
    l.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &l) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  struct rlimit old_;
  void (*old_handler_)(int);
  bool ok_ = false;
};

TEST(Checkpoint, FailedDataWriteKeepsThePreviousCheckpoint) {
  TempDir t;
  std::string prev = save_simple(t.path(), 100, 1000, 0);
  const int64_t n = 1000;
  std::vector<float> a = values(n, 9);
  std::string tmp;
  {
    CheckpointWriter w;
    tmp = w.begin(t.path(), 200, {{"master", n}});
    CheckpointWriter::write_slice(tmp, "master", 0, a.data(), 100);  // bytes [0, 400): fine
    std::string msg;
    {
      FileSizeLimit limit(1024);
      ASSERT_TRUE(limit.ok());
      msg = expect_throw([&] { CheckpointWriter::write_slice(tmp, "master", 100, a.data() + 100, 900); });
    }
    EXPECT_HAS(msg, tmp + "/master.bin failed: File too large");
    EXPECT_HAS(msg, "ulimit -f");
    EXPECT_TRUE(exists(tmp));
    // The caller's error path: rank 0 aborts (here: the writer goes out of scope).
  }
  EXPECT_FALSE(exists(tmp));
  EXPECT_EQ(read_text(t / "latest"), "ckpt-000100\n");
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000100", "latest"}));
  CheckpointReader(prev).verify();
}

TEST(Checkpoint, FailedCommitKeepsTheSameStepsOldFolder) {
  TempDir t;
  std::string prev = save_simple(t.path(), 100, 50, 0);
  std::string old_meta = read_text(prev + "/meta.json");
  std::vector<float> a = values(50, 7);
  {
    CheckpointWriter w;
    std::string tmp = w.begin(t.path(), 100, {{"master", 50}});
    CheckpointWriter::write_slice(tmp, "master", 0, a.data(), 50);
    std::string msg;
    {
      FileSizeLimit limit(100);  // meta.json is longer than 100 bytes
      ASSERT_TRUE(limit.ok());
      msg = expect_throw([&] { w.commit(meta_a()); });
    }
    EXPECT_HAS(msg, tmp + "/meta.json failed: File too large");
    EXPECT_FALSE(exists(tmp));  // commit cleaned up after itself
  }
  EXPECT_EQ(read_text(prev + "/meta.json"), old_meta);
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000100", "latest"}));
  CheckpointReader r(prev);
  r.verify();
  EXPECT_EQ(r.array_names().size(), 3u);
}

TEST(Checkpoint, NotEnoughSpaceIsRefusedUpFront) {
  TempDir t;
  save_simple(t.path(), 100, 20, 0);
  CheckpointWriter w;
  std::string msg = expect_throw([&] { w.begin(t.path(), 200, {{"master", int64_t(1) << 55}}); });
  EXPECT_HAS(msg, "not enough space for checkpoint step 200 in " + t.path() + ": it needs 128.0 PiB");
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000100", "latest"}));
}

// ---- replacing a step ----------------------------------------------------------------------
TEST(Checkpoint, ReplacingAStepKeepsTheOldOneUntilTheNewIsComplete) {
  TempDir t;
  const int64_t n = 300;
  std::string dir = save_simple(t.path(), 100, n, 0);
  std::vector<float> old_master = values(n, 0), new_master = values(n, 42);

  CheckpointWriter w;
  std::string tmp = w.begin(t.path(), 100, {{"master", n}});
  auto s = split(n, {0.5, 0.5});
  CheckpointWriter::write_slice(tmp, "master", s[0].first, new_master.data(), s[0].second);
  // Mid-save: the old folder is untouched and still what `latest` names.
  {
    CheckpointReader r = CheckpointReader::open_latest(t.path());
    EXPECT_EQ(r.dir(), dir);
    r.verify();
    std::vector<float> got(static_cast<size_t>(n));
    r.read_slice("master", 0, got.data(), n);
    EXPECT_EQ(got, old_master);
    EXPECT_EQ(r.array_names().size(), 3u);
  }
  CheckpointWriter::write_slice(tmp, "master", s[1].first, new_master.data() + s[1].first, s[1].second);
  EXPECT_EQ(w.commit(meta_a()), dir);

  CheckpointReader r(dir);
  r.verify();
  EXPECT_EQ(r.array_names(), std::vector<std::string>{"master"});
  std::vector<float> got(static_cast<size_t>(n));
  r.read_slice("master", 0, got.data(), n);
  EXPECT_EQ(got, new_master);
  // No temporary or old folder is left.
  EXPECT_EQ(entries(t.path()), (std::vector<std::string>{"ckpt-000100", "latest"}));
}

TEST(Checkpoint, BadArgumentsAreRefused) {
  TempDir t;
  CheckpointWriter w;
  EXPECT_HAS(expect_throw([&] { w.begin(t.path(), -1, {{"master", 1}}); }), "is negative");
  EXPECT_HAS(expect_throw([&] { w.begin(t.path(), 1, {{"../x", 1}}); }), "array name '../x'");
  EXPECT_HAS(expect_throw([&] { w.begin(t.path(), 1, {{"a", 1}, {"a", 2}}); }), "listed twice");
  EXPECT_HAS(expect_throw([&] { w.begin(t.path(), 1, {{"a", 1}}, "bad/nonce"); }), "nonce");
  EXPECT_HAS(expect_throw([&] { w.begin(t.path(), 1, {{"a", 1}}, "", 6); }), "multiple of 4");
  EXPECT_HAS(expect_throw([&] { w.commit(meta_a()); }), "no save was begun");
  w.begin(t.path(), 1, {{"a", 1}}, "n1");
  EXPECT_HAS(expect_throw([&] { w.begin(t.path(), 2, {{"a", 1}}); }), "is still open");
  CheckpointWriter w2;
  EXPECT_HAS(expect_throw([&] { w2.begin(t.path(), 1, {{"a", 1}}, "n1"); }), "already exists");
}

}  // namespace
}  // namespace gpumix

// ---- regressions found by tests/fuzz/fuzz_checkpoint_meta ---------------------------------
namespace gpumix {
namespace {

// A count or block size so large that count * 4 or the block arithmetic overflowed int64
// (undefined behaviour) must be rejected as a corrupted field, naming it.
TEST(CheckpointFuzzRegression, HugeCountAndBlockBytesAreRejected) {
  TempDir t;
  const std::vector<float> x(16, 1.5f);
  const std::string dir = save_checkpoint(t.path(), 1, CheckpointMeta{}, {{"master", x.data(), 16}}, 16);
  const json good = json::parse(read_text(dir + "/meta.json"));
  json j = good;
  j["arrays"][0]["count"] = int64_t(4611686018427387904);  // 2^62: * 4 overflows
  write_text(dir + "/meta.json", j.dump());
  try {
    CheckpointReader r(dir);
    FAIL() << "a count of 2^62 was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("count"), std::string::npos) << e.what();
  }
  j = good;
  j["block_bytes"] = int64_t(9223372036854775804);  // INT64_MAX rounded to a multiple of 4
  write_text(dir + "/meta.json", j.dump());
  try {
    CheckpointReader r(dir);
    FAIL() << "block_bytes near INT64_MAX was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("block_bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpumix
