// Fused softmax + cross-entropy over the vocabulary, max-subtracted for stability, over fp32
// or bf16 logits; losses, lse and all arithmetic in fp32.
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec_math.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr int64_t k_par_min = 1 << 14;

// Rows are `ld` apart; their first V columns are the classes.
template <class T>
GPUMIX_INLINE void forward_rows(float* losses, float* lse, const T* logits, const int32_t* targets,
                                int V, int64_t ld, int32_t ignore_index, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    const T* x = logits + i * ld;  // (V)
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++) mx = to_f32(x[v]) > mx ? to_f32(x[v]) : mx;  // a NaN logit still reaches lse via exp
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) s += exp_vec(to_f32(x[v]) - mx);
    const float l = mx + std::log(s);
    lse[i] = l;
    losses[i] = targets[i] == ignore_index ? 0.0f : l - to_f32(x[targets[i]]);
  }
}

// One row of dlogits: dx (+)= dloss * exp(x - l), the softmax scaled, on the portable loop.
template <class T>
GPUMIX_INLINE void scaled_softmax_row(T* dx, const T* x, float l, float dloss, int V, bool accumulate) {
  if (accumulate) {
#pragma omp simd
    for (int v = 0; v < V; v++) dx[v] = from_f32<T>(to_f32(dx[v]) + dloss * exp_vec(to_f32(x[v]) - l));
  } else {
#pragma omp simd
    for (int v = 0; v < V; v++) dx[v] = from_f32<T>(dloss * exp_vec(to_f32(x[v]) - l));
  }
}

// dlogits rows [i0, i1) += (accumulate) or = dloss * (softmax - onehot); ignored rows are
// left alone when accumulating, zeroed otherwise. dlogits may alias logits when !accumulate.
// row(dx, x, l, dloss, V, accumulate) writes a row's scaled softmax (the path's).
template <class T, class Row>
GPUMIX_INLINE void backward_rows(T* dlogits, const T* logits, const float* lse, const int32_t* targets, float dloss,
                                 int V, int64_t ld, int32_t ignore_index, bool accumulate, int64_t i0, int64_t i1,
                                 Row row) {
  for (int64_t i = i0; i < i1; i++) {
    const T* x = logits + i * ld;  // (V)
    T* dx = dlogits + i * ld;      // (V)
    const int32_t target = targets[i];
    if (target == ignore_index) {
      if (!accumulate)
        for (int v = 0; v < V; v++) dx[v] = from_f32<T>(0.0f);
      continue;
    }
    const float l = lse[i];
    // The target's logit is read before its gradient is written (dlogits may alias).
    const float d_target = dloss * (exp_vec(to_f32(x[target]) - l) - 1.0f);
    const float old_target = accumulate ? to_f32(dx[target]) : 0.0f;
    row(dx, x, l, dloss, V, accumulate);
    dx[target] = from_f32<T>(old_target + d_target);
  }
}

// The AVX-512 path, written out (the loops above compiled for AVX-512 spend ~2x the
// instructions on exp_vec): the same two passes per row, exp16 for exp_vec.
template <class T>
GPUMIX_TARGET_AVX512 void forward_rows_avx512(float* losses, float* lse, const T* logits, const int32_t* targets,
                                              int V, int64_t ld, int32_t ignore_index, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    const T* x = logits + i * ld;  // (V)
    __m512 mxv = _mm512_set1_ps(-INFINITY);
    for (int v = 0; v < V; v += 16) {  // a NaN logit still reaches lse via exp
      const __mmask16 m = lanes_below(V, v);
      mxv = _mm512_mask_max_ps(mxv, m, mxv, load16(x + v, m));
    }
    const float mx = all_lanes<true>(mxv);
    const __m512 mx16 = _mm512_set1_ps(mx);
    __m512 sv = _mm512_setzero_ps();
    for (int v = 0; v < V; v += 16) {
      const __mmask16 m = lanes_below(V, v);
      sv = _mm512_mask_add_ps(sv, m, sv, exp16(load16(x + v, m) - mx16));
    }
    const float l = mx + std::log(all_lanes<false>(sv));
    lse[i] = l;
    losses[i] = targets[i] == ignore_index ? 0.0f : l - to_f32(x[targets[i]]);
  }
}

