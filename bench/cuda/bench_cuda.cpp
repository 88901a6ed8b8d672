// Google Benchmark of every CUDA kernel, timed with CUDA events (UseManualTime), on random
// data (never zeros), the L2 cache flushed before each repeat of a memory-bound kernel.
// Memory-bound kernels report GB/s (bytes read + written, each once) and that as % of the
// device's measured copy bandwidth (cudaMemcpy device to device, measured at start and
// printed in the context); matmuls and attention report TFLOP/s.
// Without a CUDA device it prints why and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/half_types.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"

namespace cu = gpumix::kernels::cuda;
using bf16 = cu::bf16;

namespace {

double g_copy_gbps = 0.0;  // measured device-to-device copy bandwidth, GB/s (read + write)
void* g_flush = nullptr;   // a buffer of several L2 sizes, overwritten to flush the L2
size_t g_flush_bytes = 0;

template <typename T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, sizeof(T) * std::max<size_t>(n, 1)));
  return (T*)p;
}

// Fill with normal(0, stddev) values (|x| when positive): a 16 MiB random block on the
// host, replicated on the device.
template <typename T>
void fill_random(T* p, size_t n, float stddev = 1.0f, bool positive = false, uint32_t seed = 1) {
  const size_t block = std::min<size_t>(n, (16u << 20) / sizeof(T));
  std::vector<T> h(block);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (auto& x : h) {
    float f = dist(gen);
    if (positive) f = std::fabs(f);
    if constexpr (sizeof(T) == 2)
      x = T(f);  // bf16: rounded to nearest even
    else
      x = f;
  }
  for (size_t off = 0; off < n; off += block) {
    const size_t count = std::min(block, n - off);
    CUDA_CHECK(cudaMemcpy(p + off, h.data(), sizeof(T) * count, cudaMemcpyHostToDevice));
  }
}

void flush_l2() {
  if (g_flush) CUDA_CHECK(cudaMemsetAsync(g_flush, 0, g_flush_bytes, nullptr));
}

// Times f with events around each call; bytes / flops per call give the counters.
void run_timed(benchmark::State& state, const std::function<void()>& f, double bytes,
               double flops, bool flush = true) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  f();  // warm-up: module load, handles, algorithm choice, scratch pool
  CUDA_CHECK(cudaDeviceSynchronize());
  double total_s = 0.0;
  int64_t iters = 0;
  for (auto _ : state) {
    if (flush) flush_l2();
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    f();
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
    total_s += ms * 1e-3;
    ++iters;
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  if (total_s <= 0) return;
  if (bytes > 0) {
    const double gbps = bytes * iters / total_s / 1e9;
    state.counters["GB/s"] = gbps;
    if (g_copy_gbps > 0) state.counters["%copy"] = 100.0 * gbps / g_copy_gbps;
  }
  if (flops > 0) state.counters["TFLOP/s"] = flops * iters / total_s / 1e12;
  state.counters["us"] = total_s / iters * 1e6;
}

// gpt2 124M: B 8, T 1024, C 768, NH 12, V 50257 (50304 padded).
constexpr int kB = 8, kT = 1024, kC = 768, kNH = 12, kV = 50304;
constexpr int kN = kB * kT;

void BM_copy(benchmark::State& state) {
  const size_t bytes = (size_t)state.range(0) << 20;
  char* a = dev_alloc<char>(bytes);
  char* b = dev_alloc<char>(bytes);
  fill_random((float*)a, bytes / 4);
  run_timed(state, [&] { CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr)); },
            2.0 * bytes, 0);
  cudaFree(a);
  cudaFree(b);
}

