#include "nn/eval.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "nn/data/shards.h"
#include "nn/data/token_file.h"
#include "nn/infer.h"
#include "nn/run_folder.h"

namespace gpumix {

namespace fs = std::filesystem;

namespace {

// The model of --ckpt or --model, and its tokenizer when `with_tokenizer` (or why none).
struct EvalModel {
  std::unique_ptr<GPT> model;
  std::optional<data::Tokenizer> tokenizer;
  std::string source, tokenizer_name, tokenizer_error;
};

EvalModel load_eval_model(const EvalOptions& o, bool with_tokenizer) {
  GPUMIX_CHECK_INPUT(o.ckpt.empty() != o.model.empty(), "pass one of --ckpt RUN (a GPUMix run or checkpoint) and "
                     "--model DIR (a Hugging Face GPT-2 folder)");
  EvalModel m;
  if (!o.model.empty()) {
    HfModel hf = load_hf_model(o.model, o.dtype);
    m.model = std::move(hf.model);
    m.tokenizer = std::move(hf.tokenizer);
    m.source = o.model;
    m.tokenizer_name = o.model + " (vocab.json, merges.txt)";
    return m;
  }
  const CheckpointReader reader = open_checkpoint(o.ckpt);
  m.model = load_model(reader, o.dtype);
  m.source = reader.dir();
  if (!with_tokenizer) return m;
  const std::string tok_path = (fs::path(run_folder_of(reader.dir())) / kRunTokenizerFile).string();
  if (fs::exists(tok_path)) {
    m.tokenizer = checkpoint_tokenizer(reader, m.model->config().V);  // its vocabulary must be the model's
    m.tokenizer_name = tok_path;
  } else {
    m.tokenizer_error = "no tokenizer next to checkpoint " + reader.dir() + " (expected " + tok_path +
                        "; a run trained on token ids has none)";
  }
  return m;
}

}  // namespace

EvalResult evaluate(const EvalOptions& o, const std::function<void(int64_t, int64_t)>& progress) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  GPUMIX_CHECK_INPUT(!o.data.empty(), "no evaluation data; pass --data with a text corpus or token data");
  const std::vector<std::string> files = data::data_files(o.data);  // before the model is loaded
  GPUMIX_CHECK_INPUT(o.windows >= 0, "--windows must be >= 0 (0: all), got ", o.windows);
  EvalResult r;
  EvalModel m = load_eval_model(o, true);
  std::unique_ptr<GPT> model = std::move(m.model);
  std::optional<data::Tokenizer> tok = std::move(m.tokenizer);
  const std::string tokenizer_error = m.tokenizer_error;  // why a text corpus cannot be encoded
  r.source = m.source;
  r.tokenizer = m.tokenizer_name;
  const int64_t T = model->config().T, V = model->config().V;
  r.context = T;

