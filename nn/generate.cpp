#include "nn/generate.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "nn/data/file_util.h"
#include "nn/run_folder.h"

namespace gpumix {

using json = nlohmann::json;

std::string generate(const GenerateOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  GPUMIX_CHECK_INPUT(o.ckpt.empty() != o.model.empty(), "pass one of --ckpt RUN (a GPUMix run or checkpoint) and "
               "--model DIR (a Hugging Face GPT-2 folder)");
  GPUMIX_CHECK_INPUT(o.prompt_ids.empty() || o.prompt.empty(),
               "a prompt as text and as token ids contradict each other; give one");
  std::unique_ptr<GPT> model;
  std::optional<data::Tokenizer> tok;  // not needed for a prompt of ids
  if (!o.model.empty()) {
    HfModel m = load_hf_model(o.model, o.dtype);
    model = std::move(m.model);
    tok = std::move(m.tokenizer);
  } else {
    const CheckpointReader reader = open_checkpoint(o.ckpt);
    model = load_model(reader, o.dtype);
    if (o.prompt_ids.empty()) tok = checkpoint_tokenizer(reader, model->config().V);
  }
  std::vector<int32_t> ids = o.prompt_ids;
  if (ids.empty()) ids = tok->encode(o.prompt);
  if (ids.empty()) ids.push_back(tok->eot_id());
  if (!o.dump_logits.empty()) {
    // The prompt's logits, to compare with another implementation (tests/hf/make_hf_golden.py).
    const int64_t T = std::min<int64_t>((int64_t)ids.size(), model->config().T);
    const std::vector<int32_t> context(ids.begin(), ids.begin() + T);
    check_token_ids(context.data(), T, model->config().V, "prompt id");
    const json j = {{"source", "gpumix generate"}, {"prompt", o.prompt}, {"tokens", context},
                    {"logits", model->logits(Tensor::from_vector(context, {1, T})).to_vector()}};  // (T, V)
    data::write_file_atomic(o.dump_logits, j.dump());
  }
  GPUMIX_CHECK_INPUT(o.num_samples >= 1, "generate: --num-samples must be >= 1, got ", o.num_samples);
  SampleOptions so = o;
  if (tok) so.stop.push_back(tok->eot_id());  // a sample ends at its <|endoftext|>
  std::vector<std::vector<int32_t>> samples((size_t)o.num_samples, ids);
  sample_batch(*model, samples, so);
  std::string out;
  for (size_t j = 0; j < samples.size(); ++j) {
    if (samples.size() > 1) out += (j ? "\n" : "") + std::string("--- sample ") + std::to_string(j) + " ---\n";
    if (!o.prompt_ids.empty()) {
      std::string line;
      for (int32_t id : samples[j]) line += (line.empty() ? "" : " ") + std::to_string(id);
      out += line;
    } else {
      out += tok->decode(samples[j]);
    }
  }
  return out;
}

}  // namespace gpumix