void BM_layernorm_forward(benchmark::State& state) {
  const int C = (int)state.range(0);
  bf16 *x = dev_alloc<bf16>((size_t)kN * C), *y = dev_alloc<bf16>((size_t)kN * C),
       *w = dev_alloc<bf16>(C), *b = dev_alloc<bf16>(C);
  float *mean = dev_alloc<float>(kN), *rstd = dev_alloc<float>(kN);
  fill_random(x, (size_t)kN * C);
  fill_random(w, C);
  fill_random(b, C);
  run_timed(state, [&] { cu::layernorm_forward(y, mean, rstd, x, w, b, kN, C); },
            2.0 * 2 * kN * C + 8.0 * kN, 0);
  for (void* p : {(void*)x, (void*)y, (void*)w, (void*)b, (void*)mean, (void*)rstd}) cudaFree(p);
}

void BM_layernorm_backward(benchmark::State& state) {
  const int C = (int)state.range(0);
  const size_t n = (size_t)kN * C;
  bf16 *x = dev_alloc<bf16>(n), *g = dev_alloc<bf16>(n), *dx = dev_alloc<bf16>(n),
       *w = dev_alloc<bf16>(C);
  float *mean = dev_alloc<float>(kN), *rstd = dev_alloc<float>(kN), *dw = dev_alloc<float>(C),
        *db = dev_alloc<float>(C);
  fill_random(x, n);
  fill_random(g, n);
  fill_random(dx, n);
  fill_random(w, C);
  fill_random(mean, kN, 0.1f);
  fill_random(rstd, kN, 1.0f, true);
  fill_random(dw, C);
  fill_random(db, C);
  // the fewest bytes: read x, dout, dinp; write dinp
  run_timed(state, [&] { cu::layernorm_backward(dx, dw, db, g, x, w, mean, rstd, kN, C); },
            2.0 * 4 * n, 0);
  for (void* p : {(void*)x, (void*)g, (void*)dx, (void*)w, (void*)mean, (void*)rstd, (void*)dw,
                  (void*)db})
    cudaFree(p);
}

void BM_gelu_forward(benchmark::State& state) {
  const size_t n = (size_t)kN * 4 * kC;
  bf16 *x = dev_alloc<bf16>(n), *y = dev_alloc<bf16>(n);
  fill_random(x, n);
  run_timed(state, [&] { cu::gelu_forward(y, x, n); }, 2.0 * 2 * n, 0);
  cudaFree(x);
  cudaFree(y);
}

void BM_gelu_backward(benchmark::State& state) {
  const size_t n = (size_t)kN * 4 * kC;
  bf16 *x = dev_alloc<bf16>(n), *g = dev_alloc<bf16>(n), *d = dev_alloc<bf16>(n);
  fill_random(x, n);
  fill_random(g, n);
  fill_random(d, n);
  run_timed(state, [&] { cu::gelu_backward(d, x, g, n); }, 2.0 * 4 * n, 0);
  cudaFree(x);
  cudaFree(g);
  cudaFree(d);
}

