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

#include "nn/checkpoint.h"
#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/loader.h"
#include "nn/data/token_file.h"
#include "nn/gpt.h"
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
    GPUMIX_CHECK(o.token_count > 0 && o.token_vocab > 0, "caller tokens: ", o.token_count,
                 " tokens with vocabulary ", o.token_vocab, "; both must be positive");
    for (int64_t i = 0; i < o.token_count; ++i)
      GPUMIX_CHECK(o.token_data[i] >= 0 && o.token_data[i] < o.token_vocab, "caller tokens: token ",
                   o.token_data[i], " at position ", i, " is outside the vocabulary of ", o.token_vocab);
    d.tokens = data::TokenView(o.token_data, (size_t)o.token_count);
    d.vocab = o.token_vocab;
    d.tokenizer_path = "(none: tokens from the caller)";
    return d;
  }
  GPUMIX_CHECK(!o.data.empty(), "no training data: pass --data FILE (a text corpus, a folder of "
               "fortune files, or a token file from `gpumix tokenizer encode`)");
  GPUMIX_CHECK(fs::exists(o.data), "training data '", o.data, "' does not exist; pass --data with "
               "a text corpus or token file (the main job uses /usr/share/games/fortunes from "
               "Debian's fortunes package)");
  RunData d;
  d.tokenizer_path = o.tokenizer.empty() ? (fs::path(o.out) / kTokenizerFile).string() : o.tokenizer;
  if (fs::is_regular_file(o.data) && data::is_token_file(o.data)) {
    d.file = std::make_unique<data::TokenFile>(o.data);
    d.tokens = d.file->tokens();
    d.vocab = (int64_t)d.file->vocab_size();
    if (fs::exists(d.tokenizer_path)) {
      const data::Tokenizer tok = data::Tokenizer::load(d.tokenizer_path);
      GPUMIX_CHECK(tok.vocab_size() == d.vocab, "token file ", o.data, " has vocabulary ", d.vocab,
                   " but tokenizer ", d.tokenizer_path, " has ", tok.vocab_size(),
                   "; pass the --tokenizer that encoded it");
      d.tokenizer_hash = tok.hash();
    }
    return d;
  }
  GPUMIX_CHECK(!fs::is_regular_file(o.data) || !looks_binary(o.data), "training data '", o.data,
               "' is neither a token file (it does not start with the magic \"GPMXTOK\") nor text (it "
               "holds NUL bytes); pass a token file written by `gpumix tokenizer encode` (re-encode a "
               "damaged one) or a text corpus");
  const std::string text = data::read_corpus(o.data);
  GPUMIX_CHECK(!text.empty(), "training corpus '", o.data, "' is empty; pass a corpus with text in it");
  data::Tokenizer tok;
  if (fs::exists(d.tokenizer_path)) {
    tok = data::Tokenizer::load(d.tokenizer_path);
  } else {
    GPUMIX_CHECK(may_train_tokenizer, "tokenizer ", d.tokenizer_path, " is missing");
    data::TrainOptions topt;
    topt.show_progress = true;
    tok = data::Tokenizer::train(text, gpt_preset(o.model).V, topt);
    fs::create_directories(fs::path(d.tokenizer_path).parent_path());
    tok.save(d.tokenizer_path);
    std::printf("trained a %d-token BPE tokenizer on %s -> %s\n", tok.vocab_size(), o.data.c_str(),
                d.tokenizer_path.c_str());
  }
  d.owned = tok.encode(text);
  d.tokens = data::TokenView(d.owned);
  d.vocab = tok.vocab_size();
  d.tokenizer_hash = tok.hash();
  return d;
}

GPTConfig resolve_model(const TrainOptions& o, int64_t vocab, int64_t seq) {
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

CheckpointReader open_checkpoint(const std::string& where) {
  GPUMIX_CHECK(fs::exists(where), "checkpoint or run folder '", where, "' does not exist");
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
  std::printf("+%s+\n", std::string(w + 40, '-').c_str());
  for (const auto& [k, v] : rows) std::printf("| %-*s | %-35s |\n", (int)w, k.c_str(), v.c_str());
  std::printf("+%s+\n", std::string(w + 40, '-').c_str());
}

// ---- generation ----------------------------------------------------------------------------

std::string generate(const GenerateOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const CheckpointReader reader = open_checkpoint(o.ckpt);
  if (!o.prompt_ids.empty()) {
    GPUMIX_CHECK(o.prompt.empty(), "a prompt as text and as token ids contradict each other; give one");
    std::vector<int32_t> ids = o.prompt_ids;
    sample_tokens(*load_model(reader, o.dtype), ids, o);
    std::string out;
    for (int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
    return out;
  }
  const std::string& dir = reader.dir();
  // The tokenizer sits in the run folder, the checkpoint folder's parent.
  const fs::path tok_path = fs::path(dir).parent_path() / kTokenizerFile;
  GPUMIX_CHECK(fs::exists(tok_path), "no tokenizer next to checkpoint ", dir, " (expected ",
               tok_path.string(), "; a run trained on token ids has none: pass --prompt-ids)");
  const data::Tokenizer tok = data::Tokenizer::load(tok_path.string());
  const std::unique_ptr<GPT> model = load_model(reader, o.dtype);
  GPUMIX_CHECK(tok.vocab_size() == model->config().V, "tokenizer ", tok_path.string(), " has vocabulary ",
               tok.vocab_size(), " but the model has ", model->config().V);
  std::vector<int32_t> ids = tok.encode(o.prompt);
  if (ids.empty()) ids.push_back(tok.eot_id());
  sample_tokens(*model, ids, o);
  return tok.decode(ids);
}

}  // namespace gpumix
