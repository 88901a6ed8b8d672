#include "dist/engine/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/log.h"
#include "core/precision.h"
#include "dist/engine/fault.h"
#include "nn/data/loader.h"
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
void write_runs(const std::vector<ParamInfo>& layout, const std::string& tmp, const std::string& name, int64_t offset,
                const Tensor& src) {
  const Tensor host = host_copy(src);
  for (const SavedRun& r : gpt_saved_runs(layout, offset, src.numel()))
    CheckpointWriter::write_slice(tmp, name, r.saved, host.data<float>() + (r.flat - offset), r.count);
}

// Elements [offset, offset + n) of the flat layout from the array `name`: padding zero.
void read_runs(const std::vector<ParamInfo>& layout, const CheckpointReader& reader, const std::string& name,
               int64_t offset, float* host, int64_t n) {
  std::fill(host, host + n, 0.0f);
  for (const SavedRun& r : gpt_saved_runs(layout, offset, n))
    reader.read_slice(name, r.saved, host + (r.flat - offset), r.count);
}

void read_into(const std::vector<ParamInfo>& layout, const CheckpointReader& reader, const std::string& name,
               int64_t offset, const Tensor& dst) {
  fill_through_host(dst, [&](float* host, int64_t n) { read_runs(layout, reader, name, offset, host, n); });
}

// Group g's array of a local-mode checkpoint: group 0's under the usual name (adam_m), the
// others' beside it (adam_m.g1, ...).
std::string group_array(const char* name, int group) {
  return group == 0 ? std::string(name) : str(name, ".g", group);
}

// The token-weighted mean over the saved groups of their arrays `name`, in double, in group
// order: the same bits on every rank. One group of weight 1 reads as it is.
void read_mean_into(const std::vector<ParamInfo>& layout, const CheckpointReader& reader, const char* name,
                    const std::vector<double>& weights, int64_t offset, const Tensor& dst) {
  double total = 0;
  for (double w : weights) total += w;
  fill_through_host(dst, [&](float* host, int64_t n) {
    std::vector<double> sum((size_t)n, 0.0);
    std::vector<float> one((size_t)n);
    for (size_t g = 0; g < weights.size(); ++g) {
      read_runs(layout, reader, group_array(name, (int)g), offset, one.data(), n);
      for (int64_t j = 0; j < n; ++j) sum[j] += weights[g] * (double)one[j];
    }
    for (int64_t j = 0; j < n; ++j) host[j] = (float)(sum[j] / total);
  });
}

std::string sync_text(const LocalSync& s) {
  return str("--sync local:", s.every, " (outer lr ", s.outer_lr, ", momentum ", s.outer_momentum,
             s.nesterov ? ", Nesterov)" : ", plain)");
}

std::string weights_text(const std::vector<double>& weights) {
  std::string text;
  for (double w : weights) text += str(text.empty() ? "" : ", ", w);
  return text;
}

// What a resume does with a checkpoint's groups in this run (checkpoint.h), in words.
std::string resume_rule(const SavedGroups& saved, const OuterStep* outer) {
  const int groups = outer ? outer->groups() : 1;
  std::string rule;
  if (saved.groups == groups) {
    if (groups > 1) rule = str(groups, " groups as saved, each with its own AdamW moments");
  } else if (saved.groups == 1) {
    rule = str("the checkpoint's AdamW moments are one group's (every-step training); each of this run's ",
               groups, " groups starts from them");
  } else {
    rule = str("the checkpoint holds the AdamW moments of ", saved.groups, " groups (token weights ",
               weights_text(saved.weights), "); ",
               groups == 1 ? std::string("this run trains as one group (every-step training), which starts")
                           : str("each of this run's ", groups, " groups starts"),
               " from their token-weighted mean");
  }
  auto add = [&](const std::string& part) { rule += str(rule.empty() ? "" : "; ", part); };
  if (outer && saved.local) {
    add(str("the outer momentum after ", saved.outer_steps, " outer steps"));
    if (saved.sync.every != outer->sync().every || saved.sync.outer_lr != outer->sync().outer_lr ||
        saved.sync.outer_momentum != outer->sync().outer_momentum || saved.sync.nesterov != outer->sync().nesterov)
      add(str("written with ", sync_text(saved.sync), ", continued with ", sync_text(outer->sync())));
  } else if (outer) {
    add("no outer state in the checkpoint (an every-step run's): the outer copy starts from its master weights, "
        "the outer momentum from zero");
  } else if (saved.local) {
    add(str("no outer step in this run: the outer momentum of ", sync_text(saved.sync), " after ", saved.outer_steps,
            " outer steps is dropped, the master weights are the outer copy"));
  }
  return rule;
}

}  // namespace

