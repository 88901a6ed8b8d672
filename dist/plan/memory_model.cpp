#include "dist/plan/memory_model.h"

#include <algorithm>

namespace gpumix::dist {

MemoryModel::MemoryModel(const GPTConfig& model, int seq_len, DType compute, MemoryParams params)
    : model_(model), seq_len_(seq_len), compute_(compute), params_(params) {
  params_total_ = (double)model.total_params();
  embed_ = (double)model.embed_params();
  block_ = (double)model.block_params();
  head_ = (double)model.head_params();
  tied_ = model.head_reads_embedding();
  state_per_share_ = params_total_ * params_.state_bytes_per_param();
}

MemoryTerms MemoryModel::terms_from(double act_block_bytes, double head_bytes, double work_fixed,
                                    int64_t b, int64_t m, double r, bool offload) const {
  MemoryTerms t;
  const double dtype_bytes = (double)dtype_size(compute_);
  const double sample_bytes = (double)seq_len_ * model_.C * dtype_bytes;  // one block input
  t.state = r * state_per_share_;
  // A tied head holds the embedding (and its gradient) through the whole step; an untied
  // one gathers the embedding only for the lookup and its gradient only for the
  // embedding's backward, and its own unit (its matrix) with its gradient during the head:
  // the larger of the two, phases that never overlap.
  const double unit0 = tied_ ? embed_ : std::max(embed_, head_);
  t.gathered = unit0 * (dtype_bytes + params_.grad_accum_bytes) +
               block_ * (2.0 * dtype_bytes + params_.grad_accum_bytes);
  t.block_buffers = block_ * (dtype_bytes + params_.grad_accum_bytes);
  if (b > 0) {
    const int64_t mb = std::min(m, b);
    t.act_block = act_block_bytes;
    t.act_saved = offload ? (double)std::min<int64_t>(b, params_.offload_staging * mb) * sample_bytes
                          : (double)model_.L * b * sample_bytes;
    t.act_carry = (double)b * sample_bytes;
    t.work_head = head_bytes;
  }
  t.work_fixed = work_fixed;
  t.work_margin = params_.fragmentation * (t.state + t.gathered + t.activations() + t.work_fixed);
  return t;
}

MemoryTerms MemoryModel::terms(const DeviceProfile& d, int64_t b, int64_t m, double r,
                               bool offload) const {
  if (b == 0 && r <= 0) return MemoryTerms{};  // left out
  double act = 0, head = 0;
  if (b > 0) {
    const int64_t mb = std::min(m, b);
    act = interpolate(d.samples, mb, &MicroBatchSample::block_act_bytes);
    head = interpolate(d.samples, mb, &MicroBatchSample::head_bytes);
  }
  return terms_from(act, head, d.work_bytes, b, m, r, offload);
}

double MemoryModel::max_share(const MemoryTerms& w, double capacity) const {
  const double others = w.gathered + w.activations() + w.work_fixed;
  return (capacity / (1.0 + params_.fragmentation) - others) / state_per_share_;
}

double MemoryModel::analytic_block_act_bytes(const GPTConfig& model, int seq_len, int64_t m,
                                             int dtype_bytes) {
  return model.block_activation_bytes(seq_len, m, dtype_bytes);
}

double MemoryModel::analytic_head_bytes(const GPTConfig& model, int seq_len, int64_t m, int dtype_bytes) {
  return (double)m * seq_len * ((double)model.Vp() * dtype_bytes + 4.0 * 2);
}

}  // namespace gpumix::dist
