#include "nn/eval.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/error.h"
#include "nn/data/token_file.h"
#include "nn/infer.h"
#include "nn/run_folder.h"

namespace gpumix {

namespace fs = std::filesystem;

EvalResult evaluate(const EvalOptions& o, const std::function<void(int64_t, int64_t)>& progress) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  GPUMIX_CHECK_INPUT(o.ckpt.empty() != o.model.empty(), "pass one of --ckpt RUN (a GPUMix run or checkpoint) and "
                     "--model DIR (a Hugging Face GPT-2 folder)");
  GPUMIX_CHECK_INPUT(!o.data.empty() && fs::exists(o.data), "evaluation data '", o.data, "' does not exist; pass "
                     "--data with a text corpus or a token file");
  GPUMIX_CHECK_INPUT(o.windows >= 0, "--windows must be >= 0 (0: all), got ", o.windows);
  EvalResult r;
  std::unique_ptr<GPT> model;
  std::optional<data::Tokenizer> tok;
  std::string tokenizer_error;  // why a text corpus cannot be encoded
  if (!o.model.empty()) {
    HfModel m = load_hf_model(o.model, o.dtype);
    model = std::move(m.model);
    tok = std::move(m.tokenizer);
    r.source = o.model;
    r.tokenizer = o.model + " (vocab.json, merges.txt)";
  } else {
    const CheckpointReader reader = open_checkpoint(o.ckpt);
    model = load_model(reader, o.dtype);
    r.source = reader.dir();
    const std::string tok_path = (fs::path(run_folder_of(reader.dir())) / kRunTokenizerFile).string();
    if (fs::exists(tok_path)) {
      tok = checkpoint_tokenizer(reader, model->config().V);  // its vocabulary must be the model's
      r.tokenizer = tok_path;
    } else {
      tokenizer_error = "no tokenizer next to checkpoint " + reader.dir() + " (expected " + tok_path +
                        "; a run trained on token ids has none)";
    }
  }
  const int64_t T = model->config().T, V = model->config().V;
  r.context = T;

  std::vector<int32_t> tokens;  // as int32 (a token file may hold 2-byte ids)
  if (fs::is_regular_file(o.data) && data::is_token_file(o.data)) {
    const auto file = std::make_unique<data::TokenFile>(o.data);
    GPUMIX_CHECK_INPUT((int64_t)file->vocab_size() == V, "token file ", o.data, " has vocabulary ",
                       file->vocab_size(), " but the model (", r.source, ") has ", V,
                       "; encode the text with the model's tokenizer (`gpumix tokenizer encode --tokenizer ",
                       !o.model.empty() ? o.model : r.tokenizer.empty() ? std::string("<the run's tokenizer.bpe>") : r.tokenizer,
                       "`), or pass the text itself");
    tokens = file->tokens().to_vector();
    r.format = "token file";
    r.tokenizer.clear();
  } else {
    GPUMIX_CHECK_INPUT(tok.has_value(), "cannot encode the text corpus ", o.data, ": ", tokenizer_error,
                       "; pass a token file of the model's vocabulary (", V, " ids) instead");
    data::CorpusInfo info;
    const std::string text = data::read_corpus(o.data, o.format, &info);
    r.format = info.describe();
    r.warning = info.warning(o.data);
    tokens = tok->encode(text);
  }
  r.tokens = (int64_t)tokens.size();
  GPUMIX_CHECK_INPUT(r.tokens >= T + 1, o.data, " holds ", r.tokens, " tokens, fewer than one window of the model's "
                     "context + 1 = ", T + 1, "; pass a larger corpus");
  check_token_ids(tokens.data(), r.tokens, V, "eval data");
  r.windows_total = (r.tokens - 1) / T;  // mean_loss's windows: starts 0, T, 2T, ...
  r.windows = o.windows > 0 ? std::min(o.windows, r.windows_total) : r.windows_total;
  // Groups of windows through mean_loss (window w of a group starting at g is window g + w of
  // the whole), so that progress can be shown; the sum of per-token losses in double.
  const int64_t group = 64;
  double sum = 0;
  for (int64_t w0 = 0; w0 < r.windows; w0 += group) {
    const int64_t n = std::min(group, r.windows - w0);
    int64_t got = 0;
    const double mean = mean_loss(*model, tokens.data() + w0 * T, n * T + 1, &got);
    GPUMIX_CHECK(got == n, "eval: mean_loss read ", got, " windows of the ", n, " given");
    sum += mean * (double)(n * T);
    if (progress) progress(w0 + n, r.windows);
  }
  r.loss = sum / (double)(r.windows * T);
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace gpumix
