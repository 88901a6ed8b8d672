// Checkpoints: a folder per step holding meta.json and one FULL, layout-independent fp32
// array per logical tensor set (master weights, AdamW m, AdamW v, ...), each of the whole
// model's P parameters in the model's stable parameter order. Writers may be several
// ranks, each writing only its slice [offset, offset + count) of each array; a reader on
// another layout (other ranks, other shares) reads its own slices. A single process is
// one rank whose slice covers everything.
//
// On disk, under the output folder <out>:
//   <out>/ckpt-000200/meta.json     format, version, step, the caller's JSON (model config,
//                                   data position, RNG, plan, extra), tokenizer hash, and
//                                   per array: name, file, dtype "f32", count, bytes, the
//                                   XXH64 of the whole file and of each block of it
//   <out>/ckpt-000200/master.bin    count * 4 bytes, little-endian IEEE fp32, no header
//   <out>/ckpt-000200/adam_m.bin ...
//   <out>/latest                    "ckpt-000200\n": the checkpoint to resume from
//
// Atomicity: a save writes into <out>/.ckpt-000200.tmp-<nonce>/, fsyncs every file, writes
// meta.json last, then renames the folder to ckpt-000200 (an existing ckpt-000200 is
// swapped out atomically with renameat2(RENAME_EXCHANGE) and only then deleted), then
// replaces <out>/latest by write-temp-and-rename. A crash at any point leaves the
// previous checkpoint and `latest` usable; a folder without meta.json is never complete.
//
// Integrity: XXH64 (seed 0, through libxxhash; `xxhsum -H1 master.bin` prints the same
// value). The committing rank re-reads the complete files
// after every rank has written its slices, so the checksum covers what is really on disk
// and no per-slice hashes have to be communicated. Besides the whole-file hash, meta.json
// holds one hash per block (16 MiB by default), so that each rank of a resume can verify
// exactly the blocks its slices touch without reading the whole file; verify() checks
// everything.
//
// Multi-rank protocol (ranks may be threads or processes; this code does no communication,
// the caller sequences the steps with its own barriers):
//   rank 0:     CheckpointWriter w; std::string tmp = w.begin(out, step, {{"master", P}, ...});
//               (send `tmp` to the other ranks, or let every rank compute it with
//                checkpoint_temp_dir(out, step, nonce) from a nonce they agree on)
//   barrier
//   every rank: CheckpointWriter::write_slice(tmp, "master", offset, data, count); ...
//   barrier
//   rank 0:     std::string dir = w.commit(meta);   // checks every element was written
// On an error on any rank, rank 0 calls w.abort() (the destructor of an uncommitted writer
// does it too): the temporary folder goes, the previous checkpoint is never touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct XXH64_state_s;  // libxxhash's streaming state (xxhash.h)

namespace gpumix {

inline constexpr int checkpoint_format_version = 1;
inline constexpr int64_t checkpoint_default_block_bytes = int64_t(16) << 20;

// Every failure of this file: the message names the file, what is wrong (expected vs
// found, or the OS error) and what to do.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// XXH64 with seed 0, streaming: libxxhash's, behind a small owner of its state (xxhash.h
// stays out of this header).
class Xxh64 {
 public:
  Xxh64();
  ~Xxh64();
  Xxh64(const Xxh64&) = delete;
  Xxh64& operator=(const Xxh64&) = delete;
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  ::XXH64_state_s* state_;
};
uint64_t checkpoint_xxh64(const void* data, size_t size);

// What the caller knows about the run, stored verbatim in meta.json. Every JSON field may
// be null (not known / not used).
struct CheckpointMeta {
  nlohmann::json model;          // model config, e.g. {"L": 4, "NH": 4, "C": 128, ...}
  nlohmann::json data_position;  // where the data loader resumes, e.g. {"batch": 200}
  nlohmann::json rng;            // RNG seed and/or state
  uint64_t tokenizer_hash = 0;   // 0 when unknown; stored as 16 hex digits
  nlohmann::json plan;           // the plan the checkpoint was written under
  nlohmann::json extra;          // anything else
};

// One array of a checkpoint: its name (letters, digits, '_', '-', '.'; the file is
// <name>.bin) and its element count (the whole model's, not a slice's).
struct CheckpointArraySpec {
  std::string name;
  int64_t count = 0;
};

// Step folder name: "ckpt-000200" (at least six digits).
std::string checkpoint_folder_name(int64_t step);
// Where begin(out_dir, step, ..., nonce) puts the temporary folder, so that every rank can
// compute it from a nonce the ranks agreed on.
std::string checkpoint_temp_dir(const std::string& out_dir, int64_t step, const std::string& nonce);

class CheckpointWriter {
 public:
  CheckpointWriter() = default;
  ~CheckpointWriter();  // abort()s a begun, uncommitted save; never throws
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Rank 0. Creates out_dir if needed and the temporary folder, and preallocates every
  // array's file (fallocate where the file system supports it, so that a full disk shows
  // here, with the numbers, and not halfway through). `nonce` (letters and digits) names
  // the temporary folder; empty: a random one. block_bytes: the granularity of the
  // per-block hashes (a positive multiple of 4). Returns the temporary folder.
  std::string begin(const std::string& out_dir, int64_t step,
                    const std::vector<CheckpointArraySpec>& arrays, const std::string& nonce = "",
                    int64_t block_bytes = checkpoint_default_block_bytes);

  // Any rank, any thread, between begin and commit: writes data[0, count) at elements
  // [offset, offset + count) of the array `name` in the temporary folder, fsyncs it and
  // records the slice (commit checks that the slices cover each array exactly once). A
  // zero-length slice is allowed (data may then be null). Throws CheckpointError on a bad
  // range or a failed write (with the OS error; the disk may be full).
  static void write_slice(const std::string& tmp_dir, const std::string& name, int64_t offset,
                          const float* data, int64_t count);

