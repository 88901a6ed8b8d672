// What a training run needs before its step loop, shared by every trainer: the options,
// data preparation (corpus -> tokenizer -> tokens), the model config, checkpoint lookup,
// the settings table; and text generation from a checkpoint. The step loop itself, on one
// or many ranks, is dist/engine/trainer.h.
#pragma once

#include <cstdint>
#include <string>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "nn/checkpoint.h"
#include "nn/data/token_file.h"
#include "nn/gpt_config.h"
#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/infer.h"

namespace gpumix {

struct TrainOptions {
  std::string data;             // text corpus (file, or folder of fortune files) or token file
  // How a text corpus's files are read: text, fortune records, or auto (nn/data/corpus.h).
  data::CorpusFormat format = data::CorpusFormat::auto_detect;
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

// The tokens of a run, either owned (encoded from text) or mapped from a token file.
struct RunData {
  std::vector<int32_t> owned;
  std::unique_ptr<data::TokenFile> file;
  data::TokenView tokens;
  int64_t vocab = 0;
  uint64_t tokenizer_hash = 0;
  std::string tokenizer_path;
  std::string format;   // what was read: "token file", "text", "fortunes (N records)", ...
  std::string warning;  // "" or what the run should say about the data (mostly not text)
};

// Reads o.data. A text corpus is encoded with the run's tokenizer, which is trained (with
// the model preset's vocabulary) and saved when absent and `may_train_tokenizer`; other
// ranks pass false and load what rank 0 saved. With o.init_from the run's tokenizer is the
// folder's, saved as <out>/tokenizer.bpe (which, if present, must be the same).
RunData prepare_data(const TrainOptions& o, bool may_train_tokenizer);

// The sequence length of a run: --seq, or the model's context (the preset's, or
// n_positions of o.init_from's config.json, which --seq must not exceed).
int64_t resolve_seq(const TrainOptions& o);

// The preset with the flags' overrides, the data's vocabulary and sequence length `seq`;
// or, with o.init_from, its config.json (context n_positions), whose vocab_size must be
// the data's and which no shape flag may override.
GPTConfig resolve_model(const TrainOptions& o, int64_t vocab, int64_t seq);

// A checkpoint folder given directly, or the latest complete one of a run folder.
CheckpointReader open_checkpoint(const std::string& where);
// The run folder of `where`: the parent of a checkpoint folder, else `where` itself.
std::string run_folder_of(const std::string& where);

// The run's tokenizer of a checkpoint: tokenizer.bpe in its run folder (the checkpoint
// folder's parent), whose vocabulary must be the model's `vocab`.
data::Tokenizer checkpoint_tokenizer(const CheckpointReader& reader, int64_t vocab);

// A boxed two-column table of resolved settings, logged (info).
void print_settings(const std::vector<std::pair<std::string, std::string>>& rows);
// 1234 -> "1.2k", 2.5e6 -> "2.50M".
std::string human_count(double x);

struct GenerateOptions : SampleOptions {
  std::string ckpt;             // run folder (its latest checkpoint) or a checkpoint folder
  std::string model;            // or a Hugging Face GPT-2 folder (nn/hf/gpt2.h)
  std::string dump_logits;      // when set: write the prompt's ids and logits there as JSON
  std::string prompt;
  std::vector<int32_t> prompt_ids;  // instead of `prompt`: token ids, no tokenizer needed
  int threads = 0;
  DType dtype = DType::f32;     // compute dtype of the model (core/precision.h)
  int num_samples = 1;          // continuations of the prompt (sample_batch: stream j each)
};

// Returns the prompt followed by the generated text (sample_tokens, through the run
// folder's tokenizer); with prompt_ids, the prompt's ids then the generated ones,
// space-separated. With a tokenizer, a sample also ends at its <|endoftext|> (kept) besides
// the stop ids. With num_samples > 1, the samples one after the other, each after a line
// "--- sample J ---" (ids: one line per sample).
std::string generate(const GenerateOptions& options);

}  // namespace gpumix
