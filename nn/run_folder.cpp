#include "nn/run_folder.h"

#include <filesystem>

#include "core/error.h"

namespace gpumix {

namespace fs = std::filesystem;

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
  return tok;
}

}  // namespace gpumix
