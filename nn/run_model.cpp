#include "nn/run_model.h"

#include "core/error.h"
#include "nn/hf/gpt2.h"
#include "nn/model_stages.h"

namespace gpumix {

namespace {

// --init-from's config.json, once no flag contradicts the folder and its weights match it:
// checked before the run writes anything.
GPTConfig init_from_config(const TrainOptions& o) {
  GPUMIX_CHECK_INPUT(o.tokenizer.empty(), "--tokenizer ", o.tokenizer, " contradicts --init-from ", o.init_from,
               ", whose vocab.json and merges.txt are the tokenizer; drop one of them");
  GPUMIX_CHECK_INPUT(!o.layers && !o.heads && !o.channels, "--layers/--heads/--channels contradict --init-from ",
               o.init_from, ", whose config.json gives the model's shape; drop them");
  const GPTConfig c = hf::read_config(o.init_from);
  GPUMIX_CHECK_INPUT(o.seq <= c.T, "--seq ", o.seq, " exceeds the context of ", o.init_from, " (n_positions ", c.T,
               " in its config.json); pass --seq ", c.T, " or less");
  hf::Weights(o.init_from, c);  // names, shapes, dtypes: every contradiction with config.json
  return c;
}

}  // namespace

int64_t resolve_seq(const TrainOptions& o) {
  const int64_t context = o.init_from.empty() ? gpt_preset(o.model).T  // an unknown name fails here
                                              : init_from_config(o).T;
  return o.seq > 0 ? o.seq : context;
}

GPTConfig resolve_model(const TrainOptions& o, int64_t vocab, int64_t seq) {
  if (!o.init_from.empty()) {
    const GPTConfig c = init_from_config(o);
    GPUMIX_CHECK_INPUT(c.V == vocab, o.init_from, "/config.json: vocab_size ", c.V, " but the data's vocabulary is ",
                 vocab, "; train on text (encoded with the folder's tokenizer) or on a token file it made");
    GPUMIX_CHECK_INPUT(seq <= c.T, "sequence length ", seq, " exceeds n_positions ", c.T, " of ", o.init_from);
    return c;  // the context stays n_positions: training on shorter windows uses wpe's first rows
  }
  GPTConfig c = gpt_preset(o.model);
  if (o.layers) c.L = o.layers;
  if (o.heads) c.NH = o.heads;
  if (o.channels) c.C = o.channels;
  if (o.layers || o.heads || o.channels) c.name = o.model + "(custom)";
  c.V = (int)vocab;
  if (seq > 0) c.T = (int)seq;
  c.validate();
  model_stages(c);  // a family with a shape alone (llama, so far) is refused before anything is written
  return c;
}

}  // namespace gpumix