SavedGroups saved_groups(const CheckpointReader& reader) {
  SavedGroups saved;
  const json& meta = reader.meta();
  if (!meta.contains("extra") || !meta["extra"].is_object() || !meta["extra"].contains("local")) return saved;
  const json& l = meta["extra"]["local"];
  const std::string where = reader.dir() + "/meta.json: extra.local";
  GPUMIX_CHECK_INPUT(l.is_object(), where, " must be an object, got ", l.dump());
  auto integer = [&](const char* key, int least) {
    GPUMIX_CHECK_INPUT(l.contains(key) && l[key].is_number_integer() && l[key].get<int64_t>() >= least &&
                           l[key].get<int64_t>() <= (1 << 30),
                       where, ".", key, " must be an integer of at least ", least, ", got ",
                       l.contains(key) ? l[key].dump() : "nothing");
    return (int)l[key].get<int64_t>();
  };
  auto number = [&](const char* key) {
    GPUMIX_CHECK_INPUT(l.contains(key) && l[key].is_number() && std::isfinite(l[key].get<double>()), where, ".",
                       key, " must be a finite number, got ", l.contains(key) ? l[key].dump() : "nothing");
    return l[key].get<double>();
  };
  saved.local = true;
  saved.groups = integer("groups", 1);
  saved.sync.local = true;
  saved.sync.every = integer("every", 1);
  saved.sync.outer_lr = (float)number("outer_lr");
  saved.sync.outer_momentum = (float)number("outer_momentum");
  GPUMIX_CHECK_INPUT(l.contains("nesterov") && l["nesterov"].is_boolean(), where, ".nesterov must be true or false");
  saved.sync.nesterov = l["nesterov"].get<bool>();
  saved.outer_steps = integer("outer_steps", 0);
  if (l.contains("period_start")) saved.period_start = integer("period_start", 0);
  const json& w = l.contains("weights") ? l["weights"] : json();
  GPUMIX_CHECK_INPUT(w.is_array() && (int)w.size() == saved.groups, where, ".weights must hold one number per group (",
                     saved.groups, "), got ", w.dump());
  saved.weights.clear();
  for (const json& x : w) {
    GPUMIX_CHECK_INPUT(x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() > 0, where,
                       ".weights must be positive numbers, got ", w.dump());
    saved.weights.push_back(x.get<double>());
  }
  std::vector<std::string> needed = {"outer_momentum"};
  for (int g = 1; g < saved.groups; ++g)
    for (const char* name : {"adam_m", "adam_v"}) needed.push_back(group_array(name, g));
  if (saved.mid_period()) {
    needed.push_back("outer");
    for (int g = 1; g < saved.groups; ++g) needed.push_back(group_array("master", g));
  }
  for (const std::string& name : needed)
    GPUMIX_CHECK_INPUT(reader.has_array(name), "checkpoint ", reader.dir(), " was written in local mode with ",
                       saved.groups, " groups (meta.json extra.local) but lists no array '", name, "' (", name,
                       ".bin): it is incomplete; resume from another checkpoint of the run");
  return saved;
}

void fill_through_host(Tensor dst, const std::function<void(float*, int64_t)>& read) {
  Tensor host = dst.device().is_cpu() ? dst : Tensor::empty(dst.shape(), DType::f32, Device::cpu());
  read(host.data<float>(), dst.numel());
  if (!dst.device().is_cpu()) dst.copy_from(host);
}

namespace {

nlohmann::json files_identity(const std::vector<std::string>& paths) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> head(1024);
    in.read(head.data(), (std::streamsize)head.size());
    GPUMIX_CHECK_INPUT(in.good() || in.eof(), "cannot read '", path, "' to record it in checkpoints");
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)checkpoint_xxh64(head.data(), (size_t)in.gcount()));
    out.push_back({{"name", std::filesystem::path(path).filename().string()},
                   {"bytes", (int64_t)std::filesystem::file_size(path)},
                   {"head_xxh64", hex}});
  }
  return out;
}

std::string describe_file(const nlohmann::json& f) {
  return "'" + f.value("name", std::string("?")) + "' (" + std::to_string(f.value("bytes", (int64_t)-1)) +
         " bytes, first KiB's xxh64 " + f.value("head_xxh64", std::string("?")) + ")";
}

// A checkpoint resumes the data stream only if it was read in this loader's window order
// (data_position.order; absent before the order was named, when windows were drawn with
// replacement).
void check_window_order(const nlohmann::json& position, const std::string& checkpoint) {
  const std::string order = position.is_object() ? position.value("order", std::string()) : std::string();
  GPUMIX_CHECK_INPUT(order == data::kWindowOrder, "checkpoint ", checkpoint, " drew its training windows ",
                     order.empty() ? std::string("with replacement (an older GPUMix)") : "in order '" + order + "'",
                     ", and this GPUMix reads them in order '", data::kWindowOrder, "' (each window once an epoch), "
                     "so resuming would not continue its data stream; start a new run from its weights instead "
                     "(--init-from ", checkpoint, ")");
}

}  // namespace

