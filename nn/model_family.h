// A model family: everything the rest of GPUMix knows about one kind of decoder (GPT-2,
// Llama, ...), in two halves. This one, ModelFamily, is its shape: unit sizes, costs, JSON
// fields, presets; the planner, the simulator and checkpoints link only this (the
// gpumix_nn_config library). nn/model_stages.h is the other: its parameter layout and how
// it computes. The engine, the profiler, the planner's cost and memory models,
// checkpoints, `gpumix bench`, inference and the tools read a model only through GPTConfig
// (its shape, which names its family) and these two; none of them names a family's
// parameters or formulas.
//
// A model is always a sequence of sharding units: unit 0 the embedding, units 1..L the
// blocks, unit L+1 the head (its final norm, and its output matrix where the head is not
// tied to the embedding). A family says how many parameters each unit holds, how they are
// laid out (ParamInfo, nn/gpt.h), what a block costs, and how each stage computes on the
// autograd tape.
//
// Adding a family: docs/architecture.md ("Model families") lists the files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/gpt_config.h"

namespace gpumix {

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  // The family's name as GPTConfig::family and checkpoints hold it ("gpt2", "llama").
  virtual const char* name() const = 0;
  // Its presets (GPTConfig::name set, family set).
  virtual std::vector<GPTConfig> presets() const = 0;
  // Throws std::invalid_argument naming the field when the family's own fields of `c` are
  // invalid (the common ones, L NH C V T, are checked by GPTConfig::validate).
  virtual void validate(const GPTConfig& c) const = 0;
  // The family's fields beyond {name, L, NH, C, V, T} into / from a model's JSON (`where`
  // names it in errors; a missing field takes the family's default).
  virtual void fields_to_json(const GPTConfig& c, nlohmann::json& j) const = 0;
  virtual void fields_from_json(const nlohmann::json& j, const std::string& where, GPTConfig& c) const = 0;

  // ---- parameter layout ----
  virtual int64_t embed_params(const GPTConfig& c) const = 0;
  virtual int64_t block_params(const GPTConfig& c) const = 0;
  virtual int64_t head_params(const GPTConfig& c) const = 0;
  // True when the head computes with unit 0's parameters (a tied LM head): an engine keeps
  // the embedding gathered, with its gradient, from the head to the end of the backward.
  virtual bool head_reads_embedding(const GPTConfig& c) const = 0;

  // ---- costs ----
  // Forward FLOPs of one token through one block at sequence length t (2 per multiply-add,
  // attention under the causal mask), and through the head (V, not the padded Vp).
  virtual double block_forward_flops_per_token(const GPTConfig& c, int t) const = 0;
  virtual double head_forward_flops_per_token(const GPTConfig& c) const = 0;
  // Analytic peak bytes of one block's recompute + backward at micro-batch m (for when no
  // profile is measured: the simulator's synthesis).
  virtual double block_activation_bytes(const GPTConfig& c, int seq_len, int64_t m, int dtype_bytes) const = 0;
};

// The family named `name`; throws std::invalid_argument listing the known ones.
const ModelFamily& model_family(const std::string& name);
// Every family, in a fixed order (the first is GPT-2, the default).
std::vector<const ModelFamily*> model_families();

// The families (each in its own file; the registry in model_family.cpp lists them).
const ModelFamily& gpt2_family();
const ModelFamily& llama_family();  // its shape only, so far: no stages

}  // namespace gpumix
