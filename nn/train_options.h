// A training run's options (the flags of `gpumix train`, the C API's fields) and what it
// returns. Read by the run's setup (nn/run_data.h, nn/run_model.h), the step loop
// (dist/engine/trainer.h) and checkpoints (dist/engine/checkpoint.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "nn/data/corpus.h"

namespace gpumix {

struct TrainOptions {
  std::string data;             // text corpus (file, or folder of fortune files), or token data:
                                // a file, folder or glob of token files / llm.c / nanoGPT shards
  std::string val_data;         // token data for validation ("": the last val_fraction of data)
  // How --data's files are read: text, fortune records, JSONL, nanoGPT's raw uint16 tokens, or
  // auto (token files by their header, else text: nn/data/corpus.h, nn/data/shards.h).
  data::CorpusFormat format = data::CorpusFormat::auto_detect;
  std::string text_field = data::kDefaultTextField;  // a JSONL line's field holding its text
  int64_t vocab_size = 0;       // the vocabulary of llm.c / nanoGPT token data (0: the
                                // tokenizer's, else the preset's)
  // Or tokens held by the caller (the C API), which must outlive train(): all below V.
  const int32_t* token_data = nullptr;
  int64_t token_count = 0;
  int64_t token_vocab = 0;
  std::string tokenizer;        // tokenizer file; default: <out>/tokenizer.bpe, when absent
                                // copied from the resumed run's folder, or else trained
  std::string init_from;        // a Hugging Face GPT-2 folder (nn/hf/gpt2.h) to start from: its
                                // config.json is the model, vocab.json + merges.txt the tokenizer
  std::string model = "gpt-nano";  // preset name
  int layers = 0, heads = 0, channels = 0;  // explicit shape overrides (0 = the preset's)
  std::string out = "runs/gpt";  // run folder: tokenizer, log.jsonl, checkpoints
  std::string resume;           // run folder or checkpoint folder to continue from
  int64_t batch = 8;            // sequences per step
  int64_t seq = 0;              // sequence length T (0 = the model's context)
  int steps = 200;
  int stop_at = 0;              // end this run after this step (0: at `steps`); the schedule
                                // still spans `steps`, so a later --resume continues it
  float lr = 1e-3f;
  float min_lr_ratio = 0.1f;    // cosine decays to lr * min_lr_ratio
  int warmup = -1;              // -1: min(100, steps / 10)
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;       // global norm; <= 0 disables
  int eval_interval = 50;       // steps between validation passes (0: only at the end)
  int eval_windows = 32;        // validation windows (of T tokens) per pass, the same first
                                // ones at every step (0: all); the last step adds all of them
  int ckpt_interval = 0;        // steps between checkpoints (0: only at the end)
  int keep_checkpoints = 0;     // keep the newest N checkpoints of the run folder (0: all)
  uint64_t seed = 1337;
  int threads = 0;              // OpenMP threads (0: all cores)
  bool recompute = false;       // activation checkpointing per block
  double val_fraction = 0.05;
  int64_t device_memory = 0;    // emulated device capacity in bytes (0: the machine's)
  bool quiet = false;           // no per-step lines (the log file still gets them)
  bool skip_nonfinite = false;  // a NaN/Inf loss or gradient skips the step instead of stopping
  // Compute dtype, f32 or bf16 (core/precision.h). Unset: the plan file's, else the resumed
  // checkpoint's, else bf16 where every rank's device computes it natively, f32 elsewhere.
  std::optional<DType> dtype;

  // Multiple-choice accuracy during training (dist/engine/choices_eval.h), logged as
  // choices_acc: an llm.c eval file (HellaSwag, MMLU; "" : none), every N steps (-1: at each
  // validation, --eval-interval; 0: at the end only) and at the last, on its first N examples
  // (0: all).
  std::string eval_choices;
  int eval_choices_interval = -1;
  int eval_choices_examples = 0;
};

struct TrainResult {
  int step = 0;                 // last completed step
  double train_loss = 0;        // of the last step
  double val_loss = 0;          // final validation loss, nats/token (on all windows at the end)
  int64_t val_windows = 0;      // the windows it was measured on
  double unigram_loss = 0;      // the unigram baseline on the same validation tokens
  double tokens_per_s = 0;      // median over the run's steps
  std::string checkpoint;       // the last checkpoint written
  int stop_signal = 0;          // SIGTERM / SIGINT when it stopped there (dist/engine/stop.h), else 0
};

}  // namespace gpumix
