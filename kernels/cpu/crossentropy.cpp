// Fused softmax + cross-entropy over the vocabulary, max-subtracted for stability.
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr int64_t k_par_min = 1 << 14;
}  // namespace

void crossentropy_forward(float* losses, float* lse, const float* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index) {
#pragma omp parallel for schedule(static) if ((int64_t)N * V >= k_par_min)
  for (int i = 0; i < N; i++) {
    const float* x = logits + (int64_t)i * V;  // (V)
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;  // a NaN logit still reaches lse via exp
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) s += exp_vec(x[v] - mx);
    const float l = mx + std::log(s);
    lse[i] = l;
    losses[i] = targets[i] == ignore_index ? 0.0f : l - x[targets[i]];
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index) {
#pragma omp parallel for schedule(static) if ((int64_t)N * V >= k_par_min)
  for (int i = 0; i < N; i++) {
    if (targets[i] == ignore_index) continue;
    const float* x = logits + (int64_t)i * V;  // (V)
    float* dx = dlogits + (int64_t)i * V;      // (V)
    const float l = lse[i];
#pragma omp simd
    for (int v = 0; v < V; v++) dx[v] += dloss * exp_vec(x[v] - l);
    dx[targets[i]] -= dloss;
  }
}

}  // namespace gpumix::kernels::cpu
