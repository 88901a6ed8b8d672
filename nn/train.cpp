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

#include "autograd/tape.h"
#include "core/ops.h"
#include "core/rng.h"
#include "kernels/philox.h"
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

// ---- data ----------------------------------------------------------------------------------

// The tokens of a run, either owned (encoded from text) or mapped from a token file.
struct RunData {
  std::vector<int32_t> owned;
  std::unique_ptr<data::TokenFile> file;
  data::TokenView tokens;
  int64_t vocab = 0;
  uint64_t tokenizer_hash = 0;
  std::string tokenizer_path;
};

data::Tokenizer load_or_train_tokenizer(const std::string& path, const std::string& text,
                                        int vocab, bool* trained) {
  *trained = !fs::exists(path);
  if (!*trained) return data::Tokenizer::load(path);
  data::TrainOptions topt;
  topt.show_progress = true;
  data::Tokenizer tok = data::Tokenizer::train(text, vocab, topt);
  tok.save(path);
  return tok;
}

RunData prepare_data(const TrainOptions& o, int model_vocab) {
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
  const std::string text = data::read_corpus(o.data);
  GPUMIX_CHECK(!text.empty(), "training corpus '", o.data, "' is empty; pass a corpus with text in it");
  bool trained = false;
  const data::Tokenizer tok = load_or_train_tokenizer(d.tokenizer_path, text, model_vocab, &trained);
  if (trained)
    std::printf("trained a %d-token BPE tokenizer on %s -> %s\n", tok.vocab_size(), o.data.c_str(),
                d.tokenizer_path.c_str());
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

json config_json(const GPTConfig& c) {
  return {{"name", c.name}, {"L", c.L}, {"NH", c.NH}, {"C", c.C}, {"V", c.V}, {"T", c.T}};
}

GPTConfig config_from_json(const json& j) {
  GPTConfig c;
  c.name = j.at("name").get<std::string>();
  c.L = j.at("L");
  c.NH = j.at("NH");
  c.C = j.at("C");
  c.V = j.at("V");
  c.T = j.at("T");
  c.validate();
  return c;
}

// ---- evaluation ----------------------------------------------------------------------------

// Mean cross-entropy over the first `windows` validation windows (all when <= 0).
double evaluate(const GPT& model, const data::BatchLoader& val, int64_t batch, int64_t windows) {
  const int64_t T = val.seq_len();
  const int64_t total = windows > 0 ? std::min(windows, val.num_eval_windows()) : val.num_eval_windows();
  NoGradGuard no_grad;
  double loss_sum = 0;
  for (int64_t first = 0; first < total; first += batch) {
    const int64_t rows = std::min(batch, total - first);
    Tensor inputs = Tensor::empty({rows, T}, DType::i32), targets = Tensor::empty({rows, T}, DType::i32);
    for (int64_t r = 0; r < rows; ++r)
      val.eval_window(first + r, inputs.data<int32_t>() + r * T, targets.data<int32_t>() + r * T);
    loss_sum += model.loss(inputs, targets, 1.0f).value().item();
  }
  return loss_sum / (double)(total * T);
}

// ---- checkpoints ---------------------------------------------------------------------------

// A checkpoint folder given directly, or the latest complete one of a run folder.
CheckpointReader open_checkpoint(const std::string& where) {
  GPUMIX_CHECK(fs::exists(where), "checkpoint or run folder '", where, "' does not exist");
  if (fs::exists(fs::path(where) / "meta.json")) return CheckpointReader(where);
  return CheckpointReader::open_latest(where);
}

std::string save(const TrainOptions& o, GPT& model, AdamW& opt, int step, uint64_t tokenizer_hash) {
  const int64_t P = model.num_params();
  CheckpointMeta meta;
  meta.model = config_json(model.config());
  meta.data_position = {{"next_batch", step}, {"seed", o.seed}};
  meta.rng = {{"seed", o.seed}};
  meta.tokenizer_hash = tokenizer_hash;
  meta.plan = {{"ranks", 1}, {"batch", {o.batch}}, {"share", {1.0}}};
  meta.extra = {{"lr", o.lr}, {"steps", o.steps}, {"batch", o.batch}, {"seq", model.config().T}};
  return save_checkpoint(o.out, step, meta,
                         {{"master", model.params().data<float>(), P},
                          {"adam_m", opt.m().data<float>(), P},
                          {"adam_v", opt.v().data<float>(), P}});
}

// Loads parameters and optimizer state; returns the step the checkpoint was written at.
int load(const std::string& where, GPT& model, AdamW& opt, uint64_t tokenizer_hash) {
  const CheckpointReader reader = open_checkpoint(where);
  reader.check_model(config_json(model.config()));
  GPUMIX_CHECK(!tokenizer_hash || !reader.tokenizer_hash() || reader.tokenizer_hash() == tokenizer_hash,
               "checkpoint ", reader.dir(), " was trained with another tokenizer; resume with the "
               "run's own tokenizer (--tokenizer <run>/", kTokenizerFile, ")");
  const int64_t P = model.num_params();
  reader.read_slice("master", 0, model.params().data<float>(), P);
  reader.read_slice("adam_m", 0, opt.m().data<float>(), P);
  reader.read_slice("adam_v", 0, opt.v().data<float>(), P);
  std::printf("resumed from %s (step %lld)\n", reader.dir().c_str(), (long long)reader.step());
  return (int)reader.step();
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

}  // namespace

TrainResult train(const TrainOptions& o) {
  GPUMIX_CHECK(o.steps >= 1, "--steps must be at least 1, got ", o.steps);
  GPUMIX_CHECK(o.batch >= 1, "--batch must be at least 1, got ", o.batch);
  GPUMIX_CHECK(o.seq >= 0, "--seq must be positive, got ", o.seq);
  GPUMIX_CHECK(o.lr > 0, "--lr must be positive, got ", o.lr);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const GPTConfig preset = gpt_preset(o.model);  // fail fast on an unknown name

  fs::create_directories(o.out);
  const fs::path log_path = fs::path(o.out) / "log.jsonl";
  const bool resuming = !o.resume.empty();
  GPUMIX_CHECK(resuming || !fs::exists(log_path), "run folder ", o.out, " already holds a run (",
               log_path.string(), "); continue it with --resume ", o.out,
               ", or pass another --out");

  const int64_t seq = o.seq > 0 ? o.seq : preset.T;
  RunData run = prepare_data(o, preset.V);
  const GPTConfig config = resolve_model(o, run.vocab, seq);
  const data::Split split = data::split_train_val(run.tokens, seq, o.val_fraction);
  GPUMIX_CHECK((int64_t)split.train.size() > seq, "the training split has ", split.train.size(),
               " tokens, fewer than one sequence of ", seq + 1, "; use a larger corpus or a "
               "smaller --seq");
  const data::BatchLoader loader(split.train, seq, o.batch, o.seed);
  const data::BatchLoader val_loader(split.val, seq, o.batch, o.seed);
  const double unigram = data::unigram_cross_entropy(split.train, split.val, run.vocab);

  const Device device = Device::cpu();
  if (o.device_memory > 0) {
    DeviceProps props = device_props(device);
    props.capacity = o.device_memory;
    configure_device(device, props);
  }
  GPT model(config, device, o.seed);
  AdamWConfig adam;
  adam.weight_decay = o.weight_decay;
  AdamW opt(model.layout(), 0, model.num_params(), device, adam);
  LRSchedule schedule;
  schedule.max_lr = o.lr;
  schedule.min_lr = o.lr * o.min_lr_ratio;
  schedule.warmup = o.warmup >= 0 ? o.warmup : std::min(100, o.steps / 10);
  schedule.total = o.steps;

  int start = 0;
  if (resuming) {
    start = load(o.resume, model, opt, run.tokenizer_hash);
    GPUMIX_CHECK(start < o.steps, "the checkpoint is at step ", start, ", not before --steps ",
                 o.steps, "; pass a larger --steps to train further");
  }

  print_settings({
      {"data", o.data + " (" + human_count((double)run.tokens.size()) + " tokens)"},
      {"split", human_count((double)split.train.size()) + " train / " +
                    human_count((double)split.val.size()) + " validation"},
      {"tokenizer", run.tokenizer_path + " (vocab " + std::to_string(run.vocab) + ")"},
      {"model", config.name + " L=" + std::to_string(config.L) + " NH=" + std::to_string(config.NH) +
                    " C=" + std::to_string(config.C)},
      {"parameters", human_count((double)model.num_params())},
      {"batch x seq", std::to_string(o.batch) + " x " + std::to_string(seq) + " = " +
                          std::to_string(o.batch * seq) + " tokens/step"},
      {"steps", std::to_string(o.steps) + (resuming ? " (from step " + std::to_string(start) + ")" : "")},
      {"lr", str(o.lr, " warmup ", schedule.warmup, " cosine to ", schedule.min_lr)},
      {"weight decay / clip", str(o.weight_decay, " / ", o.grad_clip)},
      {"recompute", o.recompute ? "on" : "off"},
      {"device", device.str() + " (" + format_bytes(device_props(device).capacity) + ")"},
      {"threads", std::to_string(omp_get_max_threads())},
      {"seed", std::to_string(o.seed)},
      {"out", o.out},
  });

  std::ofstream log(log_path, std::ios::app);
  GPUMIX_CHECK(log.good(), "cannot write ", log_path.string());
  auto log_line = [&](const json& j) {
    log << j.dump() << "\n";
    log.flush();
  };

  TrainResult result;
  std::vector<double> rates;
  const int64_t tokens_per_step = o.batch * seq;
  const float scale = 1.0f / (float)tokens_per_step;
  Tensor inputs = Tensor::empty({o.batch, seq}, DType::i32, device);
  Tensor targets = Tensor::empty({o.batch, seq}, DType::i32, device);
  for (int step = start + 1; step <= o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    loader.get(step - 1, 0, o.batch, inputs.data<int32_t>(), targets.data<int32_t>());
    model.zero_grad();
    Var loss = model.loss(inputs, targets, scale, o.recompute);
    backward(loss);
    const double norm = std::sqrt(ops::sum_squares(model.grads()));
    const float clip = clip_factor(norm, o.grad_clip);
    if (clip < 1) ops::scale(model.grads(), model.grads(), clip);
    const float lr = schedule.at(step);
    opt.step(model.params(), model.grads(), lr, step);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double rate = tokens_per_step / (ms / 1e3);
    rates.push_back(rate);
    result.train_loss = loss.value().item();
    GPUMIX_CHECK(std::isfinite(result.train_loss) && std::isfinite(norm), "step ", step,
                 ": the loss (", result.train_loss, ") or gradient norm (", norm, ") is not finite; "
                 "lower --lr or resume from the last checkpoint");
    json line = {{"step", step}, {"loss", result.train_loss}, {"norm", norm}, {"lr", lr},
                 {"ms", ms}, {"tokens_per_s", rate}};
    const bool eval_now = (o.eval_interval > 0 && step % o.eval_interval == 0) || step == o.steps;
    double val = NAN;
    if (eval_now) {
      val = evaluate(model, val_loader, o.batch, step == o.steps ? 0 : o.eval_windows);
      line["val_loss"] = val;
    }
    log_line(line);
    if (!o.quiet)
      std::printf("step %d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s tok/s%s\n", step,
                  o.steps, result.train_loss, norm, lr, ms, human_count(rate).c_str(),
                  eval_now ? str(" | val ", val).c_str() : "");
    if ((o.ckpt_interval > 0 && step % o.ckpt_interval == 0) || step == o.steps)
      result.checkpoint = save(o, model, opt, step, run.tokenizer_hash);
    if (eval_now) result.val_loss = val;
    result.step = step;
    std::fflush(stdout);
  }
  std::sort(rates.begin(), rates.end());
  result.tokens_per_s = rates.empty() ? 0 : rates[rates.size() / 2];
  result.unigram_loss = unigram;
  log_line({{"final", true}, {"step", result.step}, {"val_loss", result.val_loss},
            {"unigram_loss", unigram}, {"tokens_per_s", result.tokens_per_s}});
  std::printf("validation loss %.4f nats/token vs unigram baseline %.4f (%.2f below)\n",
              result.val_loss, unigram, unigram - result.val_loss);
  std::printf("checkpoint: %s\n", result.checkpoint.c_str());
  return result;
}

// ---- generation ----------------------------------------------------------------------------

std::string generate(const GenerateOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  GPUMIX_CHECK(o.tokens >= 0, "--tokens must be >= 0, got ", o.tokens);
  GPUMIX_CHECK(o.temperature >= 0, "--temperature must be >= 0, got ", o.temperature);
  const CheckpointReader reader = open_checkpoint(o.ckpt);
  const std::string dir = reader.dir();
  const GPTConfig config = config_from_json(reader.model());
  // The tokenizer sits in the run folder, the checkpoint folder's parent.
  const fs::path tok_path = fs::path(dir).parent_path() / kTokenizerFile;
  GPUMIX_CHECK(fs::exists(tok_path), "no tokenizer next to checkpoint ", dir, " (expected ",
               tok_path.string(), ")");
  const data::Tokenizer tok = data::Tokenizer::load(tok_path.string());
  GPUMIX_CHECK(tok.vocab_size() == config.V, "tokenizer ", tok_path.string(), " has vocabulary ",
               tok.vocab_size(), " but the model has ", config.V);
  GPT model(config, Device::cpu(), 0);
  reader.read_slice("master", 0, model.params().data<float>(), model.num_params());

  std::vector<int32_t> ids = tok.encode(o.prompt);
  if (ids.empty()) ids.push_back(tok.eot_id());
  const size_t prompt_len = ids.size();
  std::vector<float> probs(config.V);
  for (int i = 0; i < o.tokens; ++i) {
    const int64_t T = std::min<int64_t>((int64_t)ids.size(), config.T);
    std::vector<int32_t> context(ids.end() - T, ids.end());
    const Tensor logits = model.logits(Tensor::from_vector(context, {1, T}));
    const float* last = logits.data<float>() + (T - 1) * config.V;  // (V)
    int32_t next = 0;
    if (o.temperature == 0) {
      next = (int32_t)(std::max_element(last, last + config.V) - last);
    } else {
      // Top-k on the scaled logits, then sample with a counter-based uniform.
      std::vector<int32_t> order(config.V);
      for (int v = 0; v < config.V; ++v) order[v] = v;
      const int k = o.top_k > 0 ? std::min(o.top_k, config.V) : config.V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return last[a] > last[b]; });
      double total = 0;
      for (int j = 0; j < k; ++j) {
        probs[j] = std::exp((last[order[j]] - last[order[0]]) / o.temperature);
        total += probs[j];
      }
      const double u = philox_uniform_at(rng_key(o.seed, "generate"), (uint64_t)i) * total;
      double acc = 0;
      next = order[k - 1];
      for (int j = 0; j < k; ++j) {
        acc += probs[j];
        if (u < acc) {
          next = order[j];
          break;
        }
      }
    }
    ids.push_back(next);
  }
  (void)prompt_len;
  return tok.decode(ids);
}

}  // namespace gpumix
