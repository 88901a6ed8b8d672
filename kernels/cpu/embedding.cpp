// Token + position embedding, fp32 or bf16 tables and activations; gradients in fp32.
#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {

constexpr int64_t k_par_min = 1 << 14;

// Rows [r0, r1) of out (B*T, C): out[b,t] = wte[tokens[b,t]] + wpe[t].
template <class T>
GPUMIX_INLINE void forward_rows(T* out, const int32_t* tokens, const T* wte, const T* wpe, int T_,
                                int C, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++) {
    T* y = out + r * C;                             // (C)
    const T* e = wte + (int64_t)tokens[r] * C;      // (C)
    const T* p = wpe + (int64_t)(r % T_) * C;       // (C)
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = from_f32<T>(to_f32(e[c]) + to_f32(p[c]));
  }
}

// g (C) += dy (C), in fp32.
template <class T>
GPUMIX_INLINE void add_row(float* g, const T* dy, int C) {
#pragma omp simd
  for (int c = 0; c < C; c++) g[c] += to_f32(dy[c]);
}

GPUMIX_ISA_VARIANTS(fwd_f32, forward_rows,
                    (float* o, const int32_t* tok, const float* wte, const float* wpe, int T, int C, int64_t r0, int64_t r1),
                    (o, tok, wte, wpe, T, C, r0, r1))
GPUMIX_ISA_VARIANTS(fwd_bf16, forward_rows,
                    (bf16* o, const int32_t* tok, const bf16* wte, const bf16* wpe, int T, int C, int64_t r0, int64_t r1),
                    (o, tok, wte, wpe, T, C, r0, r1))
GPUMIX_ISA_VARIANTS(add_row_f32, add_row, (float* g, const float* dy, int C), (g, dy, C))
GPUMIX_ISA_VARIANTS(add_row_bf16, add_row, (float* g, const bf16* dy, int C), (g, dy, C))

template <class T>
void backward(void (*add)(float*, const T*, int), float* dwte, float* dwpe, const T* dout,
              const int32_t* tokens, int B, int T_, int C) {
#pragma omp parallel if ((int64_t)B * T_ * C >= k_par_min)
  {
    // A token may repeat anywhere in the batch, so dwte rows cannot be split by position.
    // Each thread owns the tokens equal to its id modulo the thread count and scans every
    // position for them: no two threads write one row, each row is added whole
    // (contiguous, unlike splitting by columns, which walks the large table once per
    // column chunk), and each row sums in position order, as the reference does.
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    if (dwte) {
      for (int i = 0; i < B * T_; i++) {
        if (tokens[i] % nt != tid) continue;
        add(dwte + (int64_t)tokens[i] * C, dout + (int64_t)i * C, C);
      }
    }
    if (dwpe) {
#pragma omp for schedule(static)
      for (int t = 0; t < T_; t++)
        for (int b = 0; b < B; b++) add(dwpe + (int64_t)t * C, dout + ((int64_t)b * T_ + t) * C, C);
    }
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C) {
  parallel_ranges((int64_t)B * T, 1, (int64_t)B * T * C >= k_par_min, [&](int64_t r0, int64_t r1) {
    fwd_f32(out, tokens, wte, wpe, T, C, r0, r1);
  });
}
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C) {
  parallel_ranges((int64_t)B * T, 1, (int64_t)B * T * C >= k_par_min, [&](int64_t r0, int64_t r1) {
    fwd_bf16(out, tokens, wte, wpe, T, C, r0, r1);
  });
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C) {
  backward(add_row_f32, dwte, dwpe, dout, tokens, B, T, C);
}
void embedding_backward(float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C) {
  backward(add_row_bf16, dwte, dwpe, dout, tokens, B, T, C);
}

}  // namespace gpumix::kernels::cpu