nlohmann::json data_identity(const std::vector<std::string>& train, const std::vector<std::string>& val) {
  if (train.empty() && val.empty()) return nullptr;
  return {{"train", files_identity(train)}, {"val", files_identity(val)}};
}

void check_data_identity(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint) {
  if (saved.is_null()) return;
  GPUMIX_CHECK_INPUT(saved.is_object(), checkpoint, "/meta.json: data_position.files must be an object, got ", saved.dump());
  const std::string fix = "; resume on the data the checkpoint was trained on, or start a new run (--init-from "
                          "the checkpoint's model) on the new data";
  GPUMIX_CHECK_INPUT(!now.is_null(), "checkpoint ", checkpoint, " was trained on token data (",
                     saved.value("train", nlohmann::json::array()).size(), " files), not on this run's text", fix);
  for (const char* split : {"train", "val"}) {
    const nlohmann::json was = saved.value(split, nlohmann::json::array()), is = now.value(split, nlohmann::json::array());
    const std::string flag = std::string(split) == "train" ? "--data" : "--val-data";
    const auto find = [](const nlohmann::json& files, const std::string& name) {
      return std::find_if(files.begin(), files.end(), [&](const nlohmann::json& f) { return f.value("name", "") == name; });
    };
    const std::string counts = std::to_string(was.size()) + " files for " + flag + ", this run " + std::to_string(is.size());
    for (const nlohmann::json& f : was)
      GPUMIX_CHECK_INPUT(find(is, f.value("name", "")) != is.end(), "checkpoint ", checkpoint, " read ", counts, ": ",
                         describe_file(f), " is missing", fix);
    for (const nlohmann::json& f : is)
      GPUMIX_CHECK_INPUT(find(was, f.value("name", "")) != was.end(), "checkpoint ", checkpoint, " read ", counts, ": ",
                         describe_file(f), " is new", fix);
    for (size_t i = 0; i < is.size(); ++i)  // the same names; files are read in name order
      GPUMIX_CHECK_INPUT(was[i] == is[i], flag, " file ", i + 1, " differs from the one checkpoint ", checkpoint,
                         " was trained on: ", describe_file(is[i]), " now, ", describe_file(was[i]), " then", fix);
  }
}

