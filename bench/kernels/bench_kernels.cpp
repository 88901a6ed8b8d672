// CPU kernel benchmarks: every fast kernel next to its reference twin (BM_<op>/fast and
// BM_<op>/ref), reporting GFLOP/s for compute kernels and GB/s for memory-bound ones
// (bytes = what the kernel must read + write once), in fp32 (BM_<op>) and bf16
// (BM_<op>_bf16). Plus the GEMMs at the shapes of a training step (BM_gemm_f32/...,
// BM_gemm_bf16/...). Wall-clock time: the fast kernels run on every core.
//
// Shapes: B 4, T 256 / 1024, C 256 / 768, V 50257 (GPT-2 small-ish). Reference GEMMs
// run at smaller sizes (a naive 1024^3 triple loop takes seconds); rates stay comparable.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ref.h"

namespace cpu = gpumix::kernels::cpu;
namespace ref = gpumix::kernels::cpu::ref;
using gpumix::bf16;

namespace {

// Calls the fast kernel or its reference twin: both have the same signatures.
#define CALL(name, ...) (Fast ? cpu::name(__VA_ARGS__) : ref::name(__VA_ARGS__))

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

void set_flops(benchmark::State& st, double flops_per_iter) {
  st.counters["GFLOP/s"] = benchmark::Counter(flops_per_iter * 1e-9 * st.iterations(),
                                              benchmark::Counter::kIsRate);
}

void set_bytes(benchmark::State& st, double bytes_per_iter) {
  st.counters["GB/s"] = benchmark::Counter(bytes_per_iter * 1e-9 * st.iterations(),
                                           benchmark::Counter::kIsRate);
}

// ---- matmul -------------------------------------------------------------------------

template <bool Fast>
void bm_gemm(benchmark::State& st) {
  const int n = Fast ? 1024 : 256;
  const auto a = randn((size_t)n * n, 1), b = randn((size_t)n * n, 2);
  std::vector<float> c((size_t)n * n);
  for (auto _ : st) {
    CALL(gemm, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, 1, 0, 0, 0);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(st, 2.0 * n * n * n);
  st.SetLabel(std::to_string(n) + "^3");
}

// GEMMs at the shapes of a GPT training step (bench/results/cpu-gemm.md): m x n x k with
// the layout of the op, N = B*T rows: fp32, and bf16 operands with an fp32 or a bf16
// result, through oneDNN. beta 1 where the op accumulates.
struct GemmShape {
  const char* name;
  int m, n, k;
  bool ta, tb;
  float beta;
};
const GemmShape k_train_gemms[] = {
    {"1024^3", 1024, 1024, 1024, false, false, 0.0f},
    {"2048^3", 2048, 2048, 2048, false, false, 0.0f},
    {"qkv_fwd_C256:2048x768x256,B^T", 2048, 768, 256, false, true, 0.0f},
    {"proj_fwd_C256:2048x256x1024,B^T", 2048, 256, 1024, false, true, 0.0f},
    {"lmhead_fwd_C256:2048x8192x256,B^T", 2048, 8192, 256, false, true, 0.0f},
    {"lmhead_dinp_C256:2048x256x8192,+=", 2048, 256, 8192, false, false, 1.0f},
    {"lmhead_dweight_C256:8192x256x2048,A^T,+=", 8192, 256, 2048, true, false, 1.0f},
    {"mlp_fwd_C384:2048x1536x384,B^T", 2048, 1536, 384, false, true, 0.0f},
    {"mlp_dinp_C384:2048x384x1536,+=", 2048, 384, 1536, false, false, 1.0f},
    {"mlp_dweight_C384:1536x384x2048,A^T,+=", 1536, 384, 2048, true, false, 1.0f},
    {"mlp_down_fwd_C384:2048x384x1536,B^T", 2048, 384, 1536, false, true, 0.0f},
    {"lmhead_dinp_C384:2048x384x8192,+=", 2048, 384, 8192, false, false, 1.0f},
    {"lmhead_dweight_C384:8192x384x2048,A^T,+=", 8192, 384, 2048, true, false, 1.0f},
    {"mlp_fwd_gpt2:1024x3072x768,B^T", 1024, 3072, 768, false, true, 0.0f},
    {"lmhead_fwd_gpt2:1024x50257x768,B^T", 1024, 50257, 768, false, true, 0.0f},
};

std::vector<bf16> randn_bf16(size_t n, uint32_t seed) {
  const auto x = randn(n, seed);
  std::vector<bf16> h(n);
  cpu::f32_to_bf16(h.data(), x.data(), (int64_t)n);
  return h;
}

// Normal values of the storage type: float or bf16.
template <class T>
std::vector<T> data(size_t n, uint32_t seed) {
  if constexpr (sizeof(T) == 2)
    return randn_bf16(n, seed);
  else
    return randn(n, seed);
}

// In: float or bf16; Out likewise.
template <class In, class Out>
void bm_gemm_shape(benchmark::State& st, const GemmShape& g) {
  const int lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
  const auto a = data<In>((size_t)g.m * g.k, 1), b = data<In>((size_t)g.k * g.n, 2);
  std::vector<Out> c((size_t)g.m * g.n);
  for (auto _ : st) {
    cpu::gemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), lda, b.data(), ldb, g.beta, c.data(), g.n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(st, 2.0 * g.m * g.n * g.k);
}

void register_train_gemms() {
  for (const GemmShape& g : k_train_gemms) {
    const std::string shape = g.name;
    benchmark::RegisterBenchmark(("BM_gemm_f32/" + shape).c_str(), bm_gemm_shape<float, float>, g)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_gemm_bf16/to_f32/" + shape).c_str(), bm_gemm_shape<bf16, float>, g)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_gemm_bf16/to_bf16/" + shape).c_str(), bm_gemm_shape<bf16, bf16>, g)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

// Many small matrices (attention-sized) in one batched gemm.
template <bool Fast>
void bm_gemm_batched(benchmark::State& st) {
  const int n = 64, batch = 64;
  const int64_t s = (int64_t)n * n;
  const auto a = randn(s * batch, 1), b = randn(s * batch, 2);
  std::vector<float> c(s * batch);
  for (auto _ : st) {
    CALL(gemm, false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, batch, s, s, s);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(st, 2.0 * n * n * n * batch);
  st.SetLabel("64 x 64^3");
}

// The kernels below run in fp32 (T = float) and in bf16 (T = bf16, BM_<op>_bf16):
// activations of type T, parameter gradients, statistics and losses in fp32. Bytes count
// each element at its stored size.

template <bool Fast, class T>
void bm_matmul_fwd(benchmark::State& st) {
  const int N = Fast ? 1024 : 256, C = 768, OC = 768;
  const auto inp = data<T>((size_t)N * C, 1), w = data<T>((size_t)OC * C, 2), b = data<T>(OC, 3);
  std::vector<T> out((size_t)N * OC);
  for (auto _ : st) {
    CALL(matmul_forward, out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(st, 2.0 * N * C * OC);
  st.SetLabel("N=" + std::to_string(N) + " C=768 OC=768");
}

template <bool Fast, class T>
void bm_matmul_bwd(benchmark::State& st) {
  const int N = Fast ? 1024 : 256, C = 768, OC = 768;
  const auto inp = data<T>((size_t)N * C, 1), w = data<T>((size_t)OC * C, 2), dout = data<T>((size_t)N * OC, 3);
  std::vector<T> dinp((size_t)N * C);
  std::vector<float> dw((size_t)OC * C), db(OC);
  for (auto _ : st) {
    CALL(matmul_backward, dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_flops(st, 4.0 * N * C * OC);
  st.SetLabel("N=" + std::to_string(N) + " C=768 OC=768");
}

template <bool Fast, class T>
void bm_bias_add(benchmark::State& st) {
  const int N = 4096, C = 768;
  const auto inp = data<T>((size_t)N * C, 1), b = data<T>(C, 2);
  std::vector<T> out((size_t)N * C);
  for (auto _ : st) {
    CALL(bias_add, out.data(), inp.data(), b.data(), N, C);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * sizeof(T) * N * C);
}

template <bool Fast, class T>
void bm_bias_bwd(benchmark::State& st) {
  const int N = 4096, C = 768;
  const auto dout = data<T>((size_t)N * C, 1);
  std::vector<float> db(C);
  for (auto _ : st) {
    CALL(bias_backward, db.data(), dout.data(), N, C);
    benchmark::DoNotOptimize(db.data());
  }
  set_bytes(st, 1.0 * sizeof(T) * N * C);
}

// ---- layernorm, gelu ----------------------------------------------------------------

template <bool Fast, class T>
void bm_layernorm_fwd(benchmark::State& st) {
  const int N = 4096, C = 768;
  const auto inp = data<T>((size_t)N * C, 1), w = data<T>(C, 2), b = data<T>(C, 3);
  std::vector<T> out((size_t)N * C);
  std::vector<float> mean(N), rstd(N);
  for (auto _ : st) {
    CALL(layernorm_forward, out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * sizeof(T) * N * C);
}

template <bool Fast, class T>
void bm_layernorm_bwd(benchmark::State& st) {
  const int N = 4096, C = 768;
  const auto inp = data<T>((size_t)N * C, 1), w = data<T>(C, 2), b = data<T>(C, 3), dout = data<T>((size_t)N * C, 4);
  std::vector<T> out((size_t)N * C), dinp((size_t)N * C);
  std::vector<float> mean(N), rstd(N), dw(C), db(C);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  for (auto _ : st) {
    CALL(layernorm_backward, dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
         mean.data(), rstd.data(), N, C);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_bytes(st, 4.0 * sizeof(T) * N * C);  // read inp, dout, dinp; write dinp
}

template <bool Fast, class T>
void bm_gelu_fwd(benchmark::State& st) {
  const int64_t n = 4096 * 768;
  const auto inp = data<T>(n, 1);
  std::vector<T> out(n);
  for (auto _ : st) {
    CALL(gelu_forward, out.data(), inp.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * sizeof(T) * n);
}

template <bool Fast, class T>
void bm_gelu_bwd(benchmark::State& st) {
  const int64_t n = 4096 * 768;
  const auto inp = data<T>(n, 1), dout = data<T>(n, 2);
  std::vector<T> dinp(n);
  for (auto _ : st) {
    CALL(gelu_backward, dinp.data(), inp.data(), dout.data(), n);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_bytes(st, 4.0 * sizeof(T) * n);
}

// ---- attention: B 4, T 256, C 256, NH 4, and the gpt2 shape B 4, T 256, C 768, NH 12 ------

struct AttnShape {
  int B, T, C, NH;
  const char* label;
};
constexpr AttnShape k_attn_shapes[] = {{4, 256, 256, 4, "B=4 T=256 C=256 NH=4"},
                                       {4, 256, 768, 12, "B=4 T=256 C=768 NH=12 (gpt2)"}};
// Causal flops of one forward: q k^T and p v over the T(T+1)/2 visible pairs, 2 per MAC.
constexpr double attn_fwd_flops(const AttnShape& s) { return 2.0 * 2.0 * s.B * s.C * (s.T * (s.T + 1) / 2.0); }

template <class T>
struct AttnData {
  explicit AttnData(const AttnShape& s)
      : qkv(data<T>((size_t)s.B * s.T * 3 * s.C, 1)), dout(data<T>((size_t)s.B * s.T * s.C, 2)),
        out((size_t)s.B * s.T * s.C), lse((size_t)s.B * s.NH * s.T), dqkv(qkv.size()) {}
  std::vector<T> qkv, dout, out;
  std::vector<float> lse;
  std::vector<T> dqkv;
};

template <bool Fast, class T, int S = 0>
void bm_attention_fwd(benchmark::State& st) {
  const AttnShape& s = k_attn_shapes[S];
  AttnData<T> d(s);
  for (auto _ : st) {
    CALL(attention_forward, d.out.data(), d.lse.data(), d.qkv.data(), s.B, s.T, s.C, s.NH);
    benchmark::DoNotOptimize(d.out.data());
  }
  set_flops(st, attn_fwd_flops(s));
  st.SetLabel(s.label);
}

template <bool Fast, class T, int S = 0>
void bm_attention_bwd(benchmark::State& st) {
  const AttnShape& s = k_attn_shapes[S];
  AttnData<T> d(s);
  cpu::attention_forward(d.out.data(), d.lse.data(), d.qkv.data(), s.B, s.T, s.C, s.NH);
  for (auto _ : st) {
    CALL(attention_backward, d.dqkv.data(), d.dout.data(), d.qkv.data(), d.out.data(), d.lse.data(),
         s.B, s.T, s.C, s.NH);
    benchmark::DoNotOptimize(d.dqkv.data());
  }
  set_flops(st, 2.0 * attn_fwd_flops(s));  // dv, dp, dq, dk: four products (recompute not counted)
  st.SetLabel(s.label);
}

template <bool Fast, class T>
void bm_attention_fwd_bwd(benchmark::State& st) {
  const AttnShape& s = k_attn_shapes[0];
  AttnData<T> d(s);
  for (auto _ : st) {
    CALL(attention_forward, d.out.data(), d.lse.data(), d.qkv.data(), s.B, s.T, s.C, s.NH);
    CALL(attention_backward, d.dqkv.data(), d.dout.data(), d.qkv.data(), d.out.data(), d.lse.data(),
         s.B, s.T, s.C, s.NH);
    benchmark::DoNotOptimize(d.dqkv.data());
  }
  set_flops(st, 3.0 * attn_fwd_flops(s));
  st.SetLabel(s.label);
}

// ---- cross-entropy, embedding -------------------------------------------------------

constexpr int k_cn = 256, k_cv = 50257;

template <bool Fast, class T>
void bm_crossentropy_fwd(benchmark::State& st) {
  const auto logits = data<T>((size_t)k_cn * k_cv, 1);
  std::vector<int32_t> targets(k_cn);
  for (int i = 0; i < k_cn; i++) targets[i] = (i * 7919) % k_cv;
  std::vector<float> losses(k_cn), lse(k_cn);
  for (auto _ : st) {
    CALL(crossentropy_forward, losses.data(), lse.data(), logits.data(), targets.data(), k_cn, k_cv, -100);
    benchmark::DoNotOptimize(losses.data());
  }
  set_bytes(st, 1.0 * sizeof(T) * k_cn * k_cv);
  st.SetLabel("N=256 V=50257");
}

template <bool Fast, class T>
void bm_crossentropy_bwd(benchmark::State& st) {
  const auto logits = data<T>((size_t)k_cn * k_cv, 1);
  std::vector<int32_t> targets(k_cn);
  for (int i = 0; i < k_cn; i++) targets[i] = (i * 7919) % k_cv;
  std::vector<float> losses(k_cn), lse(k_cn);
  std::vector<T> dlogits((size_t)k_cn * k_cv);
  cpu::crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), k_cn, k_cv, -100);
  for (auto _ : st) {
    CALL(crossentropy_backward, dlogits.data(), logits.data(), lse.data(), targets.data(), 1.0f / k_cn,
         k_cn, k_cv, -100);
    benchmark::DoNotOptimize(dlogits.data());
  }
  set_bytes(st, 3.0 * sizeof(T) * k_cn * k_cv);
  st.SetLabel("N=256 V=50257");
}

constexpr int k_eb = 4, k_et = 1024, k_ec = 768, k_ev = 50257;

template <bool Fast, class T>
void bm_embedding_fwd(benchmark::State& st) {
  const auto wte = data<T>((size_t)k_ev * k_ec, 1), wpe = data<T>((size_t)k_et * k_ec, 2);
  std::vector<int32_t> tokens(k_eb * k_et);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (int32_t)((i * 7919) % k_ev);
  std::vector<T> out((size_t)k_eb * k_et * k_ec);
  for (auto _ : st) {
    CALL(embedding_forward, out.data(), tokens.data(), wte.data(), wpe.data(), k_eb, k_et, k_ec);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 3.0 * sizeof(T) * k_eb * k_et * k_ec);
}

template <bool Fast, class T>
void bm_embedding_bwd(benchmark::State& st) {
  std::vector<float> dwte((size_t)k_ev * k_ec), dwpe((size_t)k_et * k_ec);
  std::vector<int32_t> tokens(k_eb * k_et);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (int32_t)((i * 7919) % k_ev);
  const auto dout = data<T>((size_t)k_eb * k_et * k_ec, 3);
  for (auto _ : st) {
    CALL(embedding_backward, dwte.data(), dwpe.data(), dout.data(), tokens.data(), k_eb, k_et, k_ec);
    benchmark::DoNotOptimize(dwte.data());
  }
  // read dout, read + write the fp32 dwte and dwpe rows
  set_bytes(st, (1.0 * sizeof(T) + 4.0 * 4) * k_eb * k_et * k_ec);
}

// ---- optimizer, elementwise, reductions, bf16 ---------------------------------------

constexpr int64_t k_n = 1 << 23;  // 8M elements: beyond the caches

// T = bf16: AdamW also writes the bf16 compute copy of the weights.
template <bool Fast, class T>
void bm_adamw(benchmark::State& st) {
  auto p = randn(k_n, 1);
  const auto g = randn(k_n, 2);
  std::vector<float> m(k_n, 0.0f), v(k_n, 0.0f);
  std::vector<bf16> copy(sizeof(T) == 2 ? k_n : 0);
  int step = 0;
  for (auto _ : st) {
    if constexpr (sizeof(T) == 2)
      CALL(adamw_step, p.data(), copy.data(), g.data(), m.data(), v.data(), k_n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step);
    else
      CALL(adamw_step, p.data(), g.data(), m.data(), v.data(), k_n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step);
    benchmark::DoNotOptimize(p.data());
  }
  set_bytes(st, (7.0 * 4 + (sizeof(T) == 2 ? 2 : 0)) * k_n);
}

template <bool Fast, class T>
void bm_add(benchmark::State& st) {
  const auto a = data<T>(k_n, 1), b = data<T>(k_n, 2);
  std::vector<T> out(k_n);
  for (auto _ : st) {
    CALL(add, out.data(), a.data(), b.data(), k_n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 3.0 * sizeof(T) * k_n);
}

template <bool Fast, class T>
void bm_scale(benchmark::State& st) {
  const auto a = data<T>(k_n, 1);
  std::vector<T> out(k_n);
  for (auto _ : st) {
    CALL(scale, out.data(), a.data(), 0.5f, k_n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * sizeof(T) * k_n);
}

template <bool Fast, class T>
void bm_axpy(benchmark::State& st) {
  const auto a = data<T>(k_n, 1);
  std::vector<T> out(k_n);
  for (auto _ : st) {
    CALL(axpy, out.data(), a.data(), 1e-3f, k_n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 3.0 * sizeof(T) * k_n);
}

template <bool Fast, class T>
void bm_sum(benchmark::State& st) {
  const auto a = data<T>(k_n, 1);
  for (auto _ : st) benchmark::DoNotOptimize(CALL(sum, a.data(), k_n));
  set_bytes(st, 1.0 * sizeof(T) * k_n);
}

template <bool Fast, class T>
void bm_sum_squares(benchmark::State& st) {
  const auto a = data<T>(k_n, 1);
  for (auto _ : st) benchmark::DoNotOptimize(CALL(sum_squares, a.data(), k_n));
  set_bytes(st, 1.0 * sizeof(T) * k_n);
}

template <bool Fast>
void bm_f32_to_bf16(benchmark::State& st) {
  const auto a = randn(k_n, 1);
  std::vector<bf16> h(k_n);
  for (auto _ : st) {
    CALL(f32_to_bf16, h.data(), a.data(), k_n);
    benchmark::DoNotOptimize(h.data());
  }
  set_bytes(st, 6.0 * k_n);
}

template <bool Fast>
void bm_bf16_to_f32(benchmark::State& st) {
  std::vector<bf16> h(k_n, bf16(1.0f));
  std::vector<float> a(k_n);
  for (auto _ : st) {
    CALL(bf16_to_f32, a.data(), h.data(), k_n);
    benchmark::DoNotOptimize(a.data());
  }
  set_bytes(st, 6.0 * k_n);
}

#undef CALL

void add_pair(const std::string& op, void (*fast)(benchmark::State&), void (*reference)(benchmark::State&)) {
  benchmark::RegisterBenchmark(("BM_" + op + "/fast").c_str(), fast)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("BM_" + op + "/ref").c_str(), reference)->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  // Each op in fp32 (BM_<op>) and, where it has one, bf16 (BM_<op>_bf16).
#define PAIR(op) add_pair(#op, bm_##op<true>, bm_##op<false>)
#define PAIRS(op)                                                       \
  add_pair(#op, bm_##op<true, float>, bm_##op<false, float>);           \
  add_pair(#op "_bf16", bm_##op<true, bf16>, bm_##op<false, bf16>)
  PAIR(gemm);
  register_train_gemms();
  PAIR(gemm_batched);
  PAIRS(matmul_fwd);
  PAIRS(matmul_bwd);
  PAIRS(bias_add);
  PAIRS(bias_bwd);
  PAIRS(layernorm_fwd);
  PAIRS(layernorm_bwd);
  PAIRS(gelu_fwd);
  PAIRS(gelu_bwd);
  PAIRS(attention_fwd);
  PAIRS(attention_bwd);
  PAIRS(attention_fwd_bwd);
  add_pair("attention_fwd_gpt2", bm_attention_fwd<true, float, 1>, bm_attention_fwd<false, float, 1>);
  add_pair("attention_fwd_gpt2_bf16", bm_attention_fwd<true, bf16, 1>, bm_attention_fwd<false, bf16, 1>);
  add_pair("attention_bwd_gpt2", bm_attention_bwd<true, float, 1>, bm_attention_bwd<false, float, 1>);
  add_pair("attention_bwd_gpt2_bf16", bm_attention_bwd<true, bf16, 1>, bm_attention_bwd<false, bf16, 1>);
  PAIRS(crossentropy_fwd);
  PAIRS(crossentropy_bwd);
  PAIRS(embedding_fwd);
  PAIRS(embedding_bwd);
  PAIRS(adamw);
  PAIRS(add);
  PAIRS(scale);
  PAIRS(axpy);
  PAIRS(sum);
  PAIRS(sum_squares);
  PAIR(f32_to_bf16);
  PAIR(bf16_to_f32);
#undef PAIR
#undef PAIRS
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