  // Rank 0, after every rank's write_slice. Checks that every element of every array was
  // written exactly once, hashes the files, writes meta.json, fsyncs, renames the folder to
  // <out>/ckpt-<step> (replacing an existing one only once the new one is complete) and
  // points <out>/latest at it. Returns the final folder. On failure the temporary folder is
  // removed and the previous checkpoints and `latest` are as they were.
  std::string commit(const CheckpointMeta& meta);

  // Removes the temporary folder of a begun save. Safe to call more than once.
  void abort() noexcept;

  const std::string& tmp_dir() const { return tmp_dir_; }

 private:
  std::string out_dir_;
  std::string tmp_dir_;
  std::string nonce_;
  int64_t step_ = -1;
  int64_t block_bytes_ = checkpoint_default_block_bytes;
  std::vector<CheckpointArraySpec> arrays_;
  bool active_ = false;
};

// One array of a single-process save.
struct CheckpointArray {
  std::string name;
  const float* data = nullptr;
  int64_t count = 0;
};

// The whole protocol in one call, for a single process. Returns the final folder.
std::string save_checkpoint(const std::string& out_dir, int64_t step, const CheckpointMeta& meta,
                            const std::vector<CheckpointArray>& arrays,
                            int64_t block_bytes = checkpoint_default_block_bytes);

// What an output folder holds.
struct CheckpointScan {
  std::vector<std::string> complete;   // ckpt-<step> folders with meta.json, by step, oldest first
  std::vector<int64_t> steps;          // their steps
  std::vector<std::string> leftovers;  // .ckpt-*.tmp-* / .ckpt-*.old-* / latest.tmp-* (interrupted saves)
  std::string latest_name;             // what <out>/latest names ("" when missing or unreadable)
};
CheckpointScan scan_checkpoints(const std::string& out_dir);
// The checkpoint folders of out_dir, newest first (full paths).
std::vector<std::string> list_checkpoints(const std::string& out_dir);

// The checkpoint to resume from: the folder that <out>/latest names when it is complete;
// otherwise (latest missing, unreadable, or naming a missing or incomplete folder) the
// complete folder with the highest step. nullopt when there is none. Leftovers of
// interrupted saves are ignored. When `note` is given, it receives a human-readable
// explanation of any fallback and of leftovers (empty when all is well).
std::optional<std::string> find_latest(const std::string& out_dir, std::string* note = nullptr);
// Deletes the leftovers of interrupted saves (only when no save is running into out_dir).
// Returns what it removed.
std::vector<std::string> remove_checkpoint_leftovers(const std::string& out_dir);

// Keeps the newest `keep` (>= 1) complete checkpoints of out_dir, by step, and the one
// <out>/latest names whatever its step; deletes the other complete ones, oldest first. Each
// goes by a rename to a .ckpt-<step>.old-<nonce> leftover and then deletion, so a crash in
// between leaves a leftover that find_latest ignores, never a half-deleted checkpoint.
// Call it after commit(): `latest` then names the new checkpoint, so the one it named
// before stays until the next is committed. Returns the folders it deleted.
std::vector<std::string> prune_checkpoints(const std::string& out_dir, int keep);

// Throws CheckpointError when the saved model config differs from the current one:
// "checkpoint <dir> was written for model {C=128, L=4, ...} but the current model is
// {C=384, L=6, ...} (differs in C: 128 vs 384, L: 4 vs 6); use the same --model or start a
// new run".
void check_model_config(const std::string& dir, const nlohmann::json& saved,
                        const nlohmann::json& current);

class CheckpointReader {
 public:
  // Reads and validates meta.json and checks that every array file exists with the right
  // size. Throws CheckpointError naming the file and listing earlier checkpoints.
  explicit CheckpointReader(const std::string& dir);
  // The checkpoint find_latest picks; throws CheckpointError when there is none.
  static CheckpointReader open_latest(const std::string& out_dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& meta() const { return meta_; }  // the whole meta.json
  int64_t step() const;
  const nlohmann::json& model() const { return meta_.at("model"); }
  const nlohmann::json& data_position() const { return meta_.at("data_position"); }
  const nlohmann::json& rng() const { return meta_.at("rng"); }
  const nlohmann::json& plan() const { return meta_.at("plan"); }
  const nlohmann::json& extra() const { return meta_.at("extra"); }
  uint64_t tokenizer_hash() const;

  std::vector<std::string> array_names() const;
  bool has_array(const std::string& name) const;
  int64_t array_count(const std::string& name) const;  // throws when absent

  // Reads elements [offset, offset + count) of array `name` into out. When verify_blocks is
  // on (the default), the blocks the slice touches are read whole and checked against
  // their hashes; a mismatch throws CheckpointError naming the file.
  void read_slice(const std::string& name, int64_t offset, float* out, int64_t count) const;
  void set_verify_blocks(bool on) { verify_blocks_ = on; }

  // Re-reads every array file whole and checks its hashes. Throws CheckpointError.
  void verify() const;

  // check_model_config(dir(), model(), current).
  void check_model(const nlohmann::json& current) const;

 private:
  struct Array {
    std::string name, file;
    int64_t count = 0;
    uint64_t xxh64 = 0;
    std::vector<uint64_t> blocks;
  };
  const Array& array(const std::string& name) const;
  [[noreturn]] void corrupted(const std::string& what) const;

  std::string dir_;
  nlohmann::json meta_;
  int64_t block_bytes_ = 0;
  std::vector<Array> arrays_;
  bool verify_blocks_ = true;
};

}  // namespace gpumix
