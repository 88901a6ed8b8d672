#include "nn/run_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/log.h"
#include "nn/data/bpe.h"
#include "nn/data/shards.h"
#include "nn/gpt_config.h"
#include "nn/run_folder.h"

namespace gpumix {

namespace fs = std::filesystem;

namespace {

// True when the first bytes of a file hold a NUL byte: binary data (a token file whose
// header is damaged, a checkpoint array...), never a text corpus.
bool looks_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[64] = {};
  in.read(head, sizeof head);
  return std::find(head, head + in.gcount(), '\0') != head + in.gcount();
}

}  // namespace

RunData prepare_data(const TrainOptions& o, bool may_train_tokenizer) {
  if (o.token_data) {
    RunData d;
    GPUMIX_CHECK_INPUT(o.token_count > 0 && o.token_vocab > 0, "caller tokens: ", o.token_count,
                       " tokens with vocabulary ", o.token_vocab, "; both must be positive");
    for (int64_t i = 0; i < o.token_count; ++i)
      GPUMIX_CHECK_INPUT(o.token_data[i] >= 0 && o.token_data[i] < o.token_vocab, "caller tokens: token ",
                         o.token_data[i], " at position ", i, " is outside the vocabulary of ", o.token_vocab);
    d.tokens = data::TokenView(o.token_data, (size_t)o.token_count);
    d.vocab = o.token_vocab;
    d.tokenizer_path = "(none: tokens from the caller)";
    d.format = "tokens from the caller";
    return d;
  }
  GPUMIX_CHECK_INPUT(!o.data.empty(), "no training data: pass --data FILE (a text corpus, a folder of "
                     "fortune files, or a token file from `gpumix tokenizer encode`)");
  RunData d;
  d.tokenizer_path = o.tokenizer.empty() ? (fs::path(o.out) / kRunTokenizerFile).string() : o.tokenizer;
  if (o.tokenizer.empty() && !o.resume.empty() && may_train_tokenizer && !fs::exists(d.tokenizer_path)) {
    // A run resumed into another folder takes the tokenizer of the run it continues.
    const fs::path resumed = fs::path(run_folder_of(o.resume)) / kRunTokenizerFile;
    GPUMIX_CHECK_INPUT(fs::exists(resumed), "--resume ", o.resume, ": its run folder has no ", kRunTokenizerFile,
                       " (expected ", resumed.string(), "); pass the --tokenizer the run was trained with");
    fs::create_directories(o.out);
    fs::copy_file(resumed, d.tokenizer_path);
  }
  // With --init-from the run's tokenizer is the folder's: rank 0 saves it into the run folder
  // once the data is known good, and the other ranks load it from there.
  std::optional<data::Tokenizer> imported;
  if (!o.init_from.empty() && may_train_tokenizer) {
    imported = data::Tokenizer::load(o.init_from);
    GPUMIX_CHECK_INPUT(!fs::exists(d.tokenizer_path) || data::Tokenizer::load(d.tokenizer_path).hash() == imported->hash(),
                 "run folder ", o.out, " holds a tokenizer (", d.tokenizer_path, ") other than ", o.init_from,
                 "'s; pass another --out, or the --init-from folder this run started from");
  }
  const auto keep_imported = [&] {
    if (!imported || fs::exists(d.tokenizer_path)) return;
    fs::create_directories(fs::path(d.tokenizer_path).parent_path());
    imported->save(d.tokenizer_path);
    log_info("tokenizer of ", o.init_from, " (", imported->vocab_size(), " tokens) -> ", d.tokenizer_path);
  };
  const std::vector<std::string> files = data::data_files(o.data);
  const size_t with_header = (size_t)std::count_if(files.begin(), files.end(), data::has_token_header);
  const bool nanogpt = o.format == data::CorpusFormat::nanogpt;
  if (nanogpt || with_header == files.size()) {
    std::optional<data::Tokenizer> tok = imported;
    if (!tok && fs::exists(d.tokenizer_path)) tok = data::Tokenizer::load(d.tokenizer_path);
    // GPUMix token files carry their vocabulary; llm.c and nanoGPT files take --vocab-size,
    // else the tokenizer's, else the preset's.
    const bool own_vocab = !nanogpt && std::all_of(files.begin(), files.end(), data::is_token_file);
    const int64_t vocab = o.vocab_size    ? o.vocab_size
                          : own_vocab     ? 0
                          : tok           ? tok->vocab_size()
                                          : gpt_preset(o.model).V;
    d.shards = std::make_unique<data::TokenShards>(o.data, nanogpt, vocab);
    d.format = d.shards->describe();
    d.tokens = d.shards->tokens();
    d.vocab = d.shards->vocab();
    if (!o.val_data.empty()) {
      d.val_shards = std::make_unique<data::TokenShards>(o.val_data, nanogpt, d.vocab, "--val-data");
      d.val_tokens = d.val_shards->tokens();
      d.format += ", validation: " + d.val_shards->describe();
    }
    if (tok) {
      const std::string source = imported ? "the tokenizer of " + o.init_from : "tokenizer " + d.tokenizer_path;
      GPUMIX_CHECK_INPUT(tok->vocab_size() == d.vocab, "token data ", o.data, " has vocabulary ", d.vocab, " but ",
                         source, " has ", tok->vocab_size(), "; pass the --tokenizer that encoded it (with --init-from: "
                         "token data made with the folder's tokenizer, or the text)");
      d.tokenizer_hash = tok->hash();
      if (may_train_tokenizer && !imported) keep_run_tokenizer(d.tokenizer_path, d.tokenizer_hash, o.out);
    }
    keep_imported();
    return d;
  }
  GPUMIX_CHECK_INPUT(with_header == 0, "--data ", o.data, " mixes token files (", with_header, " of ", files.size(),
                     ") with other files; pass token data alone or text alone");
  GPUMIX_CHECK_INPUT(fs::exists(o.data), "--data '", o.data, "' is a glob of text files; pass one text file or a folder");
  GPUMIX_CHECK_INPUT(o.val_data.empty(), "--val-data takes token data (a token file or shards), and --data ", o.data,
                     " is text: its validation split is its last --val-fraction (", o.val_fraction, "); encode "
                     "both with `gpumix tokenizer encode` to validate on other data");
  GPUMIX_CHECK_INPUT(!fs::is_regular_file(o.data) || data::is_gzip_file(o.data) || !looks_binary(o.data),
                     "training data '", o.data,
                     "' is neither token data (it starts with neither GPUMix's magic \"GPMXTOK\" nor an llm.c "
                     "shard header) nor text (it holds NUL bytes); pass a token file written by `gpumix tokenizer "
                     "encode` (re-encode a damaged one), --format nanogpt for nanoGPT's .bin, or a text corpus");
  data::CorpusInfo info;
  const std::string text = data::read_corpus(o.data, o.format, &info, o.text_field);
  d.format = info.describe() + (o.format == data::CorpusFormat::auto_detect ? " (--format auto)" : "");
  d.warning = info.warning(o.data);
  GPUMIX_CHECK_INPUT(!text.empty(), "training corpus '", o.data, "' is empty; pass a corpus with text in it");
  data::Tokenizer tok;
  if (imported) {
    tok = *imported;
    keep_imported();
  } else if (fs::exists(d.tokenizer_path)) {
    tok = data::Tokenizer::load(d.tokenizer_path);
  } else {
    GPUMIX_CHECK_INPUT(may_train_tokenizer, "tokenizer ", d.tokenizer_path, " is missing");
    data::TrainOptions topt;
    topt.show_progress = true;
    tok = data::Tokenizer::train(text, gpt_preset(o.model).V, topt);
    fs::create_directories(fs::path(d.tokenizer_path).parent_path());
    tok.save(d.tokenizer_path);
    log_info("trained a ", tok.vocab_size(), "-token BPE tokenizer on ", o.data, " -> ", d.tokenizer_path);
  }
  if (may_train_tokenizer) keep_run_tokenizer(d.tokenizer_path, tok.hash(), o.out);
  d.owned = tok.encode(text);
  d.tokens = data::TokenView(d.owned);
  d.vocab = tok.vocab_size();
  d.tokenizer_hash = tok.hash();
  return d;
}

}  // namespace gpumix
