// The whole model against PyTorch: logits, loss, every parameter gradient and the losses
// of a few AdamW steps, from tests/nn/golden_gpt.json (made by tests/nn/make_golden.py),
// in fp32 and in bf16 against PyTorch's bf16 autocast.
//
// Tolerance (tests/core/test_util.h model_close): every element within rtol (|ref| +
// rms(ref)), rms over the compared tensor (the logits; each parameter's gradient), and the
// whole within a normalised mean squared error, both from R bf16 roundings and a k-term
// fp32 reduction: rtol = R 2^-8 + (k + 2) FLT_EPSILON, NMSE <= R 2^-16 + ((k + 2) eps)^2.
// - k: the longest reduction (4C for the logits; for the gradients also the B*T rows a
//   weight gradient sums over): the worst case of one reduction, which covers the typical
//   (sqrt k per op) growth of fp32 rounding errors over the model's depth.
// - fp32: R = 0.
// - bf16: the two sides round in different places (PyTorch keeps the residual stream and
//   LayerNorm in fp32), each at most R_side times (test_gpt_bf16.cpp: 11 L + 3 forward,
//   2 (11 L + 3) + 2 L for the gradients): R = 2 R_side, one more for the golden gradients,
//   stored as bf16.
// The loss, a mean of lse - logit, may be off by twice the logits' rms error:
// 2 sqrt(NMSE bound) rms(logits), plus (k + 2) eps |loss|; each AdamW step, which
// normalises its update, adds as much again.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../core/test_util.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "nn/optim.h"

