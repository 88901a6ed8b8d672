// gpumix train: train a GPT on a corpus or token file (see nn/train.h).
#include <CLI/CLI.hpp>

#include "nn/train.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

int cmd_train(int argc, char** argv) {
  gpumix::TrainOptions o;
  std::string device_memory;
  CLI::App app{"Train a GPT on a text corpus or token file"};
  app.add_option("--data", o.data, "text corpus, folder of fortune files, or token file")->required();
  app.add_option("--tokenizer", o.tokenizer, "tokenizer file (default: <out>/tokenizer.bpe, trained if absent)");
  app.add_option("--model", o.model, "model preset (gpt-nano, gpt-micro, gpt-mini, gpt2, ...)");
  app.add_option("--layers", o.layers, "override the preset's number of layers");
  app.add_option("--heads", o.heads, "override the preset's number of heads");
  app.add_option("--channels", o.channels, "override the preset's channels");
  app.add_option("--out", o.out, "run folder (log.jsonl, tokenizer, checkpoints)");
  app.add_option("--resume", o.resume, "continue from a run folder or checkpoint folder");
  app.add_option("--batch", o.batch, "sequences per step");
  app.add_option("--seq", o.seq, "sequence length (default: the model's context)");
  app.add_option("--steps", o.steps, "total steps");
  app.add_option("--lr", o.lr, "peak learning rate");
  app.add_option("--warmup", o.warmup, "warmup steps (default: min(100, steps/10))");
  app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay");
  app.add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0: off)");
  app.add_option("--eval-interval", o.eval_interval, "steps between validation passes (0: end only)");
  app.add_option("--eval-windows", o.eval_windows, "validation windows per pass");
  app.add_option("--ckpt-interval", o.ckpt_interval, "steps between checkpoints (0: end only)");
  app.add_option("--seed", o.seed, "random seed (initialisation and batch order)");
  app.add_option("--threads", o.threads, "CPU threads (default: all cores)");
  app.add_flag("--recompute", o.recompute, "recompute block activations in backward");
  app.add_option("--val-fraction", o.val_fraction, "fraction of tokens held out for validation");
  app.add_option("--device-memory", device_memory, "emulated device memory capacity, e.g. 512MiB");
  app.add_flag("--quiet", o.quiet, "no per-step lines (log.jsonl still gets them)");
  CLI11_PARSE(app, argc, argv);
  if (!device_memory.empty()) o.device_memory = gpumix::tools::parse_bytes(device_memory);
  gpumix::train(o);
  return 0;
}

}  // namespace

GPUMIX_COMMAND("train", "train a GPT on a corpus or token file", cmd_train);
