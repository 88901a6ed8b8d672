// gpumix eval: the mean loss and perplexity of a checkpoint or a Hugging Face GPT-2 folder
// on a corpus or token file (nn/eval.h): progress on stderr, one JSON line on stdout.
#include <CLI/CLI.hpp>

#include <cstdio>
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
  CLI::App app{"Mean loss and perplexity of a checkpoint or a Hugging Face GPT-2 folder on a corpus"};
  auto* ckpt = app.add_option("--ckpt", o.ckpt, "run folder (its latest checkpoint) or checkpoint folder");
  auto* model = app.add_option("--model", o.model, "Hugging Face GPT-2 folder (model.safetensors, config.json, "
                                                   "vocab.json, merges.txt)");
  ckpt->excludes(model);
  app.add_option("--data", o.data, "text corpus (encoded with the model's own tokenizer) or token file")->required();
  app.add_option("--format", format, "how a text corpus is read: auto, text or fortunes (as `gpumix train`)");
  app.add_option("--windows", o.windows, "evaluate the first N windows of the model's context (0: all)");
  app.add_option("--dtype", dtype, "compute dtype: fp32 (default) or bf16");
  app.add_option("--threads", o.threads, "CPU threads");
  CLI11_PARSE(app, argc, argv);
  o.format = gpumix::data::parse_corpus_format(format);
  if (const auto d = gpumix::tools::parse_dtype_flag(dtype)) o.dtype = *d;
  gpumix::check_compute_dtype(o.dtype, "--dtype");
  std::unique_ptr<gpumix::data::Progress> progress;
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

GPUMIX_COMMAND("eval", "mean loss and perplexity of a checkpoint or Hugging Face folder on a corpus", cmd_eval);