namespace gpumix {
namespace {

using test::bf16_nmse;
using test::model_close;

nlohmann::json load_golden() {
  std::ifstream in(GPUMIX_GOLDEN_FILE);
  EXPECT_TRUE(in.good()) << "cannot open " << GPUMIX_GOLDEN_FILE;
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> base64_decode(const std::string& text) {
  std::vector<uint8_t> out;
  uint32_t bits = 0;
  int have = 0;
  for (char ch : text) {
    int v;
    if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
    else if (ch == '+') v = 62;
    else if (ch == '/') v = 63;
    else continue;  // '=' padding
    bits = (bits << 6) | (uint32_t)v;
    if ((have += 6) >= 8) out.push_back((uint8_t)(bits >> (have -= 8)));
  }
  return out;
}

// An array of the golden file: {"dtype": "f32" | "bf16", "count", "base64"} (little-endian).
std::vector<float> golden_array(const nlohmann::json& a) {
  const std::vector<uint8_t> raw = base64_decode(a["base64"].get<std::string>());
  const size_t n = a["count"].get<size_t>(), width = a["dtype"] == "f32" ? 4 : 2;
  EXPECT_EQ(raw.size(), n * width) << "golden array of " << n << " " << a["dtype"];
  if (raw.size() != n * width) return {};
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* b = raw.data() + i * width;
    if (width == 2) {
      out[i] = bf16_bits_to_f32((uint16_t)(b[0] | b[1] << 8));
    } else {
      const uint32_t u = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
      std::memcpy(&out[i], &u, 4);
    }
  }
  return out;
}

// The golden file's arrays are in the saved layout (PyTorch's: wte of V rows, no padding):
// the saved index of flat element `flat`, or -1 in the padding.
int64_t saved_index(const GPT& model, int64_t flat) {
  for (const SavedRun& r : gpt_saved_runs(model.layout(), 0, model.num_params()))
    if (flat >= r.flat && flat < r.flat + r.count) return r.saved + (flat - r.flat);
  return -1;  // padding
}

// A saved-layout array in the flat layout (padding zero), and back.
std::vector<float> to_flat(const GPT& model, const std::vector<float>& saved) {
  std::vector<float> flat((size_t)model.num_params(), 0.0f);
  for (const SavedRun& r : gpt_saved_runs(model.layout(), 0, model.num_params()))
    std::copy(saved.begin() + r.saved, saved.begin() + r.saved + r.count, flat.begin() + r.flat);
  return flat;
}
std::vector<float> to_saved(const GPT& model, const std::vector<float>& flat) {
  std::vector<float> saved((size_t)model.config().saved_params());
  for (const SavedRun& r : gpt_saved_runs(model.layout(), 0, model.num_params()))
    std::copy(flat.begin() + r.flat, flat.begin() + r.flat + r.count, saved.begin() + r.saved);
  return saved;
}

// make_golden.py golden_param: saved element i = center + a 24-bit uniform in [-0.25, 0.25).
std::vector<float> golden_params(const GPT& model) {
  std::vector<float> p((size_t)model.config().saved_params());
  for (const ParamInfo& info : model.layout()) {
    const double center = info.init_std < 0 ? 1.0 : 0.0;  // LayerNorm weights
    const int64_t first = saved_index(model, info.offset);
    for (int64_t i = first; i < first + info.used; ++i)
      p[i] = (float)(center + ((double)(mix64((uint64_t)i) >> 40) - (double)(1 << 23)) / (double)(1 << 25));
  }
  return p;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += (double)x * x;
  return std::sqrt(s / (double)v.size());
}

struct Golden {
  nlohmann::json g;
  GPTConfig config;
  int64_t B = 0;
  Tensor tokens, targets;
  int counted = 0;
};

Golden load() {
  Golden d;
  d.g = load_golden();
  const nlohmann::json& c = d.g["config"];
  d.config.name = "golden";
  d.config.L = c["L"];
  d.config.NH = c["NH"];
  d.config.C = c["C"];
  d.config.V = c["V"];
  d.config.T = c["T"];
  d.B = c["B"];
  d.tokens = Tensor::from_vector(d.g["tokens"].get<std::vector<int32_t>>(), {d.B, d.config.T});
  const std::vector<int32_t> t = d.g["targets"].get<std::vector<int32_t>>();
  d.targets = Tensor::from_vector(t, {d.B, d.config.T});
  for (int32_t x : t) d.counted += x >= 0;
  return d;
}

void run_golden(DType dtype) {
  const Golden d = load();
  const GPTConfig& c = d.config;
  const nlohmann::json& want = d.g[dtype == DType::f32 ? "fp32" : "bf16_autocast"];
  GPT model(c, Device::cpu(), 0, dtype);
  const std::vector<float> params = golden_params(model);
  // Both sides computed the same parameters: the file's sum and samples of them.
  double sum = 0;
  for (float x : params) sum += x;
  EXPECT_NEAR(sum, d.g["params_check"]["sum"].get<double>(), 1e-9 * params.size());
  const std::vector<int64_t> at = d.g["params_check"]["at"].get<std::vector<int64_t>>();
  const std::vector<float> values = d.g["params_check"]["values"].get<std::vector<float>>();
  for (size_t i = 0; i < at.size(); ++i) ASSERT_EQ(params[at[i]], values[i]) << "parameter " << at[i];
  const Tensor initial = Tensor::from_vector(to_flat(model, params), {model.num_params()});
  model.params().copy_from(initial);
  model.sync_compute_params();

  const int R_forward = 11 * c.L + 3, R_backward = 2 * R_forward + 2 * c.L;
  const int64_t k_logits = 4 * c.C, k_grads = std::max<int64_t>(4 * c.C, d.B * c.T);
  const bool bf = dtype == DType::bf16;
  const int R_logits = bf ? 2 * R_forward : 0, R_grads = bf ? 2 * R_backward + 1 : 0;

  const std::vector<float> logits = golden_array(want["logits"]);
  EXPECT_TRUE(model_close("logits", model.logits(d.tokens).to_vector(), logits, R_logits, k_logits));
  const double loss_allowance = 2 * std::sqrt(bf16_nmse(R_logits, k_logits)) * rms(logits) +
                                (double)(k_logits + 2) * FLT_EPSILON * std::fabs(want["loss"].get<double>());

  model.zero_grad();
  Var loss = model.loss(d.tokens, d.targets, 1.0f / d.counted);
  EXPECT_NEAR(loss.value().item(), want["loss"].get<double>(), loss_allowance);
  backward(loss);
  const std::vector<float> grads = to_saved(model, model.grads().to_vector()), ref = golden_array(want["grads"]);
  ASSERT_EQ(grads.size(), ref.size());
  for (const ParamInfo& p : model.layout()) {
    const auto from = (std::ptrdiff_t)saved_index(model, p.offset), to = from + (std::ptrdiff_t)p.used;
    EXPECT_TRUE(model_close(p.name.c_str(), std::vector<float>(grads.begin() + from, grads.begin() + to),
                            std::vector<float>(ref.begin() + from, ref.begin() + to), R_grads, k_grads));
  }

  AdamWConfig cfg;
  cfg.beta1 = d.g["adamw"]["beta1"];
  cfg.beta2 = d.g["adamw"]["beta2"];
  cfg.eps = d.g["adamw"]["eps"];
  cfg.weight_decay = d.g["adamw"]["weight_decay"];
  const float lr = d.g["adamw"]["lr"];
  model.params().copy_from(initial);
  model.sync_compute_params();
  AdamW opt(model.layout(), 0, model.num_params(), Device::cpu(), cfg);
  const std::vector<double> steps = want["step_losses"].get<std::vector<double>>();
  for (size_t step = 1; step <= steps.size(); ++step) {
    model.zero_grad();
    Var l = model.loss(d.tokens, d.targets, 1.0f / d.counted);
    EXPECT_NEAR(l.value().item(), steps[step - 1], loss_allowance * (double)step) << "AdamW step " << step;
    backward(l);
    opt.step(model.params(), model.grads(), lr, (int)step, model.compute_params());
  }
}

TEST(Golden, MatchesPyTorchFp32) { run_golden(DType::f32); }

TEST(Golden, Bf16MatchesPyTorchAutocast) { run_golden(DType::bf16); }

}  // namespace
}  // namespace gpumix
