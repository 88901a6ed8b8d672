// Incremental decoding's attention: one query row per (batch, head) against the key/value
// cache rows 0..pos (nn/infer's KV cache). A (T, T) tile scheme has nothing to tile here:
// each task computes its pos + 1 scores as dot products, a two-pass softmax (max, then
// exp and sum) and the weighted sum of the value rows, all in fp32; a bf16 result is
// rounded once. Tasks are the (batch, head) pairs, one contiguous range per thread.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {

void check_decode_shape(int B, int Tc, int C, int NH, int pos) {
  if (B < 0 || Tc <= 0 || C <= 0 || NH <= 0 || C % NH != 0 || pos < 0 || pos >= Tc)
    throw std::invalid_argument("attention_decode: bad shape B=" + std::to_string(B) + " Tc=" +
                                std::to_string(Tc) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                                " pos=" + std::to_string(pos) +
                                " (C a positive multiple of NH, 0 <= pos < Tc)");
}

// Head h of batch b (task t): s holds pos + 1 floats, o HS floats of workspace.
template <class T>
void decode_task(T* out, const T* qkv, int Tc, int C, int NH, int pos, int t, float* s, float* o) {
  const int HS = C / NH, b = t / NH, h = t % NH;
  const int64_t C3 = 3 * (int64_t)C;
  const float scale = 1.0f / std::sqrt((float)HS);
  const T* base = qkv + (int64_t)b * Tc * C3 + h * HS;  // q of row 0; k at +C, v at +2C
  const T* q = base + pos * C3;
  float mx = -INFINITY;
  for (int j = 0; j <= pos; j++) {
    const T* k = base + j * C3 + C;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int d = 0; d < HS; d++) acc += to_f32(q[d]) * to_f32(k[d]);
    s[j] = acc * scale;
    mx = std::max(mx, s[j]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= pos; j++) {
    s[j] = exp_vec(s[j] - mx);
    sum += s[j];
  }
  std::fill(o, o + HS, 0.0f);
  for (int j = 0; j <= pos; j++) {
    const T* v = base + j * C3 + 2 * C;
    const float p = s[j];
#pragma omp simd
    for (int d = 0; d < HS; d++) o[d] += p * to_f32(v[d]);
  }
  T* y = out + (int64_t)b * C + h * HS;
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int d = 0; d < HS; d++) y[d] = from_f32<T>(o[d] * inv);
}

template <class T>
void decode(T* out, const T* qkv, int B, int Tc, int C, int NH, int pos) {
  check_decode_shape(B, Tc, C, NH, pos);
  // Threads pay off once the heads hold a few hundred cached rows between them.
  const bool par = B * NH > 1 && (int64_t)B * NH * (pos + 1) * (C / NH) >= (1 << 15);
  parallel_ranges(B * NH, 1, par, [&](int64_t t0, int64_t t1) {
    std::vector<float> s((size_t)pos + 1), o((size_t)(C / NH));
    for (int64_t t = t0; t < t1; t++) decode_task(out, qkv, Tc, C, NH, pos, (int)t, s.data(), o.data());
  });
}

}  // namespace

void attention_decode(float* out, const float* qkv, int B, int Tc, int C, int NH, int pos) {
  decode(out, qkv, B, Tc, C, NH, pos);
}
void attention_decode(bf16* out, const bf16* qkv, int B, int Tc, int C, int NH, int pos) {
  decode(out, qkv, B, Tc, C, NH, pos);
}

}  // namespace gpumix::kernels::cpu
