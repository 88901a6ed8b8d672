// Helpers shared by the engine's tests (local backend and MPI): a tiny run's data, the
// options of a tiny GPT, reading a run's log and checkpoint, and the tolerance formulas.
//
// Data: a 512-token BPE trained once on tests/data/tiny_corpus.txt and the corpus encoded
// with it into a token file, both in a temporary folder; every run reads them, so no run
// trains a tokenizer.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/precision.h"
#include "dist/engine/trainer.h"
#include "nn/checkpoint.h"
#include "nn/data/bpe.h"
#include "nn/data/corpus.h"
#include "nn/data/token_file.h"
#include "nn/gpt.h"
#include "nn/run_model.h"
#include "nn/train_options.h"

namespace gpumix::dist::test {

namespace fs = std::filesystem;

inline std::string tiny_corpus_path() { return std::string(GPUMIX_TESTS_DATA_DIR) + "/tiny_corpus.txt"; }

// A fresh folder under the system temp folder; removed by the destructor unless `keep`.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "engine") {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("gpumix_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

constexpr int kTinyVocab = 512;

// Writes <dir>/tokenizer.bpe (kTinyVocab) and <dir>/tokens.bin (the tiny corpus encoded).
inline void make_tiny_data(const std::string& dir) {
  const std::string text = data::read_corpus(tiny_corpus_path());
  const data::Tokenizer tok = data::Tokenizer::train(text, kTinyVocab);
  tok.save(dir + "/tokenizer.bpe");
  const std::vector<int32_t> ids = tok.encode(text);
  data::write_token_file(dir + "/tokens.bin", data::TokenView(ids), (uint64_t)tok.vocab_size(), tok.hash());
}

// A tiny GPT (L=2, NH=4, C=32, T=16, V=512) on the tiny data: 8 sequences per step, 5
// steps, no warmup (so that every step moves the weights at full rate), no evaluation but
// the final one, in fp32 (the bf16 tests say so). Its log and checkpoints go to `out`.
inline TrainOptions tiny_options(const std::string& data_dir, const std::string& out) {
  TrainOptions o;
  o.data = data_dir + "/tokens.bin";
  o.tokenizer = data_dir + "/tokenizer.bpe";
  o.model = "gpt-nano";
  o.layers = 2;
  o.heads = 4;
  o.channels = 32;
  o.seq = 16;
  o.batch = 8;
  o.steps = 5;
  o.lr = 3e-3f;
  o.warmup = 0;
  o.eval_interval = 0;
  o.eval_windows = 4;
  o.ckpt_interval = 0;
  o.seed = 7;
  o.quiet = true;
  o.out = out;
  o.dtype = DType::f32;
  return o;
}

// Full sharding.
inline Work make_work(const std::vector<int64_t>& batches, const std::vector<int64_t>& micro,
                      const std::vector<double>& shares) {
  Work work;
  for (size_t r = 0; r < batches.size(); ++r) work.ranks.push_back({batches[r], micro[r], shares[r]});
  return work;
}

// One line of a run's log.jsonl.
struct LogStep {
  int step = 0;
  double loss = 0;
  double norm = 0;
};

// Every line of <out>/log.jsonl, in file order.
inline std::vector<nlohmann::json> read_log_lines(const std::string& out) {
  std::ifstream in(out + "/log.jsonl");
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The per-step lines of <out>/log.jsonl (not the final summary), in file order.
inline std::vector<LogStep> read_log(const std::string& out) {
  std::vector<LogStep> steps;
  for (const nlohmann::json& j : read_log_lines(out))
    if (!j.contains("final"))
      steps.push_back({j.at("step").get<int>(), j.at("loss").get<double>(), j.at("norm").get<double>()});
  return steps;
}

// The whole array `name` ("master", "adam_m", "adam_v") of a checkpoint folder.
inline std::vector<float> read_array(const std::string& ckpt, const std::string& name = "master") {
  const CheckpointReader reader(ckpt);
  std::vector<float> values((size_t)reader.array_count(name));
  reader.read_slice(name, 0, values.data(), (int64_t)values.size());
  return values;
}

// ---- tolerances --------------------------------------------------------------------------
//
// Two plans compute the same gradient with the additions in another order (micro-batches,
// ranks), so results differ by fp32 rounding. The allowance is the fp32 formula of
// docs/design.md, |x - ref| <= atol + rtol * |ref|:
//   losses (a mean over the batch of per-token cross-entropies, ~6 nats):
//       rtol = 1e-5, atol = 0
//   parameters after k AdamW steps at peak rate lr:
//       rtol = 1e-5, atol = 1e-3 * k * lr
//   AdamW normalises each update by the gradient's own running magnitude, so an element
//   whose gradient is pure rounding noise (a sum that cancels) may move by up to lr per
//   step in either plan; 1e-3 * k * lr allows such an element a relative disagreement of
//   1e-3 in its k updates, while a wrong gradient (a missing micro-batch, a double-counted
//   rank, a wrong scale) moves most elements by ~lr per step and fails by orders of
//   magnitude.
//   Which elements are such noise depends on the order of the additions, and so on the
//   compiler too (its contraction and vectorisation of them): at most 1 element in 10,000
//   (at least 1) may therefore exceed the allowance, by no more than both plans moving it
//   fully apart, 2 k lr (params_agree).
//
// In bf16 (docs/design.md "Numbers and precision") the same holds, with two changes. A gathered
// unit is each rank's slice of the same fp32 masters rounded to bf16 and concatenated, the
// rounding one rank's model makes of its own master, so every plan computes with the
// parameters one rank does, and the kernels compute a row alike in any micro-batch up to
// fp32 rounding: what differs is again the order of fp32 additions (gradients over
// micro-batches and ranks, losses over ranks, the kernels' own). Where that leaves two
// plans' values a relative δ apart, their bf16 rounding goes the other way with probability
// about δ / 2^-8 and then differs by 2^-8: on average δ, as in fp32, so the losses keep the
// fp32 allowance. What grows is the spread: a value that rounded the other way changes the
// terms of the gradients that use it by up to one bf16 rounding, so a gradient, and with it
// an AdamW update and a first moment, may differ by that much relative:
//   parameters after k AdamW steps (bf16): rtol = 1e-5, atol = 2^-8 * k * lr
//   first moments (bf16):                  rtol = 2^-8, atol = 1e-3 of the largest
// (the fp32 formulas with bf16's rounding 2^-8 in place of 1e-3 and of 1e-5), and 1 in 2,000
// noise elements: measured on EngineCudaTest.ThreeRanksOnOneGpuTrainLikeOneRankOnIt (42,368
// weights, 5 steps) over seeds 1-8 under two data orders, 13 of the 16 runs had none over
// the allowance and 3 had a cluster of 5, 7 and 11 (at most 1 in 3,850; 3.2x the allowance
// at worst): one rounding that went the other way reaches every weight its gradient feeds. A wrong gradient (a missing micro-batch: 1/8 of the batch)
// still moves most elements by ~lr / 8 per step, 32x this allowance.
//
// And one kind of element is all noise, in either dtype: the key biases (the middle C of
// every block's attn.c_attn.bias) have a gradient of exactly zero, since a constant added to
// every key's score leaves the softmax as it is, so what they get is the rounding noise of
// its terms. Where that noise is above AdamW's eps (1e-8) - in bf16 (~2^-8 of the terms),
// and in fp32 from trained weights (GPT-2's) - AdamW turns it into steps of ~lr whose signs
// differ between plans: they may move fully apart, 2 k lr (param_allowances). Losses do
// not see them.
//
// A bf16 run against an fp32 one (the resumes across dtypes) rounds every activation and
// parameter used in compute to bf16, a relative 2^-8 each, and that is the losses'
// allowance between them: rtol = 2^-8 (the losses move by more than that in a few steps).
constexpr double kLossRtol = 1e-5;
constexpr double kParamRtol = 1e-5;
constexpr double kBf16Rounding = 1.0 / 256;  // 2^-8: bf16's 8 significand bits
inline double param_atol(int steps, double lr, DType dtype = DType::f32) {
  return (dtype == DType::bf16 ? kBf16Rounding : 1e-3) * steps * lr;
}
inline double moment_rtol(DType dtype) { return dtype == DType::bf16 ? kBf16Rounding : kParamRtol; }

// The absolute allowance of each master weight of the model of checkpoint `ckpt` after
// `steps` AdamW steps: param_atol, and 2 k lr for the key biases (see above).
inline std::vector<double> param_allowances(const std::string& ckpt, int steps, double lr, DType dtype) {
  const GPTConfig config = config_from_json(CheckpointReader(ckpt).model(), ckpt);
  const std::vector<ParamInfo> layout = gpt_param_layout(config);
  // Checkpoints hold the saved layout (wte without its padding rows): the biases' flat
  // offsets are mapped to it.
  std::vector<double> atol((size_t)config.saved_params(), param_atol(steps, lr, dtype));
  for (const ParamInfo& p : layout)
    if (p.name.size() > 16 && p.name.compare(p.name.size() - 16, 16, "attn.c_attn.bias") == 0)
      for (const SavedRun& r : gpt_saved_runs(layout, p.offset + config.C, config.C))
        std::fill(atol.begin() + r.saved, atol.begin() + r.saved + r.count, 2.0 * steps * lr);
  return atol;
}

struct Mismatch {
  size_t worst = 0;         // index of the element furthest over its allowance
  double excess = -1;       // |x - ref| / allowance at that element (<= 1 passes)
  double value = 0, ref = 0;
  size_t count = 0;         // elements over their allowance
};

// |x - ref| <= atol + rtol |ref| elementwise; atol_of (when given) holds each element's atol.
inline Mismatch compare(const std::vector<double>& x, const std::vector<double>& ref, double rtol, double atol,
                        const std::vector<double>& atol_of = {}) {
  Mismatch m;
  for (size_t i = 0; i < std::min(x.size(), ref.size()); ++i) {
    const double allowance = (atol_of.empty() ? atol : atol_of[i]) + rtol * std::fabs(ref[i]);
    const double diff = std::fabs(x[i] - ref[i]);
    const double excess = allowance > 0 ? diff / allowance
                                        : (diff == 0 ? 0 : std::numeric_limits<double>::infinity());
    if (!(excess <= 1)) ++m.count;
    if (!(excess <= m.excess)) {
      m.excess = excess;
      m.worst = i;
      m.value = x[i];
      m.ref = ref[i];
    }
  }
  return m;
}

// Master weights of two plans after `steps` AdamW steps at peak rate lr (see above).
inline bool params_agree(const Mismatch& m, size_t elements, int steps, double lr, DType dtype = DType::f32) {
  const size_t noise = std::max<size_t>(1, elements / (dtype == DType::bf16 ? 2000 : 10000));
  return m.excess <= 1 || (m.count <= noise && std::fabs(m.value - m.ref) <= 2 * steps * lr + kParamRtol * std::fabs(m.ref));
}

inline std::string describe(const Mismatch& m, const char* what) {
  std::ostringstream s;
  s.precision(9);
  s << what << ": " << m.count << " element(s) over the allowance; worst [" << m.worst << "] = " << m.value
    << " vs reference " << m.ref << " (|diff| " << std::fabs(m.value - m.ref) << ", " << m.excess
    << "x the allowance)";
  return s.str();
}

inline std::vector<double> losses_of(const std::vector<LogStep>& log) {
  std::vector<double> v;
  for (const LogStep& s : log) v.push_back(s.loss);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

// ---- the mpirun tests with their own main (test_engine_mpi, test_engine_nccl) ------------------

// This process's failed checks; check() prints each.
inline int& process_failures() {
  static int failures = 0;
  return failures;
}
inline void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  ++process_failures();
}

// Runs fn(comm) (its status: 0 pass, 1 fail) and returns every rank's worst status; rank 0
// prints "<name>: PASSED" or "FAILED". An exception aborts the job, naming the rank.
inline int run_checks(Comm& comm, const char* name, const std::function<int(Comm&)>& fn) {
  int status = 0;
  try {
    status = fn(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    comm.abort(e.what());
  }
  const int worst = (int)comm.all_reduce_max((double)status);
  if (comm.rank() == 0) std::printf("%s: %s\n", name, worst == 0 ? "PASSED" : "FAILED");
  return worst;
}

}  // namespace gpumix::dist::test
