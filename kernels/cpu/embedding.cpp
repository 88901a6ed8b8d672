// Token + position embedding.
#include <omp.h>

#include "kernels/cpu/cpu.h"

namespace gpumix::kernels::cpu {

namespace {
constexpr int64_t k_par_min = 1 << 14;
}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)B * T * C >= k_par_min)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float* y = out + ((int64_t)b * T + t) * C;            // (C)
      const float* e = wte + (int64_t)tokens[b * T + t] * C;  // (C)
      const float* p = wpe + (int64_t)t * C;                // (C)
#pragma omp simd
      for (int c = 0; c < C; c++) y[c] = e[c] + p[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C) {
#pragma omp parallel if ((int64_t)B * T * C >= k_par_min)
  {
    // A token may repeat anywhere in the batch, so dwte rows cannot be split by position.
    // Each thread owns the tokens equal to its id modulo the thread count and scans every
    // position for them: no two threads write one row, each row is added whole
    // (contiguous, unlike splitting by columns, which walks the large table once per
    // column chunk), and each row sums in position order, as the reference does.
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    if (dwte) {
      for (int i = 0; i < B * T; i++) {
        if (tokens[i] % nt != tid) continue;
        const float* dy = dout + (int64_t)i * C;     // (C)
        float* g = dwte + (int64_t)tokens[i] * C;    // (C)
#pragma omp simd
        for (int c = 0; c < C; c++) g[c] += dy[c];
      }
    }
    if (dwpe) {
#pragma omp for schedule(static)
      for (int t = 0; t < T; t++) {
        float* g = dwpe + (int64_t)t * C;  // (C)
        for (int b = 0; b < B; b++) {
          const float* dy = dout + ((int64_t)b * T + t) * C;  // (C)
#pragma omp simd
          for (int c = 0; c < C; c++) g[c] += dy[c];
        }
      }
    }
  }
}

}  // namespace gpumix::kernels::cpu
