// gpumix eval: the mean loss and perplexity of a checkpoint or a Hugging Face GPT-2 folder
// on a corpus or token file, or its accuracy on an llm.c multiple-choice file (--choices,
// nn/eval.h): progress on stderr, one JSON line on stdout.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.h"
#include "core/precision.h"
#include "nn/data/progress.h"
#include "nn/eval.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

int cmd_eval(int argc, char** argv) {
  gpumix::EvalOptions o;
  std::string format = "auto", dtype;
  CLI::App app{"Mean loss and perplexity of a checkpoint or a Hugging Face GPT-2 folder on a corpus, or its "
               "accuracy on a multiple-choice file"};
  auto* ckpt = app.add_option("--ckpt", o.ckpt, "run folder (its latest checkpoint) or checkpoint folder");
  auto* model = app.add_option("--model", o.model, "Hugging Face GPT-2 folder (model.safetensors, config.json, "
                                                   "vocab.json, merges.txt)");
  ckpt->excludes(model);
  auto* data = app.add_option("--data", o.data, "text corpus (encoded with the model's own tokenizer) or token file");
  std::string choices;
  int64_t examples = 0;
  auto* choices_opt = app.add_option("--choices", choices,
                                     "or an llm.c multiple-choice eval file (HellaSwag, MMLU: magic 20240522): the "
                                     "accuracy, each example's prediction its completion of the lowest mean loss "
                                     "per token");
  choices_opt->excludes(data);
  app.add_option("--examples", examples, "with --choices: the first N examples (0: all)")->needs(choices_opt);
  app.add_option("--format", format, std::string("how a text corpus is read: ") + gpumix::data::kTextFormatsHelp);
  app.add_option("--text-field", o.text_field, "the field of a JSONL line that holds its text")->capture_default_str();
  app.add_option("--windows", o.windows, "evaluate the first N windows of the model's context (0: all)")
      ->excludes(choices_opt);
  app.add_option("--dtype", dtype, "compute dtype: fp32 (default) or bf16");
  app.add_option("--threads", o.threads, "CPU threads");
  CLI11_PARSE(app, argc, argv);
  o.format = gpumix::data::parse_corpus_format(format);
  if (const auto d = gpumix::tools::parse_dtype_flag(dtype)) o.dtype = *d;
  gpumix::check_compute_dtype(o.dtype, "--dtype");
  if (o.data.empty() == choices.empty())
    throw std::invalid_argument("pass --data (a corpus or token file: the mean loss) or --choices (an llm.c "
                                "multiple-choice file: the accuracy)");
  std::unique_ptr<gpumix::data::Progress> progress;
  if (!choices.empty()) {
    const gpumix::ChoicesResult c = gpumix::evaluate_choices(o, choices, examples, [&](int64_t done, int64_t total) {
      if (!progress) progress = std::make_unique<gpumix::data::Progress>("scoring", (double)total, "examples");
      progress->update((double)done);
    });
    if (progress) progress->finish();
    const nlohmann::json line = {{"choices_acc", c.score.accuracy()},
                                 {"choices_acc_sum", c.score.accuracy_sum()},
                                 {"choices_chance", c.score.chance()},
                                 {"correct", c.score.correct},
                                 {"examples", c.score.examples},
                                 {"examples_total", c.examples_total},
                                 {"truncated", c.score.truncated},
                                 {"rule", "lowest mean loss per completion token (llm.c; hellaswag.py's acc_norm); "
                                          "choices_acc_sum: lowest summed loss (acc)"},
                                 {"context", c.context},
                                 {"model", c.source},
                                 {"choices", choices},
                                 {"dtype", gpumix::dtype_name(o.dtype)}};
    std::printf("%s\n", line.dump().c_str());
    return 0;
  }
  const gpumix::EvalResult r = gpumix::evaluate(o, [&](int64_t done, int64_t total) {
    if (!progress) progress = std::make_unique<gpumix::data::Progress>("evaluating", (double)total, "windows");
    progress->update((double)done);
  });
  if (progress) progress->finish();
  if (!r.warning.empty()) std::fprintf(stderr, "warning: %s\n", r.warning.c_str());
  const nlohmann::json line = {{"loss", r.loss},
                               {"perplexity", r.perplexity},
                               {"windows", r.windows},
                               {"windows_total", r.windows_total},
                               {"context", r.context},
                               {"tokens", r.tokens},
                               {"model", r.source},
                               {"data", o.data},
                               {"format", r.format},
                               {"tokenizer", r.tokenizer},
                               {"dtype", gpumix::dtype_name(o.dtype)}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace

GPUMIX_COMMAND("eval", "mean loss and perplexity of a checkpoint or Hugging Face folder on a corpus, or its multiple-choice accuracy", cmd_eval);