std::string save_checkpoint(const TrainOptions& o, const GPTConfig& config, DType dtype,
                            const Work& work, Engine& engine, Comm& comm, int step,
                            uint64_t tokenizer_hash, const nlohmann::json& data, const OuterStep* outer) {
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
  // Local mode: every group's moments, group 0's master and outer momentum; mid-period
  // every group's master and the outer copy too (checkpoint.h).
  const int group = outer ? outer->group() : 0;
  const bool mid_period = outer && outer->period_start() != step;
  std::vector<CheckpointArraySpec> arrays = {{"master", P}, {"adam_m", P}, {"adam_v", P}};
  if (outer) {
    for (int g = 1; g < outer->groups(); ++g)
      for (const char* name : {"adam_m", "adam_v"}) arrays.push_back({group_array(name, g), P});
    arrays.push_back({"outer_momentum", P});
  }
  if (mid_period) {
    for (int g = 1; g < outer->groups(); ++g) arrays.push_back({group_array("master", g), P});
    arrays.push_back({"outer", P});
  }
  if (comm.rank() == 0) attempt([&] { tmp = writer.begin(o.out, step, arrays, nonce); });
  comm.agree("checkpoint: preparing step " + std::to_string(step), {}, error);
  attempt([&] {
    if (!engine.primary_replica()) return;  // the first group writes; replicas hold the same
    const std::vector<OwnedSlice> slices = engine.slices();
    for (size_t i = 0; i < slices.size(); ++i) {
      const OwnedSlice& s = slices[i];
      if (group == 0 || mid_period) write_runs(layout, tmp, group_array("master", group), s.flat_offset, s.master);
      write_runs(layout, tmp, group_array("adam_m", group), s.flat_offset, s.opt->m());
      write_runs(layout, tmp, group_array("adam_v", group), s.flat_offset, s.opt->v());
      if (outer && group == 0) write_runs(layout, tmp, "outer_momentum", s.flat_offset, outer->momentum()[i]);
      if (mid_period && group == 0) write_runs(layout, tmp, "outer", s.flat_offset, outer->outer_copy()[i]);
    }
  });
  fault_point(comm.rank(), "checkpoint");
  comm.agree("checkpoint: writing slices of step " + std::to_string(step), {}, error);
  std::string dir;
  if (comm.rank() == 0) {
    CheckpointMeta meta;
    meta.model = config_to_json(config);
    meta.data_position = {{"next_batch", step}, {"seed", o.seed}, {"order", data::kWindowOrder}};
    if (!data.is_null()) meta.data_position["files"] = data;
    meta.rng = {{"seed", o.seed}};
    meta.tokenizer_hash = tokenizer_hash;
    json ranks = json::array();
    for (const RankWork& w : work.ranks) ranks.push_back({{"batch", w.batch}, {"micro_batch", w.micro_batch}, {"share", w.share}});
    meta.plan = {{"ranks", ranks}, {"global_batch", o.batch}, {"group_size", work.sharding.group_size}};
    meta.extra = {{"lr", o.lr}, {"steps", o.steps}, {"seq", o.seq > 0 ? o.seq : (int64_t)config.T}, {"dtype", dtype_name(dtype)}};
    if (outer) {
      const LocalSync& sync = outer->sync();
      meta.extra["local"] = {{"every", sync.every}, {"outer_lr", sync.outer_lr},
                             {"outer_momentum", sync.outer_momentum}, {"nesterov", sync.nesterov},
                             {"groups", outer->groups()}, {"weights", outer->weights()},
                             {"outer_steps", outer->steps()}};
      if (mid_period) meta.extra["local"]["period_start"] = outer->period_start();
    }
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
                    uint64_t tokenizer_hash, const nlohmann::json* data, OuterStep* outer) {
  std::string error;
  int64_t step = -1;
  try {
    const CheckpointReader reader = open_checkpoint(where);
    reader.check_model(config_to_json(config));
    const nlohmann::json& position = reader.data_position();
    if (data) {
      check_window_order(position, reader.dir());
      check_data_identity(position.is_object() && position.contains("files") ? position["files"] : nlohmann::json(),
                          *data, reader.dir());
    }
    GPUMIX_CHECK_INPUT(!tokenizer_hash || !reader.tokenizer_hash() || reader.tokenizer_hash() == tokenizer_hash,
                       "checkpoint ", reader.dir(), " was trained with another tokenizer; resume with the "
                       "run's own (--tokenizer <run>/tokenizer.bpe)");
    const std::vector<ParamInfo> layout = gpt_param_layout(config);
    const SavedGroups saved = saved_groups(reader);
    const int group = outer ? outer->group() : 0, groups = outer ? outer->groups() : 1;
    GPUMIX_CHECK_INPUT(!saved.mid_period() || (outer && saved.groups == groups), "checkpoint ", reader.dir(),
                       " was taken mid-period (step ", reader.step(), ", the last outer step at ", saved.period_start,
                       ") by ", saved.groups, " groups, whose weights differ there; resume it on ", saved.groups,
                       " groups (as many nodes, or --groups ", saved.groups, "), not ", groups, ", or from a checkpoint "
                       "taken at an outer step");
    const std::vector<OwnedSlice> slices = engine.slices();
    for (size_t i = 0; i < slices.size(); ++i) {
      const OwnedSlice& s = slices[i];
      read_into(layout, reader, saved.mid_period() ? group_array("master", group) : std::string("master"),
                s.flat_offset, s.master);
      if (saved.mid_period()) read_into(layout, reader, "outer", s.flat_offset, outer->outer_copy()[i]);
      const std::pair<const char*, Tensor*> moments[] = {{"adam_m", &s.opt->m()}, {"adam_v", &s.opt->v()}};
      for (const auto& [name, moment] : moments) {
        if (saved.groups == groups) read_into(layout, reader, group_array(name, group), s.flat_offset, *moment);
        else read_mean_into(layout, reader, name, saved.weights, s.flat_offset, *moment);
      }
      if (outer && saved.local) read_into(layout, reader, "outer_momentum", s.flat_offset, outer->momentum()[i]);
      if (outer && !saved.local) outer->momentum()[i].zero_();
    }
    engine.sync_compute_params();
    step = reader.step();
    if (outer && saved.mid_period()) {
      outer->resume_mid_period(engine, saved.outer_steps);
      outer->set_period_start(saved.period_start);
    } else if (outer) {
      outer->restart(engine, saved.local ? saved.outer_steps : 0);
      outer->set_period_start((int)step);
    }
    if (comm.rank() == 0) {
      const std::string rule = resume_rule(saved, outer);
      log_info("resumed from ", reader.dir(), " (step ", step, ")", rule.empty() ? "" : ": ", rule);
    }
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
