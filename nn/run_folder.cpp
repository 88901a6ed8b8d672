#include "nn/run_folder.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"

namespace gpumix {

namespace fs = std::filesystem;

namespace {

// As meta.json writes a tokenizer_hash: 16 hex digits.
std::string str_hex(uint64_t h) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)h);
  return text;
}

}  // namespace

std::string run_folder_of(const std::string& where) {
  const fs::path p = fs::path(where).lexically_normal();
  const fs::path folder = p.has_filename() ? p : p.parent_path();  // "runs/a/" -> "runs/a"
  if (!fs::exists(folder / "meta.json")) return folder.string();
  return folder.has_parent_path() ? folder.parent_path().string() : ".";
}

CheckpointReader open_checkpoint(const std::string& where) {
  GPUMIX_CHECK_INPUT(fs::exists(where), "checkpoint or run folder '", where, "' does not exist");
  if (fs::exists(fs::path(where) / "meta.json")) return CheckpointReader(where);
  return CheckpointReader::open_latest(where);
}

data::Tokenizer checkpoint_tokenizer(const CheckpointReader& reader, int64_t vocab) {
  const std::string& dir = reader.dir();
  const fs::path tok_path = fs::path(run_folder_of(dir)) / kRunTokenizerFile;
  GPUMIX_CHECK_INPUT(fs::exists(tok_path), "no tokenizer next to checkpoint ", dir, " (expected ",
               tok_path.string(), "; a run trained on token ids has none: pass --prompt-ids)");
  data::Tokenizer tok = data::Tokenizer::load(tok_path.string());
  GPUMIX_CHECK_INPUT(tok.vocab_size() == vocab, "tokenizer ", tok_path.string(), " has vocabulary ", tok.vocab_size(),
               " but the model has ", vocab);
  const uint64_t trained_with = reader.tokenizer_hash();  // 0: not recorded (older checkpoints)
  GPUMIX_CHECK_INPUT(trained_with == 0 || trained_with == tok.hash(), "tokenizer ", tok_path.string(),
                     " is not the one checkpoint ", dir, " was trained with (its hash ", str_hex(tok.hash()),
                     ", the checkpoint's tokenizer_hash ", str_hex(trained_with), "); put that tokenizer there");
  return tok;
}

void keep_run_tokenizer(const std::string& tokenizer_path, uint64_t hash, const std::string& out) {
  const fs::path kept = fs::path(out) / kRunTokenizerFile;
  if (fs::exists(kept) && fs::equivalent(kept, tokenizer_path)) return;
  if (fs::exists(kept)) {
    const uint64_t there = data::Tokenizer::load(kept.string()).hash();
    GPUMIX_CHECK_INPUT(there == hash, "run folder ", out, " holds a tokenizer (", kept.string(), ") other than --tokenizer ",
                       tokenizer_path, "; pass another --out, or the --tokenizer this run folder was trained with");
    return;
  }
  fs::create_directories(out);
  fs::copy_file(tokenizer_path, kept);
  log_info("tokenizer ", tokenizer_path, " -> ", kept.string(), " (the run folder keeps a copy)");
}

}  // namespace gpumix
