#include "dist/engine/trace.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/comm/comm.h"
#include "nn/data/file_util.h"

namespace gpumix::dist {

using json = nlohmann::json;

Tracer::Tracer(std::string path, int first, int last, int rank, std::string rank_label, int L)
    : path_(std::move(path)), first_(first), last_(last), rank_(rank), L_(L), rank_label_(std::move(rank_label)) {}

bool Tracer::begin_step(int step) {
  step_ = step;
  on_ = enabled() && step >= first_ && step <= last_;
  if (on_ && origin_ < 0) origin_ = detail::now_seconds();  // before the step's own clock reading
  return on_;
}

int Tracer::track(const std::string& name) {
  const auto it = std::find(tracks_.begin(), tracks_.end(), name);
  if (it != tracks_.end()) return (int)(it - tracks_.begin());
  tracks_.push_back(name);
  return (int)tracks_.size() - 1;
}

void Tracer::add(const char* name, const char* cat, double t0, double t1, int track, int unit, int micro_batch) {
  if (!on_) return;
  spans_.push_back({name, cat, t0, t1, track, unit, micro_batch, step_});
}

// Microseconds with nanosecond resolution: enough for spans of a few microseconds.
static double us(double seconds) { return std::round(seconds * 1e9) / 1e3; }

std::string Tracer::events_json(double origin) const {
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", rank_label_}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0},
                    {"args", {{"sort_index", rank_}}}});
  for (size_t t = 0; t < tracks_.size(); ++t)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", t}, {"args", {{"name", tracks_[t]}}}});
  for (const Span& s : spans_) {
    json args = {{"step", s.step}};
    const std::string unit =
        s.unit < 0 ? "" : s.unit == 0 ? "embedding" : s.unit <= L_ ? "block " + std::to_string(s.unit - 1) : "head";
    if (s.unit >= 0) args["unit"] = unit;
    if (s.micro_batch >= 0) args["micro_batch"] = s.micro_batch;
    const double ts = us(s.t0 - origin), end = us(s.t1 - origin);
    events.push_back({{"name", s.name ? s.name : unit}, {"cat", s.cat}, {"ph", "X"}, {"ts", ts},
                      {"dur", std::max(0.0, end - ts)}, {"pid", rank_}, {"tid", s.track}, {"args", std::move(args)}});
  }
  return events.dump();
}

void Tracer::write(Comm& comm, Device device, const std::string& other_data_json) {
  // The earliest rank's start of the first traced step is time 0 on every track.
  const double origin = -comm.all_reduce_max(origin_ >= 0 ? -origin_ : -1e300);
  const std::string mine = events_json(origin);
  // Every rank's events, as bytes packed into i32 tensors (what every backend moves).
  const int ranks = comm.size();
  GPUMIX_CHECK_INPUT(mine.size() < (size_t(1) << 31), "--trace: rank ", rank_, "'s ", spans_.size(),
                     " spans take ", mine.size(), " bytes, more than 2 GiB; trace fewer --trace-steps");
  Tensor length = Tensor::from_vector(std::vector<int32_t>{(int32_t)mine.size()}, {1}, device);
  Tensor lengths = Tensor::empty({ranks}, DType::i32, device);
  comm.all_gather_v(length, lengths, std::vector<int64_t>(ranks, 1));
  std::vector<int64_t> words(ranks), bytes_per_rank(ranks);
  int64_t total = 0;
  const Tensor lengths_host = lengths.to(Device::cpu());
  for (int r = 0; r < ranks; ++r) {
    bytes_per_rank[r] = lengths_host.data<int32_t>()[r];
    total += words[r] = (bytes_per_rank[r] + 3) / 4;
  }
  Tensor packed = Tensor::zeros({words[rank_]}, DType::i32);
  std::memcpy(packed.data<int32_t>(), mine.data(), mine.size());
  Tensor all = Tensor::empty({total}, DType::i32, device);
  comm.all_gather_v(packed.to(device), all, words);
  if (rank_ != 0) return;
  const Tensor all_host = all.to(Device::cpu());
  std::string text = "{\"traceEvents\":[";
  const char* base = reinterpret_cast<const char*>(all_host.data<int32_t>());
  int64_t at = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::string events(base + 4 * at, (size_t)bytes_per_rank[r]);  // "[...]"
    if (events.size() > 2) text += (r ? "," : "") + events.substr(1, events.size() - 2);
    at += words[r];
  }
  text += "],\"displayTimeUnit\":\"ms\",\"otherData\":" + other_data_json + "}\n";
  data::write_file_atomic(path_, text);
}

TraceSpan::TraceSpan(Tracer* tracer, const char* name, const char* cat, int unit, int micro_batch, int track)
    : tracer_(tracer && tracer->on() ? tracer : nullptr), name_(name), cat_(cat), unit_(unit),
      micro_batch_(micro_batch), track_(track) {
  if (tracer_) t0_ = detail::now_seconds();
}

TraceSpan::~TraceSpan() {
  if (tracer_) tracer_->add(name_, cat_, t0_, detail::now_seconds(), track_, unit_, micro_batch_);
}

}  // namespace gpumix::dist