template <class T>
GPUMIX_TARGET_AVX512 void scaled_softmax_row_avx512(T* dx, const T* x, float l, float dloss, int V, bool accumulate) {
  const __m512 dl = _mm512_set1_ps(dloss), l16 = _mm512_set1_ps(l);
  for (int v = 0; v < V; v += 16) {
    const __mmask16 m = lanes_below(V, v);
    const __m512 g = dl * exp16(load16(x + v, m) - l16);
    store16(dx + v, accumulate ? load16(dx + v, m) + g : g, m);
  }
}

// The path cpu_isa() names.
template <class T>
void fwd(float* losses, float* lse, const T* x, const int32_t* t, int V, int64_t ld, int32_t ig, int64_t i0,
         int64_t i1) {
  if (cpu_isa() >= Isa::avx512)
    forward_rows_avx512(losses, lse, x, t, V, ld, ig, i0, i1);
  else
    forward_rows(losses, lse, x, t, V, ld, ig, i0, i1);
}
template <class T>
void bwd(T* dx, const T* x, const float* lse, const int32_t* t, float dl, int V, int64_t ld, int32_t ig, bool acc,
         int64_t i0, int64_t i1) {
  if (cpu_isa() >= Isa::avx512)
    backward_rows(dx, x, lse, t, dl, V, ld, ig, acc, i0, i1, scaled_softmax_row_avx512<T>);
  else
    backward_rows(dx, x, lse, t, dl, V, ld, ig, acc, i0, i1, scaled_softmax_row<T>);
}

// The fused classifier on rows [i0, i1), one row at a time so that the row is still in
// cache for its second pass: lse and loss, then (grad) the row's dlogits over its logits,
// the padding columns [V, Vp) zero.
template <class T>
void classifier_rows(float* losses, float* lse, T* logits, const int32_t* t, float scale, int V, int Vp,
                     int32_t ig, bool grad, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    fwd(losses, lse, logits, t, V, Vp, ig, i, i + 1);
    if (!grad) continue;
    bwd(logits, logits, lse, t, scale, V, Vp, ig, /*accumulate=*/false, i, i + 1);
    for (int v = V; v < Vp; v++) logits[i * Vp + v] = from_f32<T>(0.0f);
  }
}

}  // namespace

void crossentropy_forward(float* losses, float* lse, const float* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index) {
  parallel_ranges(N, 1, (int64_t)N * V >= k_par_min, [&](int64_t i0, int64_t i1) {
    fwd(losses, lse, logits, targets, V, V, ignore_index, i0, i1);
  });
}
void crossentropy_forward(float* losses, float* lse, const bf16* logits,
                          const int32_t* targets, int N, int V, int32_t ignore_index) {
  parallel_ranges(N, 1, (int64_t)N * V >= k_par_min, [&](int64_t i0, int64_t i1) {
    fwd(losses, lse, logits, targets, V, V, ignore_index, i0, i1);
  });
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index) {
  parallel_ranges(N, 1, (int64_t)N * V >= k_par_min, [&](int64_t i0, int64_t i1) {
    bwd(dlogits, logits, lse, targets, dloss, V, V, ignore_index, true, i0, i1);
  });
}
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V,
                           int32_t ignore_index, bool accumulate) {
  parallel_ranges(N, 1, (int64_t)N * V >= k_par_min, [&](int64_t i0, int64_t i1) {
    bwd(dlogits, logits, lse, targets, dloss, V, V, ignore_index, accumulate, i0, i1);
  });
}

// ---- the fused classifier ----------------------------------------------------------------
void classifier_forward(float* losses, float* lse, float* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad) {
  parallel_ranges(N, 1, (int64_t)N * Vp >= k_par_min, [&](int64_t i0, int64_t i1) {
    classifier_rows(losses, lse, logits, targets, scale, V, Vp, ignore_index, grad, i0, i1);
  });
}
void classifier_forward(float* losses, float* lse, bf16* logits, const int32_t* targets, float scale, int N,
                        int V, int Vp, int32_t ignore_index, bool grad) {
  parallel_ranges(N, 1, (int64_t)N * Vp >= k_par_min, [&](int64_t i0, int64_t i1) {
    classifier_rows(losses, lse, logits, targets, scale, V, Vp, ignore_index, grad, i0, i1);
  });
}

}  // namespace gpumix::kernels::cpu
