// gpumix export: a checkpoint as a Hugging Face GPT-2 folder (nn/hf/gpt2.h), which
// GPT2LMHeadModel.from_pretrained and GPT2Tokenizer.from_pretrained read.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "nn/hf/gpt2.h"
#include "nn/infer.h"
#include "nn/run_folder.h"
#include "tools/command.h"

namespace {

int cmd_export(int argc, char** argv) {
  std::string ckpt, out, dtype = "fp32";
  CLI::App app{"Write a checkpoint as a Hugging Face GPT-2 folder: model.safetensors, config.json, vocab.json, merges.txt"};
  app.add_option("--ckpt", ckpt, "run folder (its latest checkpoint) or checkpoint folder")->required();
  app.add_option("--out", out, "folder to write (must not exist, or be empty)")->required();
  app.add_option("--dtype", dtype, "weights in the file: fp32 (exact) or bf16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const gpumix::CheckpointReader reader = gpumix::open_checkpoint(ckpt);
  const std::unique_ptr<gpumix::GPT> model = gpumix::load_model(reader);
  const gpumix::GPTConfig& c = model->config();
  const gpumix::data::Tokenizer tokenizer = gpumix::checkpoint_tokenizer(reader, c.V);
  gpumix::hf::write_model(out, c, model->params().data<float>(), tokenizer,
                          dtype == "bf16" ? gpumix::safetensors::DType::BF16 : gpumix::safetensors::DType::F32);
  std::printf("wrote %s: model.safetensors (%lld parameters, %s), config.json (n_layer %d, n_head %d, n_embd %d, "
              "n_positions %d, vocab_size %d), vocab.json, merges.txt\n",
              out.c_str(), (long long)c.saved_params(), dtype.c_str(), c.L, c.NH, c.C, c.T, c.V);
  if (tokenizer.pretokenizer() == gpumix::data::Pretokenizer::gpumix_v1)
    std::printf("note: this run's tokenizer is a version-1 file (GPUMix's ASCII pre-tokenizer); GPT-2's tokenizer "
                "reading vocab.json + merges.txt splits non-ASCII text differently, ASCII text the same\n");
  return 0;
}

}  // namespace

GPUMIX_COMMAND("export", "write a checkpoint as a Hugging Face GPT-2 folder", cmd_export);