  std::vector<int32_t> tokens;  // as int32 (a token file may hold 2-byte ids)
  const bool nanogpt = o.format == data::CorpusFormat::nanogpt;
  if (nanogpt || std::all_of(files.begin(), files.end(), data::has_token_header)) {
    // GPUMix token files carry their vocabulary, which must be the model's; llm.c and nanoGPT
    // files are checked below the model's.
    const bool own_vocab = !nanogpt && std::all_of(files.begin(), files.end(), data::is_token_file);
    const data::TokenShards shards(o.data, nanogpt, own_vocab ? 0 : V);
    GPUMIX_CHECK_INPUT(shards.vocab() == V, "token data ", o.data, " has vocabulary ",
                       shards.vocab(), " but the model (", r.source, ") has ", V,
                       "; encode the text with the model's tokenizer (`gpumix tokenizer encode --tokenizer ",
                       !o.model.empty() ? o.model : r.tokenizer.empty() ? std::string("<the run's tokenizer.bpe>") : r.tokenizer,
                       "`), or pass the text itself");
    tokens = shards.tokens().to_vector();
    r.format = shards.describe();
    r.tokenizer.clear();
  } else {
    GPUMIX_CHECK_INPUT(tok.has_value(), "cannot encode the text corpus ", o.data, ": ", tokenizer_error,
                       "; pass a token file of the model's vocabulary (", V, " ids) instead");
    data::CorpusInfo info;
    const std::string text = data::read_corpus(o.data, o.format, &info, o.text_field);
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

// ---- multiple choice ----------------------------------------------------------------------

namespace {

// A little-endian reader over the file's bytes that names what it reads when the file ends.
struct ChoicesReader {
  const std::string& path;
  const std::vector<unsigned char>& bytes;
  size_t at = 0;

  uint16_t u16(const std::string& what, int64_t example) {
    GPUMIX_CHECK_INPUT(at + 2 <= bytes.size(), path, " is truncated: example ", example, " ends at byte ",
                       bytes.size(), " while reading its ", what, " (byte ", at, "); write the file again");
    const uint16_t v = (uint16_t)(bytes[at] | (bytes[at + 1] << 8));
    at += 2;
    return v;
  }
};

int32_t header_field(const std::vector<unsigned char>& bytes, int i) {
  uint32_t v = 0;
  for (int b = 3; b >= 0; --b) v = (v << 8) | bytes[4 * i + b];
  return (int32_t)v;
}

}  // namespace

std::vector<ChoiceExample> read_choices(const std::string& path, int64_t vocab) {
  GPUMIX_CHECK_INPUT(fs::is_regular_file(path), "multiple-choice file '", path, "' does not exist; pass an llm.c "
                     "eval file (magic ", kChoicesMagic, ", e.g. hellaswag_val.bin)");
  std::ifstream in(path, std::ios::binary);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t header_bytes = 256 * 4;
  GPUMIX_CHECK_INPUT(bytes.size() >= header_bytes, path, " holds ", bytes.size(), " bytes, fewer than the ",
                     header_bytes, "-byte header of an llm.c eval file (256 int32); it is truncated or not one");
  const int32_t magic = header_field(bytes, 0), version = header_field(bytes, 1);
  const int32_t count = header_field(bytes, 2), longest = header_field(bytes, 3);
  GPUMIX_CHECK_INPUT(magic == kChoicesMagic, path, " is not an llm.c multiple-choice eval file: its magic is ", magic,
                     ", expected ", kChoicesMagic,
                     magic == 20240520 || magic == 20240801 ? " (it is an llm.c token shard: pass it as --data)" : "");
  GPUMIX_CHECK_INPUT(version == kChoicesVersion, path, ": version ", version, " of llm.c's eval format, this reader "
                     "knows version ", kChoicesVersion);
  GPUMIX_CHECK_INPUT(count >= 1, path, ": its header holds ", count, " examples; an eval file needs at least 1");
  ChoicesReader r{path, bytes, header_bytes};
  std::vector<ChoiceExample> examples;
  // At most what the bytes can hold (an example takes 14 at least): a header's count is not trusted.
  examples.reserve(std::min<size_t>((size_t)count, (bytes.size() - header_bytes) / 14));
  for (int64_t k = 0; k < count; ++k) {
    const size_t start = r.at;
    const uint16_t marker = r.u16("start marker", k);
    GPUMIX_CHECK_INPUT(marker == 65535, path, ": example ", k, " at byte ", start, " starts with ", marker,
                       ", not the start marker 65535; the file is damaged or its header's count (", count,
                       ") is wrong");
    const uint16_t size = r.u16("size", k);
    GPUMIX_CHECK_INPUT(start + size <= bytes.size(), path, " is truncated: example ", k, " at byte ", start,
                       " says it holds ", size, " bytes, but only ", bytes.size() - start, " remain");
    GPUMIX_CHECK_INPUT(longest <= 0 || size <= longest, path, ": example ", k, " holds ", size,
                       " bytes, more than the header's longest example (", longest, ")");
    ChoiceExample e;
    e.index = r.u16("index", k);
    e.label = r.u16("label", k);
    const int n = r.u16("number of completions", k);
    GPUMIX_CHECK_INPUT(n >= 2, path, ": example ", k, " (index ", e.index, ") has ", n,
                       " completions; a choice needs at least 2");
    GPUMIX_CHECK_INPUT(e.label < n, path, ": example ", k, " (index ", e.index, ") has label ", e.label,
                       ", past its ", n, " completions (0 to ", n - 1, ")");
    auto tokens = [&](const std::string& what) {
      const int len = r.u16(what + " length", k);
      GPUMIX_CHECK_INPUT(len >= 1, path, ": example ", k, " (index ", e.index, ") has an empty ", what,
                         "; every context and completion needs at least 1 token");
      std::vector<int32_t> ids(len);
      for (int i = 0; i < len; ++i) {
        ids[i] = r.u16(what + " tokens", k);
        GPUMIX_CHECK_INPUT(vocab <= 0 || ids[i] < vocab, path, ": example ", k, " (index ", e.index, "), ", what,
                           " token ", i, " is id ", ids[i], ", past the model's vocabulary of ", vocab,
                           " ids; pass an eval file made with the model's tokenizer");
      }
      return ids;
    };
    e.context = tokens("context");
    for (int c = 0; c < n; ++c) e.completions.push_back(tokens(str("completion ", c)));
    GPUMIX_CHECK_INPUT(r.at - start == size, path, ": example ", k, " (index ", e.index, ") at byte ", start,
                       " says it holds ", size, " bytes, but its fields take ", r.at - start);
    examples.push_back(std::move(e));
  }
  GPUMIX_CHECK_INPUT(r.at == bytes.size(), path, ": ", bytes.size() - r.at, " bytes follow the last of the header's ",
                     count, " examples (at byte ", r.at, "); the header's count is wrong or the file is damaged");
  return examples;
}

ChoiceRows choice_rows(const ChoiceExample& e, int64_t width, bool full_width) {
  ChoiceRows rows;
  rows.rows = (int64_t)e.completions.size();
  int64_t needed = 1;  // inputs per row: the context and completion but for the last token
  for (const std::vector<int32_t>& c : e.completions) {
    GPUMIX_CHECK_INPUT((int64_t)c.size() <= width, "multiple-choice example (index ", e.index, "): a completion of ",
                       c.size(), " tokens does not fit the context of ", width, " tokens with one token of its "
                       "context before it; pass a longer --seq, or leave such examples out of the file");
    needed = std::max<int64_t>(needed, (int64_t)(e.context.size() + c.size()) - 1);
  }
  rows.width = full_width ? width : std::min(width, needed);
  rows.inputs.assign((size_t)(rows.rows * rows.width), 0);
  rows.targets.assign((size_t)(rows.rows * rows.width), -1);
  for (int64_t i = 0; i < rows.rows; ++i) {
    const std::vector<int32_t>& c = e.completions[i];
    // The sequence is context + completion; the row holds its last width + 1 tokens at most.
    const int64_t keep_context = std::min<int64_t>((int64_t)e.context.size(), rows.width + 1 - (int64_t)c.size());
    rows.context_dropped = std::max(rows.context_dropped, (int64_t)e.context.size() - keep_context);
    std::vector<int32_t> seq(e.context.end() - keep_context, e.context.end());
    seq.insert(seq.end(), c.begin(), c.end());
    int32_t* in = rows.inputs.data() + i * rows.width;
    int32_t* tg = rows.targets.data() + i * rows.width;
    for (int64_t t = 0; t + 1 < (int64_t)seq.size(); ++t) {
      in[t] = seq[t];
      if (t + 1 >= keep_context) tg[t] = seq[t + 1];  // a completion token, predicted from the one before
    }
  }
  return rows;
}

int predict_choice(const ChoiceExample& e, const std::vector<double>& loss_sums, bool by_sum) {
  GPUMIX_CHECK(loss_sums.size() == e.completions.size(), "predict_choice: ", loss_sums.size(), " losses for ",
               e.completions.size(), " completions");
  int best = 0;
  double best_loss = 0;
  for (size_t i = 0; i < loss_sums.size(); ++i) {
    const double loss = by_sum ? loss_sums[i] : loss_sums[i] / (double)e.completions[i].size();
    if (i == 0 || loss < best_loss) {
      best = (int)i;
      best_loss = loss;
    }
  }
  return best;
}

void add_choice(ChoicesScore& score, const ChoiceExample& e, const std::vector<double>& loss_sums, bool truncated) {
  ++score.examples;
  score.correct += predict_choice(e, loss_sums) == e.label;
  score.correct_sum += predict_choice(e, loss_sums, true) == e.label;
  score.truncated += truncated;
  score.chance_sum += 1.0 / (double)e.completions.size();
}

ChoicesResult evaluate_choices(const EvalOptions& o, const std::string& choices, int64_t examples,
                               const std::function<void(int64_t, int64_t)>& progress) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  GPUMIX_CHECK_INPUT(examples >= 0, "--examples must be >= 0 (0: all), got ", examples);
  const EvalModel m = load_eval_model(o, false);
  const int64_t T = m.model->config().T;
  const std::vector<ChoiceExample> all = read_choices(choices, m.model->config().V);
  ChoicesResult r;
  r.examples_total = (int64_t)all.size();
  r.context = T;
  r.source = m.source;
  const int64_t n = examples > 0 ? std::min<int64_t>(examples, r.examples_total) : r.examples_total;
  for (int64_t k = 0; k < n; ++k) {
    const ChoiceRows rows = choice_rows(all[k], T, false);
    const Tensor in = Tensor::from_vector(rows.inputs, {rows.rows, rows.width});
    const Tensor tg = Tensor::from_vector(rows.targets, {rows.rows, rows.width});
    const std::vector<float> losses = token_losses(*m.model, in, tg).to_vector();
    std::vector<double> sums(rows.rows, 0);
    for (int64_t i = 0; i < rows.rows; ++i)
      for (int64_t t = 0; t < rows.width; ++t) sums[i] += losses[i * rows.width + t];
    add_choice(r.score, all[k], sums, rows.context_dropped > 0);
    if (progress) progress(k + 1, n);
  }
  return r;
}

}  // namespace gpumix
