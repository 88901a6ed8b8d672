// `gpumix eval`: the mean loss and perplexity of a model (a run's checkpoint or a Hugging
// Face GPT-2 folder) on a corpus, encoded with the tokenizer the model came with, or on a
// token file. The windows are mean_loss's (nn/infer.h), so the number is gpumix_evaluate's
// on the same tokens. Also multiple-choice accuracy on llm.c's eval files (HellaSwag, MMLU):
// read_choices, choice_rows and predict_choice are shared with the trainer's
// --eval-choices (dist/engine/choices_eval.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/data/corpus.h"

namespace gpumix {

struct EvalOptions {
  std::string ckpt;   // run folder (its latest checkpoint) or a checkpoint folder
  std::string model;  // or a Hugging Face GPT-2 folder (nn/hf/gpt2.h)
  std::string data;   // text corpus (file or folder) or token file
  data::CorpusFormat format = data::CorpusFormat::auto_detect;
  std::string text_field = data::kDefaultTextField;  // a JSONL line's field holding its text
  int64_t windows = 0;  // the first N windows of the model's context (0: all)
  DType dtype = DType::f32;
  int threads = 0;
};

struct EvalResult {
  double loss = 0;        // mean nats per predicted token
  double perplexity = 0;  // exp(loss)
  int64_t windows = 0, windows_total = 0;  // measured, and the data's
  int64_t context = 0;                     // T: tokens per window
  int64_t tokens = 0;                      // of the data
  std::string source;                      // the checkpoint or folder the model came from
  std::string tokenizer;                   // what encoded the text ("" : a token file)
  std::string format;                      // what was read ("token file", "text", ...)
  std::string warning;                     // "" or what to say about the data
};

// Throws InputError naming the problem, the numbers and the fix: both or neither of
// ckpt/model, no tokenizer for a text corpus, a token file of another vocabulary, fewer
// tokens than one window + 1. `progress(done, total)` (if set) is called after each group of
// windows.
EvalResult evaluate(const EvalOptions& o, const std::function<void(int64_t, int64_t)>& progress = {});

// ---- multiple choice (llm.c's eval files) ----------------------------------------------------
//
// The file (llm.c dev/data/data_common.py, write_evalfile): a header of 256 little-endian
// int32 (magic 20240522, version 1, the number of examples, the longest example in bytes),
// then per example a stream of uint16: 65535 (its start), its size in bytes (these fields
// included), its index in the data set, the label (the correct completion), the number of
// completions, the context's length and tokens, then each completion's length and tokens.
inline constexpr int32_t kChoicesMagic = 20240522;
inline constexpr int32_t kChoicesVersion = 1;

struct ChoiceExample {
  int64_t index = 0;  // in the data set it came from
  int label = 0;      // the correct completion
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> completions;
};

// Reads `path` whole. Throws InputError naming the problem, the example, the byte offset and
// the numbers: a wrong magic or version, a truncated file, an example's fields that do not
// add up to its size, a label past its completions, an empty context or completion, bytes
// after the last example, and (vocab > 0) a token id at or past `vocab`.
std::vector<ChoiceExample> read_choices(const std::string& path, int64_t vocab = 0);

// One example as rows of `width` tokens, one per completion: the context's last tokens, then
// the completion; targets -1 (no loss) but where a completion token is predicted from the
// token before it. A context too long for the rows loses its first tokens (counted in
// `context_dropped`); a completion longer than width is refused. With `full_width` false the
// rows are as wide as the longest completion needs (at most `width`).
struct ChoiceRows {
  int64_t rows = 0, width = 0;
  std::vector<int32_t> inputs, targets;  // (rows, width)
  int64_t context_dropped = 0;
};
ChoiceRows choice_rows(const ChoiceExample& e, int64_t width, bool full_width);

// The prediction from each completion's summed loss: the lowest mean loss per completion
// token (llm.c's rule, which its hellaswag.py calls acc_norm; ties: the first); with
// `by_sum`, the lowest summed loss (hellaswag.py's acc).
int predict_choice(const ChoiceExample& e, const std::vector<double>& loss_sums, bool by_sum = false);

struct ChoicesScore {
  int64_t examples = 0;
  int64_t correct = 0;      // by the mean loss per completion token: the accuracy reported
  int64_t correct_sum = 0;  // by the summed loss
  int64_t truncated = 0;    // examples whose context lost its first tokens to the rows' width
  double chance_sum = 0;    // of 1 / each example's completions: a guess's expected correct answers
  double accuracy() const { return examples > 0 ? (double)correct / (double)examples : 0; }
  double chance() const { return examples > 0 ? chance_sum / (double)examples : 0; }
  double accuracy_sum() const { return examples > 0 ? (double)correct_sum / (double)examples : 0; }
};
// Adds one scored example.
void add_choice(ChoicesScore& score, const ChoiceExample& e, const std::vector<double>& loss_sums, bool truncated);

struct ChoicesResult {
  ChoicesScore score;
  int64_t examples_total = 0;  // of the file
  int64_t context = 0;         // T
  std::string source;          // the checkpoint or folder the model came from
};
// `gpumix eval --choices FILE`: the first `examples` (0: all) examples of o.choices, scored
// by the model of o.ckpt / o.model. `progress(done, total)` after each example.
ChoicesResult evaluate_choices(const EvalOptions& o, const std::string& choices, int64_t examples,
                               const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace gpumix
