#include "dist/engine/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "core/log.h"
#include "core/precision.h"
#include "dist/engine/fault.h"
#include "nn/gpt.h"
#include "nn/run_folder.h"

namespace gpumix::dist {

using json = nlohmann::json;

namespace {

// The arrays of a slice move between files and the device through host memory: a tensor
// on a CPU is its own host copy; one on a GPU is copied (the checkpoint's format is the
// same either way, so a run resumes on the other kind of device).
Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

// Files hold the saved layout (the flat one without the vocabulary's padding, nn/gpt.h
// gpt_saved_runs): a slice [offset, offset + n) of the flat layout moves run by run; its
// padding elements are in no file and read as zeros.
void write_runs(const std::vector<ParamInfo>& layout, const std::string& tmp, const char* name, int64_t offset,
                const Tensor& src) {
  const Tensor host = host_copy(src);
  for (const SavedRun& r : gpt_saved_runs(layout, offset, src.numel()))
    CheckpointWriter::write_slice(tmp, name, r.saved, host.data<float>() + (r.flat - offset), r.count);
}

void read_into(const std::vector<ParamInfo>& layout, const CheckpointReader& reader, const char* name,
               int64_t offset, const Tensor& dst) {
  fill_through_host(dst, [&](float* host, int64_t n) {
    std::fill(host, host + n, 0.0f);
    for (const SavedRun& r : gpt_saved_runs(layout, offset, n))
      reader.read_slice(name, r.saved, host + (r.flat - offset), r.count);
  });
}

}  // namespace

void fill_through_host(Tensor dst, const std::function<void(float*, int64_t)>& read) {
  Tensor host = dst.device().is_cpu() ? dst : Tensor::empty(dst.shape(), DType::f32, Device::cpu());
  read(host.data<float>(), dst.numel());
  if (!dst.device().is_cpu()) dst.copy_from(host);
}

std::string save_checkpoint(const TrainOptions& o, const GPTConfig& config, DType dtype,
                            const Work& work, Engine& engine, Comm& comm, int step,
                            uint64_t tokenizer_hash) {
  const int64_t P = config.saved_params();
  const std::vector<ParamInfo> layout = gpt_param_layout(config);
  // The temporary folder's nonce: the step and a number rank 0 draws for this save (a sum
  // with zeros, exact in double: every rank gets it). A leftover folder of an interrupted
  // save of the same step (a rank killed while writing) must not block the resumed run's.
  const uint64_t draw = comm.rank() == 0 ? (uint64_t)std::random_device{}() : 0;
  const std::string nonce = "s" + std::to_string(step) + "r" + std::to_string((uint64_t)comm.all_reduce_sum((double)draw));
  CheckpointWriter writer;
  std::string error, tmp = checkpoint_temp_dir(o.out, step, nonce);
  auto attempt = [&](auto&& fn) {
    error.clear();
    try {
      fn();
    } catch (const std::exception& e) {
      error = local_error_of(e);
    }
  };
  if (comm.rank() == 0)
    attempt([&] { tmp = writer.begin(o.out, step, {{"master", P}, {"adam_m", P}, {"adam_v", P}}, nonce); });
  comm.agree("checkpoint: preparing step " + std::to_string(step), {}, error);
  attempt([&] {
    if (!engine.primary_replica()) return;  // the first group writes; replicas hold the same
    for (const OwnedSlice& s : engine.slices()) {
      write_runs(layout, tmp, "master", s.flat_offset, s.master);
      write_runs(layout, tmp, "adam_m", s.flat_offset, s.opt->m());
      write_runs(layout, tmp, "adam_v", s.flat_offset, s.opt->v());
    }
  });
  fault_point(comm.rank(), "checkpoint");
  comm.agree("checkpoint: writing slices of step " + std::to_string(step), {}, error);
  std::string dir;
  if (comm.rank() == 0) {
    CheckpointMeta meta;
    meta.model = config_to_json(config);
    meta.data_position = {{"next_batch", step}, {"seed", o.seed}};
    meta.rng = {{"seed", o.seed}};
    meta.tokenizer_hash = tokenizer_hash;
    json ranks = json::array();
    for (const RankWork& w : work.ranks) ranks.push_back({{"batch", w.batch}, {"micro_batch", w.micro_batch}, {"share", w.share}});
    meta.plan = {{"ranks", ranks}, {"global_batch", o.batch}, {"group_size", work.sharding.group_size}};
    meta.extra = {{"lr", o.lr}, {"steps", o.steps}, {"seq", o.seq > 0 ? o.seq : (int64_t)config.T}, {"dtype", dtype_name(dtype)}};
    attempt([&] {
      dir = writer.commit(meta);
      fault_point(comm.rank(), "prune");  // between the commit and the deletion of old ones
      if (o.keep_checkpoints > 0) prune_checkpoints(o.out, o.keep_checkpoints);
    });
  }
  comm.agree("checkpoint: committing step " + std::to_string(step), {}, error);
  return dir;
}

int load_checkpoint(const std::string& where, const GPTConfig& config, Engine& engine, Comm& comm,
                    uint64_t tokenizer_hash) {
  std::string error;
  int64_t step = -1;
  try {
    const CheckpointReader reader = open_checkpoint(where);
    reader.check_model(config_to_json(config));
    GPUMIX_CHECK_INPUT(!tokenizer_hash || !reader.tokenizer_hash() || reader.tokenizer_hash() == tokenizer_hash,
                       "checkpoint ", reader.dir(), " was trained with another tokenizer; resume with the "
                       "run's own (--tokenizer <run>/tokenizer.bpe)");
    const std::vector<ParamInfo> layout = gpt_param_layout(config);
    for (const OwnedSlice& s : engine.slices()) {
      read_into(layout, reader, "master", s.flat_offset, s.master);
      read_into(layout, reader, "adam_m", s.flat_offset, s.opt->m());
      read_into(layout, reader, "adam_v", s.flat_offset, s.opt->v());
    }
    engine.sync_compute_params();
    step = reader.step();
    if (comm.rank() == 0) log_info("resumed from ", reader.dir(), " (step ", step, ")");
  } catch (const std::exception& e) {
    error = local_error_of(e);
  }
  comm.agree("resume", {step}, error);
  return (int)step;
}

DType checkpoint_dtype(const CheckpointReader& reader) {
  const nlohmann::json& extra = reader.meta().contains("extra") ? reader.extra() : nlohmann::json();
  if (!extra.is_object() || !extra.contains("dtype")) return DType::f32;
  GPUMIX_CHECK_INPUT(extra["dtype"].is_string(), reader.dir(), "/meta.json: extra.dtype must be a string (bf16 or f32), got ",
                     extra["dtype"].dump());
  return compute_dtype_from_name(extra["dtype"].get<std::string>(), (reader.dir() + "/meta.json: extra.dtype").c_str());
}

}  // namespace gpumix::dist
