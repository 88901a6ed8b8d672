#include "nn/train.h"

#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/log.h"
#include "nn/checkpoint.h"
#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/file_util.h"
#include "nn/data/loader.h"
#include "nn/data/token_file.h"
#include "nn/gpt.h"
#include "nn/hf/gpt2.h"
#include "nn/optim.h"

namespace gpumix {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kTokenizerFile = "tokenizer.bpe";

// True when the first bytes of a file hold a NUL byte: binary data (a token file whose
// header is damaged, a checkpoint array...), never a text corpus.
bool looks_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[64] = {};
  in.read(head, sizeof head);
  return std::find(head, head + in.gcount(), '\0') != head + in.gcount();
}

}  // namespace

// ---- data ----------------------------------------------------------------------------------

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
  GPUMIX_CHECK_INPUT(fs::exists(o.data), "training data '", o.data, "' does not exist; pass --data with "
                     "a text corpus or token file (the main job uses /usr/share/games/fortunes from "
                     "Debian's fortunes package)");
  RunData d;
  d.tokenizer_path = o.tokenizer.empty() ? (fs::path(o.out) / kTokenizerFile).string() : o.tokenizer;
  if (o.tokenizer.empty() && !o.resume.empty() && may_train_tokenizer && !fs::exists(d.tokenizer_path)) {
    // A run resumed into another folder takes the tokenizer of the run it continues.
    const fs::path resumed = fs::path(run_folder_of(o.resume)) / kTokenizerFile;
    GPUMIX_CHECK_INPUT(fs::exists(resumed), "--resume ", o.resume, ": its run folder has no ", kTokenizerFile,
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
  if (fs::is_regular_file(o.data) && data::is_token_file(o.data)) {
    d.file = std::make_unique<data::TokenFile>(o.data);
    d.format = "token file";
    d.tokens = d.file->tokens();
    d.vocab = (int64_t)d.file->vocab_size();
    if (imported || fs::exists(d.tokenizer_path)) {
      const data::Tokenizer tok = imported ? *imported : data::Tokenizer::load(d.tokenizer_path);
      const std::string source = imported ? "the tokenizer of " + o.init_from : "tokenizer " + d.tokenizer_path;
      GPUMIX_CHECK_INPUT(tok.vocab_size() == d.vocab, "token file ", o.data, " has vocabulary ", d.vocab, " but ", source,
                   " has ", tok.vocab_size(), "; pass the --tokenizer that encoded it (with --init-from: a token "
                   "file made with the folder's tokenizer, or the text)");
      d.tokenizer_hash = tok.hash();
    }
    keep_imported();
    return d;
  }
  GPUMIX_CHECK_INPUT(!fs::is_regular_file(o.data) || !looks_binary(o.data), "training data '", o.data,
                     "' is neither a token file (it does not start with the magic \"GPMXTOK\") nor text (it "
                     "holds NUL bytes); pass a token file written by `gpumix tokenizer encode` (re-encode a "
                     "damaged one) or a text corpus");
  data::CorpusInfo info;
  const std::string text = data::read_corpus(o.data, o.format, &info);
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
  d.owned = tok.encode(text);
  d.tokens = data::TokenView(d.owned);
  d.vocab = tok.vocab_size();
  d.tokenizer_hash = tok.hash();
  return d;
}

namespace {

// --init-from's config.json, once no flag contradicts the folder and its weights match it:
// checked before the run writes anything.
GPTConfig init_from_config(const TrainOptions& o) {
  GPUMIX_CHECK_INPUT(o.tokenizer.empty(), "--tokenizer ", o.tokenizer, " contradicts --init-from ", o.init_from,
               ", whose vocab.json and merges.txt are the tokenizer; drop one of them");
  GPUMIX_CHECK_INPUT(!o.layers && !o.heads && !o.channels, "--layers/--heads/--channels contradict --init-from ",
               o.init_from, ", whose config.json gives the model's shape; drop them");
  const GPTConfig c = hf::read_config(o.init_from);
  GPUMIX_CHECK_INPUT(o.seq <= c.T, "--seq ", o.seq, " exceeds the context of ", o.init_from, " (n_positions ", c.T,
               " in its config.json); pass --seq ", c.T, " or less");
  hf::Weights(o.init_from, c);  // names, shapes, dtypes: every contradiction with config.json
  return c;
}

}  // namespace

int64_t resolve_seq(const TrainOptions& o) {
  const int64_t context = o.init_from.empty() ? gpt_preset(o.model).T  // an unknown name fails here
                                              : init_from_config(o).T;
  return o.seq > 0 ? o.seq : context;
}

GPTConfig resolve_model(const TrainOptions& o, int64_t vocab, int64_t seq) {
  if (!o.init_from.empty()) {
    const GPTConfig c = init_from_config(o);
    GPUMIX_CHECK_INPUT(c.V == vocab, o.init_from, "/config.json: vocab_size ", c.V, " but the data's vocabulary is ",
                 vocab, "; train on text (encoded with the folder's tokenizer) or on a token file it made");
    GPUMIX_CHECK_INPUT(seq <= c.T, "sequence length ", seq, " exceeds n_positions ", c.T, " of ", o.init_from);
    return c;  // the context stays n_positions: training on shorter windows uses wpe's first rows
  }
  GPTConfig c = gpt_preset(o.model);
  if (o.layers) c.L = o.layers;
  if (o.heads) c.NH = o.heads;
  if (o.channels) c.C = o.channels;
  if (o.layers || o.heads || o.channels) c.name = o.model + "(custom)";
  c.V = (int)vocab;
  if (seq > 0) c.T = (int)seq;
  c.validate();
  return c;
}

// ---- checkpoints ---------------------------------------------------------------------------

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

// ---- printing ------------------------------------------------------------------------------

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

void print_settings(const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t w = 0;
  for (const auto& r : rows) w = std::max(w, r.first.size());
  if (!log_enabled(LogLevel::info)) return;
  const std::string rule = "+" + std::string(w + 40, '-') + "+";
  std::string table = rule + "\n";
  for (const auto& [k, v] : rows) {
    char line[512];
    std::snprintf(line, sizeof line, "| %-*s | %-35s |\n", (int)w, k.c_str(), v.c_str());
    table += line;
  }
  log_info(table + rule);
}

// ---- generation ----------------------------------------------------------------------------

data::Tokenizer checkpoint_tokenizer(const CheckpointReader& reader, int64_t vocab) {
  const std::string& dir = reader.dir();
  const fs::path tok_path = fs::path(run_folder_of(dir)) / kTokenizerFile;
  GPUMIX_CHECK_INPUT(fs::exists(tok_path), "no tokenizer next to checkpoint ", dir, " (expected ",
               tok_path.string(), "; a run trained on token ids has none: pass --prompt-ids)");
  data::Tokenizer tok = data::Tokenizer::load(tok_path.string());
  GPUMIX_CHECK_INPUT(tok.vocab_size() == vocab, "tokenizer ", tok_path.string(), " has vocabulary ", tok.vocab_size(),
               " but the model has ", vocab);
  return tok;
}

std::string generate(const GenerateOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  GPUMIX_CHECK_INPUT(o.ckpt.empty() != o.model.empty(), "pass one of --ckpt RUN (a GPUMix run or checkpoint) and "
               "--model DIR (a Hugging Face GPT-2 folder)");
  GPUMIX_CHECK_INPUT(o.prompt_ids.empty() || o.prompt.empty(),
               "a prompt as text and as token ids contradict each other; give one");
  std::unique_ptr<GPT> model;
  std::optional<data::Tokenizer> tok;  // not needed for a prompt of ids
  if (!o.model.empty()) {
    HfModel m = load_hf_model(o.model, o.dtype);
    model = std::move(m.model);
    tok = std::move(m.tokenizer);
  } else {
    const CheckpointReader reader = open_checkpoint(o.ckpt);
    model = load_model(reader, o.dtype);
    if (o.prompt_ids.empty()) tok = checkpoint_tokenizer(reader, model->config().V);
  }
  std::vector<int32_t> ids = o.prompt_ids;
  if (ids.empty()) ids = tok->encode(o.prompt);
  if (ids.empty()) ids.push_back(tok->eot_id());
  if (!o.dump_logits.empty()) {
    // The prompt's logits, to compare with another implementation (tests/hf/make_hf_golden.py).
    const int64_t T = std::min<int64_t>((int64_t)ids.size(), model->config().T);
    const std::vector<int32_t> context(ids.begin(), ids.begin() + T);
    check_token_ids(context.data(), T, model->config().V, "prompt id");
    const json j = {{"source", "gpumix generate"}, {"prompt", o.prompt}, {"tokens", context},
                    {"logits", model->logits(Tensor::from_vector(context, {1, T})).to_vector()}};  // (T, V)
    data::write_file_atomic(o.dump_logits, j.dump());
  }
  GPUMIX_CHECK_INPUT(o.num_samples >= 1, "generate: --num-samples must be >= 1, got ", o.num_samples);
  SampleOptions so = o;
  if (tok) so.stop.push_back(tok->eot_id());  // a sample ends at its <|endoftext|>
  std::vector<std::vector<int32_t>> samples((size_t)o.num_samples, ids);
  sample_batch(*model, samples, so);
  std::string out;
  for (size_t j = 0; j < samples.size(); ++j) {
    if (samples.size() > 1) out += (j ? "\n" : "") + std::string("--- sample ") + std::to_string(j) + " ---\n";
    if (!o.prompt_ids.empty()) {
      std::string line;
      for (int32_t id : samples[j]) line += (line.empty() ? "" : " ") + std::to_string(id);
      out += line;
    } else {
      out += tok->decode(samples[j]);
    }
  }
  return out;
}

}  // namespace gpumix
