// gpumix generate: sample text from a trained checkpoint or a Hugging Face GPT-2 folder.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "nn/generate.h"
#include "tools/command.h"

namespace {

int cmd_generate(int argc, char** argv) {
  gpumix::GenerateOptions o;
  CLI::App app{"Generate text from a checkpoint or a Hugging Face GPT-2 folder"};
  auto* ckpt = app.add_option("--ckpt", o.ckpt, "run folder (its latest checkpoint) or checkpoint folder");
  auto* model = app.add_option("--model", o.model, "Hugging Face GPT-2 folder (model.safetensors, config.json, "
                                                   "vocab.json, merges.txt), e.g. from `gpumix export`");
  ckpt->excludes(model);
  app.add_option("--dump-logits", o.dump_logits, "also write the prompt's token ids and logits to this JSON file");
  app.add_option("--prompt", o.prompt, "text to continue");
  app.add_option("--prompt-ids", o.prompt_ids,
                 "token ids to continue instead, e.g. 72,101 (no tokenizer needed: prints ids)")
      ->delimiter(',');
  app.add_option("--tokens", o.tokens, "tokens to generate");
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)");
  app.add_option("--top-k", o.top_k, "sample among the k most likely tokens (0: all)");
  app.add_option("--top-p", o.top_p, "then sample among the fewest most likely tokens whose probabilities "
                                     "sum to >= p (nucleus; 1: no cut)");
  app.add_option("--num-samples", o.num_samples, "continuations of the prompt, each with its own cache and "
                                                 "random stream (sample j: stream j)");
  app.add_option("--stop", o.stop, "token ids that end a sample (kept), e.g. 13,50256; with a tokenizer, "
                                   "<|endoftext|> also ends it")
      ->delimiter(',');
  app.add_option("--seed", o.seed, "sampling seed");
  app.add_option("--threads", o.threads, "CPU threads");
  CLI11_PARSE(app, argc, argv);
  std::printf("%s\n", gpumix::generate(o).c_str());
  return 0;
}

}  // namespace

GPUMIX_COMMAND("generate", "sample text from a checkpoint or a Hugging Face GPT-2 folder", cmd_generate);