void BM_add_bf16(benchmark::State& state) {
  const size_t n = (size_t)64 << 20;
  bf16 *a = dev_alloc<bf16>(n), *b = dev_alloc<bf16>(n), *c = dev_alloc<bf16>(n);
  fill_random(a, n);
  fill_random(b, n);
  run_timed(state, [&] { cu::add(c, a, b, n); }, 2.0 * 3 * n, 0);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

void BM_axpy_f32(benchmark::State& state) {
  const size_t n = (size_t)64 << 20;
  float *a = dev_alloc<float>(n), *o = dev_alloc<float>(n);
  fill_random(a, n);
  fill_random(o, n);
  run_timed(state, [&] { cu::axpy(o, a, 0.5f, n); }, 4.0 * 3 * n, 0);
  cudaFree(a);
  cudaFree(o);
}

void BM_f32_to_bf16(benchmark::State& state) {
  const size_t n = (size_t)64 << 20;
  float* a = dev_alloc<float>(n);
  bf16* o = dev_alloc<bf16>(n);
  fill_random(a, n);
  run_timed(state, [&] { cu::f32_to_bf16(o, a, n); }, 6.0 * n, 0);
  cudaFree(a);
  cudaFree(o);
}

void BM_sum_squares_f32(benchmark::State& state) {
  const size_t n = (size_t)124 << 20;
  float* a = dev_alloc<float>(n);
  double* out = dev_alloc<double>(1);
  fill_random(a, n);
  run_timed(state, [&] { cu::sum_squares(out, a, n); }, 4.0 * n, 0);
  cudaFree(a);
  cudaFree(out);
}

void BM_adamw(benchmark::State& state) {
  const size_t n = (size_t)124 << 20;  // gpt2 124M-sized shard
  float *p = dev_alloc<float>(n), *g = dev_alloc<float>(n), *m = dev_alloc<float>(n),
        *v = dev_alloc<float>(n);
  bf16* h = dev_alloc<bf16>(n);
  fill_random(p, n);
  fill_random(g, n);
  fill_random(m, n, 0.1f);
  fill_random(v, n, 0.1f, true);
  int step = 1;
  // read p, g, m, v; write p, m, v, bf16 copy
  run_timed(state,
            [&] { cu::adamw_step(p, h, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step++); },
            (16.0 + 12.0 + 2.0) * n, 0);
  for (void* q : {(void*)p, (void*)g, (void*)m, (void*)v, (void*)h}) cudaFree(q);
}

void BM_crossentropy_forward(benchmark::State& state) {
  const int N = 4096, V = (int)state.range(0);
  bf16* logits = dev_alloc<bf16>((size_t)N * V);
  float *loss = dev_alloc<float>(N), *lse = dev_alloc<float>(N);
  int32_t* t = dev_alloc<int32_t>(N);
  fill_random(logits, (size_t)N * V, 2.0f);
  std::vector<int32_t> ht(N);
  for (int i = 0; i < N; ++i) ht[i] = (i * 7919) % V;
  CUDA_CHECK(cudaMemcpy(t, ht.data(), 4 * N, cudaMemcpyHostToDevice));
  run_timed(state, [&] { cu::crossentropy_forward(loss, lse, logits, t, N, V, -100); },
            2.0 * N * V, 0);
  for (void* q : {(void*)logits, (void*)loss, (void*)lse, (void*)t}) cudaFree(q);
}

void BM_crossentropy_backward(benchmark::State& state) {
  const int N = 4096, V = (int)state.range(0);
  bf16 *logits = dev_alloc<bf16>((size_t)N * V), *d = dev_alloc<bf16>((size_t)N * V);
  float *loss = dev_alloc<float>(N), *lse = dev_alloc<float>(N);
  int32_t* t = dev_alloc<int32_t>(N);
  fill_random(logits, (size_t)N * V, 2.0f);
  std::vector<int32_t> ht(N);
  for (int i = 0; i < N; ++i) ht[i] = (i * 7919) % V;
  CUDA_CHECK(cudaMemcpy(t, ht.data(), 4 * N, cudaMemcpyHostToDevice));
  cu::crossentropy_forward(loss, lse, logits, t, N, V, -100);
  // overwrite mode (the first gradient of the logits): read logits, write dlogits
  run_timed(state,
            [&] { cu::crossentropy_backward(d, logits, lse, t, 1.0f / N, N, V, -100, false); },
            2.0 * 2 * N * V, 0);
  for (void* q : {(void*)logits, (void*)d, (void*)loss, (void*)lse, (void*)t}) cudaFree(q);
}

void BM_embedding_forward(benchmark::State& state) {
  const int V = 50257;
  bf16 *wte = dev_alloc<bf16>((size_t)V * kC), *wpe = dev_alloc<bf16>((size_t)kT * kC),
       *out = dev_alloc<bf16>((size_t)kN * kC);
  int32_t* tok = dev_alloc<int32_t>(kN);
  fill_random(wte, (size_t)V * kC);
  fill_random(wpe, (size_t)kT * kC);
  std::vector<int32_t> ht(kN);
  std::mt19937 gen(3);
  for (auto& x : ht) x = (int32_t)(gen() % V);
  CUDA_CHECK(cudaMemcpy(tok, ht.data(), 4 * kN, cudaMemcpyHostToDevice));
  run_timed(state, [&] { cu::embedding_forward(out, tok, wte, wpe, kB, kT, kC); },
            2.0 * 3 * kN * kC, 0);
  for (void* q : {(void*)wte, (void*)wpe, (void*)out, (void*)tok}) cudaFree(q);
}

void BM_embedding_backward(benchmark::State& state) {
  const int V = 50257;
  float *dwte = dev_alloc<float>((size_t)V * kC), *dwpe = dev_alloc<float>((size_t)kT * kC);
  bf16* g = dev_alloc<bf16>((size_t)kN * kC);
  int32_t* tok = dev_alloc<int32_t>(kN);
  fill_random(dwte, (size_t)V * kC);
  fill_random(dwpe, (size_t)kT * kC);
  fill_random(g, (size_t)kN * kC);
  std::vector<int32_t> ht(kN);
  std::mt19937 gen(3);
  for (auto& x : ht) x = (int32_t)(gen() % V);
  CUDA_CHECK(cudaMemcpy(tok, ht.data(), 4 * kN, cudaMemcpyHostToDevice));
  // read dout, read + write the touched dwte rows (at most kN) and dwpe
  run_timed(state, [&] { cu::embedding_backward(dwte, dwpe, g, tok, kB, kT, kC); },
            2.0 * kN * kC + 8.0 * kN * kC + 8.0 * kT * kC, 0);
  for (void* q : {(void*)dwte, (void*)dwpe, (void*)g, (void*)tok}) cudaFree(q);
}

void BM_matmul_forward(benchmark::State& state) {
  const int C = (int)state.range(0), OC = (int)state.range(1);
  bf16 *x = dev_alloc<bf16>((size_t)kN * C), *w = dev_alloc<bf16>((size_t)OC * C),
       *b = dev_alloc<bf16>(OC), *y = dev_alloc<bf16>((size_t)kN * OC);
  fill_random(x, (size_t)kN * C);
  fill_random(w, (size_t)OC * C, 0.02f);
  fill_random(b, OC);
  run_timed(state, [&] { cu::matmul_forward(y, x, w, b, kN, C, OC); }, 0,
            2.0 * kN * C * OC, false);
  for (void* q : {(void*)x, (void*)w, (void*)b, (void*)y}) cudaFree(q);
}

void BM_matmul_backward(benchmark::State& state) {
  const int C = (int)state.range(0), OC = (int)state.range(1);
  bf16 *x = dev_alloc<bf16>((size_t)kN * C), *w = dev_alloc<bf16>((size_t)OC * C),
       *g = dev_alloc<bf16>((size_t)kN * OC), *dx = dev_alloc<bf16>((size_t)kN * C);
  float *dw = dev_alloc<float>((size_t)OC * C), *db = dev_alloc<float>(OC);
  fill_random(x, (size_t)kN * C);
  fill_random(w, (size_t)OC * C, 0.02f);
  fill_random(g, (size_t)kN * OC);
  fill_random(dx, (size_t)kN * C);
  fill_random(dw, (size_t)OC * C);
  fill_random(db, OC);
  run_timed(state, [&] { cu::matmul_backward(dx, dw, db, g, x, w, kN, C, OC); }, 0,
            4.0 * kN * C * OC, false);
  for (void* q : {(void*)x, (void*)w, (void*)g, (void*)dx, (void*)dw, (void*)db}) cudaFree(q);
}

// Causal attention FLOPs, counted as PyTorch / FlashAttention do: forward 4 B NH T^2 HS / 2,
// backward 2.5 x forward.
double attention_flops(int B, int T, int NH, int HS) { return 2.0 * B * NH * (double)T * T * HS; }

void BM_attention(benchmark::State& state) {
  // T; mode 0 fwd, 1 fwd+bwd, 2/3 the same of the reference; B (bench/gpu/check.sh: 16)
  const int T = (int)state.range(0), mode = (int)state.range(1), kB = (int)state.range(2);
  const int HS = kC / kNH;
  const size_t nqkv = (size_t)kB * T * 3 * kC, nout = (size_t)kB * T * kC;
  bf16 *qkv = dev_alloc<bf16>(nqkv), *out = dev_alloc<bf16>(nout), *g = dev_alloc<bf16>(nout),
       *dqkv = dev_alloc<bf16>(nqkv);
  float* lse = dev_alloc<float>((size_t)kB * kNH * T);
  fill_random(qkv, nqkv);
  fill_random(g, nout);
  fill_random(dqkv, nqkv, 0.01f);
  const bool ref = mode >= 2, bwd = mode % 2 == 1;
  const double f = attention_flops(kB, T, kNH, HS) * (bwd ? 3.5 : 1.0);
  run_timed(state, [&] {
    if (ref) {
      cu::attention_forward_ref(out, lse, qkv, kB, T, kC, kNH);
      if (bwd) cu::attention_backward_ref(dqkv, g, qkv, out, lse, kB, T, kC, kNH);
    } else {
      cu::attention_forward(out, lse, qkv, kB, T, kC, kNH);
      if (bwd) cu::attention_backward(dqkv, g, qkv, out, lse, kB, T, kC, kNH);
    }
  }, 0, f, false);
  for (void* q : {(void*)qkv, (void*)out, (void*)g, (void*)dqkv, (void*)lse}) cudaFree(q);
}

double measure_copy_gbps() {
  const size_t bytes = (size_t)1 << 30;
  char* a = dev_alloc<char>(bytes);
  char* b = dev_alloc<char>(bytes);
  fill_random((float*)a, bytes / 4);
  cudaEvent_t s, e;
  CUDA_CHECK(cudaEventCreate(&s));
  CUDA_CHECK(cudaEventCreate(&e));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    CUDA_CHECK(cudaEventRecord(s, nullptr));
    CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr));
    CUDA_CHECK(cudaEventRecord(e, nullptr));
    CUDA_CHECK(cudaEventSynchronize(e));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, s, e));
    if (i >= 2) ms.push_back(t);  // two warm-ups
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace

BENCHMARK(BM_copy)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layernorm_forward)->Arg(768)->Arg(1600)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layernorm_backward)->Arg(768)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gelu_forward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gelu_backward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_add_bf16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_axpy_f32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_f32_to_bf16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sum_squares_f32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_adamw)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_crossentropy_forward)->Arg(50257)->Arg(50304)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_crossentropy_backward)->Arg(50257)->Arg(50304)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_embedding_forward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_embedding_backward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_forward)->Args({768, 2304})->Args({768, 3072})->Args({3072, 768})->Args({768, 50304})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_backward)->Args({768, 3072})->Args({768, 50304})->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attention)->Args({1024, 0, kB})->Args({1024, 1, kB})->Args({1024, 2, kB})->Args({1024, 3, kB})
    ->Args({1024, 0, 16})->Args({1024, 1, 16})->Args({64, 0, 1})->Args({64, 1, 1})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  std::string why;
  if (cu::cuda_device_count(&why) == 0) {
    std::printf("bench_cuda: no CUDA device (%s); skipping\n", why.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  const cu::DeviceInfo d = cu::cuda_device_info(0);
  g_flush_bytes = std::max<size_t>((size_t)d.l2_cache * 4, (size_t)64 << 20);
  CUDA_CHECK(cudaMalloc(&g_flush, g_flush_bytes));
  g_copy_gbps = measure_copy_gbps();
  benchmark::AddCustomContext("device", cu::cuda_device_summary(0));
  benchmark::AddCustomContext("copy_GBps", std::to_string(g_copy_gbps));
  std::printf("device: %s; measured D2D copy %.0f GB/s (read + write)\n",
              cu::cuda_device_summary(0).c_str(), g_copy_gbps);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  cudaFree(g_flush);
  return 0;
}
