// GEMM through oneDNN (fp32, and bf16 operands with fp32 accumulation and an fp32 or bf16
// result), the linear layer, and bias kernels.
//
// A oneDNN primitive is costly to create (far more than a small GEMM) and cheap to run, so
// each one is created once per (types, shape, layouts, alpha, beta, bias, threads) and kept
// in a process-wide cache. Several threads (ranks) may run one primitive at once: each
// passes its own scratchpad (user scratchpad mode; a primitive's library-managed
// scratchpad would be shared by them, and the products garbled) and its own stream. Transposes and
// leading dimensions are strides of the memory descriptors: nothing is copied here (oneDNN
// packs internally). beta != 0 is a sum post-op, which reads C once and, for a bf16 C,
// rounds old + new once; beta == 0 never reads C (it may hold NaN), as BLAS. Where oneDNN
// has no bf16 matmul for the CPU (2.6 has none below AVX-512), a bf16 GEMM widens its
// operands to fp32 and runs the fp32 one: the same result, only slower.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"

namespace gpumix::kernels::cpu {

namespace {

using dnnl::memory;
using dims = memory::dims;

struct GemmKey {
  GemmKind kind;
  bool trans_a, trans_b, bias;
  int m, n, k, lda, ldb, ldc, batch;
  int64_t stride_a, stride_b, stride_c;
  float alpha, beta;
  int threads;  // oneDNN plans its work for the calling thread's OpenMP team size
  auto tie() const {
    return std::tie(kind, trans_a, trans_b, bias, m, n, k, lda, ldb, ldc, batch, stride_a,
                    stride_b, stride_c, alpha, beta, threads);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

struct GemmPrimitive {
  bool widen = false;  // oneDNN cannot do it in bf16 here: widen to fp32 instead
  dnnl::matmul matmul;
  memory::desc a, b, c, bias, scratchpad;
};

struct Cache {
  std::mutex mu;
  std::map<GemmKey, std::shared_ptr<const GemmPrimitive>> prims;
  std::string impl[3];     // by GemmKind: the last implementation picked
  bool logged[3] = {};
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: GEMMs may run during static destruction
  return *c;
}

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("GPUMIX_VERBOSE");
    return e && *e && std::string(e) != "0";
  }();
  return v;
}

// op(X) (rows, cols) of a row-major X with leading dimension ld (X is (cols, rows) when
// trans); batch matrices at `stride` elements, stride 0 meaning one matrix for all.
memory::desc matrix_desc(memory::data_type type, int batch, int64_t stride, int rows, int cols,
                         int ld, bool trans) {
  const memory::dim r_stride = trans ? 1 : ld, c_stride = trans ? ld : 1;
  if (batch == 1) return memory::desc(dims{rows, cols}, type, dims{r_stride, c_stride});
  const bool broadcast = stride == 0;
  return memory::desc(dims{broadcast ? 1 : batch, rows, cols}, type,
                      dims{broadcast ? (memory::dim)rows * cols : stride, r_stride, c_stride});
}

std::shared_ptr<const GemmPrimitive> create(const GemmKey& key) {
  const auto in_type = key.kind == GemmKind::f32 ? memory::data_type::f32 : memory::data_type::bf16;
  const auto out_type = key.kind == GemmKind::bf16_to_bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  auto p = std::make_shared<GemmPrimitive>();
  p->a = matrix_desc(in_type, key.batch, key.stride_a, key.m, key.k, key.lda, key.trans_a);
  p->b = matrix_desc(in_type, key.batch, key.stride_b, key.k, key.n, key.ldb, key.trans_b);
  p->c = matrix_desc(out_type, key.batch, key.stride_c, key.m, key.n, key.ldc, false);
  if (key.bias)
    p->bias = key.batch == 1 ? memory::desc(dims{1, key.n}, in_type, dims{key.n, 1})
                             : memory::desc(dims{1, 1, key.n}, in_type, dims{key.n, key.n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    const auto desc = key.bias ? dnnl::matmul::desc(p->a, p->b, p->bias, p->c)
                               : dnnl::matmul::desc(p->a, p->b, p->c);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine());
    p->matmul = dnnl::matmul(pd);
    p->scratchpad = pd.scratchpad_desc();
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    c.impl[(int)key.kind] = pd.impl_info_str();
    if (verbose() && !c.logged[(int)key.kind]) {
      c.logged[(int)key.kind] = true;
      std::fprintf(stderr, "gpumix: oneDNN %d.%d matmul %s (first: %d x %d x %d, batch %d, %d threads): %s\n",
                   dnnl_version()->major, dnnl_version()->minor, gemm_kind_name(key.kind), key.m,
                   key.n, key.k, key.batch, key.threads, pd.impl_info_str());
    }
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented && key.kind != GemmKind::f32) {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);
      c.impl[(int)key.kind] = "widened to f32 (oneDNN has no bf16 matmul for this CPU)";
      if (verbose() && !c.logged[(int)key.kind]) {
        c.logged[(int)key.kind] = true;
        std::fprintf(stderr, "gpumix: oneDNN has no %s matmul for this CPU: widening to f32\n",
                     gemm_kind_name(key.kind));
      }
      p->widen = true;
      return p;
    }
    throw std::runtime_error(std::string("gemm: oneDNN cannot create a ") + gemm_kind_name(key.kind) +
                             " matmul for m=" + std::to_string(key.m) + " n=" + std::to_string(key.n) +
                             " k=" + std::to_string(key.k) + " batch=" + std::to_string(key.batch) +
                             ": " + e.what());
  }
  return p;
}

std::shared_ptr<const GemmPrimitive> lookup(const GemmKey& key) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.prims.find(key);
    if (it != c.prims.end()) return it->second;
  }
  auto p = create(key);  // outside the lock: creation takes long; a racing twin is harmless
  std::lock_guard<std::mutex> lock(c.mu);
  return c.prims.emplace(key, std::move(p)).first->second;
}

// A row-major operand's leading dimension must span its rows.
void check_ld(const char* what, int ld, int row_len, const char* operand, bool trans) {
  if (ld < std::max(row_len, 1))
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(ld) +
                                " is smaller than a stored row of " + operand + (trans ? " (transposed)" : "") +
                                ", " + std::to_string(row_len) + " elements; pass " + what +
                                " >= " + std::to_string(std::max(row_len, 1)));
}

// C (m,n) = beta * C for k == 0 (an empty sum), where libraries differ; beta == 0 writes
// zeros without reading C.
template <class T>
void scale_c(int m, int n, float beta, T* c, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      T& x = c[(int64_t)i * ldc + j];
      x = from_f32<T>(beta == 0.0f ? 0.0f : beta * to_f32(x));
    }
}

template <class In, class Out>
void gemm_any(GemmKind kind, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              const In* a, int lda, const In* b, int ldb, float beta, Out* c, int ldc, int batch,
              int64_t stride_a, int64_t stride_b, int64_t stride_c, const In* bias);

// Elements that `count` matrices of `rows` stored rows of `cols` span.
int64_t span(int count, int64_t stride, int rows, int cols, int ld) {
  return (int64_t)(count - 1) * stride + (int64_t)(rows - 1) * ld + cols;
}

std::vector<float> widened(const bf16* p, int64_t n) {
  std::vector<float> v(n);
  bf16_to_f32(v.data(), p, n);
  return v;
}

// The bf16 GEMM as the fp32 one on widened copies; a bf16 C is rounded once, element by
// element of its m x n matrices (its padding is left alone).
template <class Out>
void gemm_widened(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
                  int lda, const bf16* b, int ldb, float beta, Out* c, int ldc, int batch,
                  int64_t stride_a, int64_t stride_b, int64_t stride_c, const bf16* bias) {
  const auto a32 = widened(a, span(stride_a ? batch : 1, stride_a, trans_a ? k : m, trans_a ? m : k, lda));
  const auto b32 = widened(b, span(stride_b ? batch : 1, stride_b, trans_b ? n : k, trans_b ? k : n, ldb));
  const auto bias32 = bias ? widened(bias, n) : std::vector<float>();
  if constexpr (sizeof(Out) == 4) {
    gemm_any(GemmKind::f32, trans_a, trans_b, m, n, k, alpha, a32.data(), lda, b32.data(), ldb,
             beta, c, ldc, batch, stride_a, stride_b, stride_c, bias ? bias32.data() : nullptr);
  } else {
    const int64_t c_span = span(batch, stride_c, m, n, ldc);
    std::vector<float> c32 = beta != 0.0f ? widened(c, c_span) : std::vector<float>(c_span);
    gemm_any(GemmKind::f32, trans_a, trans_b, m, n, k, alpha, a32.data(), lda, b32.data(), ldb,
             beta, c32.data(), ldc, batch, stride_a, stride_b, stride_c, bias ? bias32.data() : nullptr);
    for (int p = 0; p < batch; p++)
      for (int i = 0; i < m; i++) {
        const int64_t row = p * stride_c + (int64_t)i * ldc;
        f32_to_bf16(c + row, c32.data() + row, n);
      }
  }
}

template <class In, class Out>
void gemm_any(GemmKind kind, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              const In* a, int lda, const In* b, int ldb, float beta, Out* c, int ldc, int batch,
              int64_t stride_a, int64_t stride_b, int64_t stride_c, const In* bias) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  check_ld("ldc", ldc, n, "C", false);
  if (k <= 0) {
    for (int p = 0; p < batch; p++) scale_c(m, n, beta, c + p * stride_c, ldc);
    return;
  }
  check_ld("lda", lda, trans_a ? m : k, "A", trans_a);
  check_ld("ldb", ldb, trans_b ? k : n, "B", trans_b);
  if (trans_a && batch == 1 && m > kGemmTransARowBlock) {
    for (int i0 = 0; i0 < m; i0 += kGemmTransARowBlock)  // op(A)'s rows are A's columns
      gemm_any(kind, trans_a, trans_b, std::min(kGemmTransARowBlock, m - i0), n, k, alpha, a + i0, lda, b, ldb,
               beta, c + (int64_t)i0 * ldc, ldc, 1, (int64_t)0, (int64_t)0, (int64_t)0, bias);
    return;
  }
  if (batch > 1 && stride_c == 0) {
    // Every product lands on the same C: run them in order, as the reference does.
    for (int p = 0; p < batch; p++)
      gemm_any(kind, trans_a, trans_b, m, n, k, alpha, a + p * stride_a, lda, b + p * stride_b,
               ldb, beta, c, ldc, 1, (int64_t)0, (int64_t)0, (int64_t)0, bias);
    return;
  }
  const GemmKey key{kind, trans_a, trans_b, bias != nullptr, m, n, k, lda, ldb, ldc, batch,
                    batch > 1 ? stride_a : 0, batch > 1 ? stride_b : 0, batch > 1 ? stride_c : 0,
                    alpha, beta, omp_get_max_threads()};
  const auto p = lookup(key);
  if constexpr (sizeof(In) == 2) {
    if (p->widen) {
      gemm_widened(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, stride_a,
                   stride_b, stride_c, bias);
      return;
    }
  }
  const dnnl::engine& eng = engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(p->a, eng, const_cast<In*>(a))},
      {DNNL_ARG_WEIGHTS, memory(p->b, eng, const_cast<In*>(b))},
      {DNNL_ARG_DST, memory(p->c, eng, c)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p->bias, eng, const_cast<In*>(bias)));
  struct alignas(64) Line {
    char bytes[64];
  };
  thread_local std::vector<Line> scratch;  // cache-line aligned, grown to the largest need
  const size_t scratch_bytes = p->scratchpad.get_size();
  if (scratch.size() * 64 < scratch_bytes) scratch.resize((scratch_bytes + 63) / 64);
  args.emplace(DNNL_ARG_SCRATCHPAD, memory(p->scratchpad, eng, scratch.data()));
  thread_local dnnl::stream stream(eng);
  p->matmul.execute(stream, args);
  stream.wait();
}

}  // namespace

const char* gemm_kind_name(GemmKind kind) {
  switch (kind) {
    case GemmKind::f32: return "f32";
    case GemmKind::bf16_to_f32: return "bf16->f32";
    case GemmKind::bf16_to_bf16: return "bf16->bf16";
  }
  return "?";
}

std::string gemm_impl_info(GemmKind kind) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.impl[(int)kind];
}

int64_t gemm_cached_primitives() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return (int64_t)c.prims.size();
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  gemm_any(GemmKind::f32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch,
           stride_a, stride_b, stride_c, (const float*)nullptr);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, bf16* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  gemm_any(GemmKind::bf16_to_bf16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
           ldc, batch, stride_a, stride_b, stride_c, (const bf16*)nullptr);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a,
          int lda, const bf16* b, int ldb, float beta, float* c, int ldc, int batch,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  gemm_any(GemmKind::bf16_to_f32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
           ldc, batch, stride_a, stride_b, stride_c, (const bf16*)nullptr);
}

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias: oneDNN adds the bias in its epilogue.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC) {
  gemm_any(GemmKind::f32, false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, 1, 0,
           0, 0, bias);
}
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int N, int C, int OC) {
  gemm_any(GemmKind::bf16_to_bf16, false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out,
           OC, 1, 0, 0, 0, bias);
}

// dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T (OC,N) @ inp (N,C).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  if (dinp) gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) bias_backward(dbias, dout, N, OC);
}
void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC) {
  if (dinp) gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

namespace {

constexpr int64_t k_par_min = 1 << 15;
constexpr int k_chunk = 32;  // columns per task of bias_backward: two cache lines of fp32

template <class T>
GPUMIX_INLINE void bias_add_rows(T* out, const T* inp, const T* bias, int C, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    const T* x = inp + i * C;
    T* y = out + i * C;
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = from_f32<T>(to_f32(x[c]) + to_f32(bias[c]));
  }
}

// dbias += column sums of dout for the column chunks [ch0, ch1): threads own whole
// chunks, so no two write the same dbias entry; the row loop is outside so each thread
// streams through dout rows contiguously.
template <class T>
GPUMIX_INLINE void bias_backward_chunks(float* dbias, const T* dout, int N, int C, int64_t ch0, int64_t ch1) {
  for (int64_t ch = ch0; ch < ch1; ch++) {
    const int c0 = (int)ch * k_chunk, c1 = std::min(C, c0 + k_chunk);
    float acc[k_chunk] = {};
    for (int i = 0; i < N; i++) {
      const T* dy = dout + (int64_t)i * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) acc[c - c0] += to_f32(dy[c]);
    }
    for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
  }
}

GPUMIX_ISA_VARIANTS(bias_add_f32, bias_add_rows,
                    (float* o, const float* x, const float* b, int C, int64_t i0, int64_t i1), (o, x, b, C, i0, i1))
GPUMIX_ISA_VARIANTS(bias_add_bf16, bias_add_rows,
                    (bf16* o, const bf16* x, const bf16* b, int C, int64_t i0, int64_t i1),
                    (o, x, b, C, i0, i1))
GPUMIX_ISA_VARIANTS(bias_bwd_f32, bias_backward_chunks,
                    (float* db, const float* dy, int N, int C, int64_t ch0, int64_t ch1), (db, dy, N, C, ch0, ch1))
GPUMIX_ISA_VARIANTS(bias_bwd_bf16, bias_backward_chunks,
                    (float* db, const bf16* dy, int N, int C, int64_t ch0, int64_t ch1), (db, dy, N, C, ch0, ch1))

}  // namespace

void bias_add(float* out, const float* inp, const float* bias, int N, int C) {
  parallel_ranges(N, 1, (int64_t)N * C >= k_par_min, [&](int64_t i0, int64_t i1) {
    bias_add_f32(out, inp, bias, C, i0, i1);
  });
}
void bias_add(bf16* out, const bf16* inp, const bf16* bias, int N, int C) {
  parallel_ranges(N, 1, (int64_t)N * C >= k_par_min, [&](int64_t i0, int64_t i1) {
    bias_add_bf16(out, inp, bias, C, i0, i1);
  });
}

void bias_backward(float* dbias, const float* dout, int N, int C) {
  parallel_ranges((C + k_chunk - 1) / k_chunk, 1, (int64_t)N * C >= k_par_min,
                  [&](int64_t ch0, int64_t ch1) { bias_bwd_f32(dbias, dout, N, C, ch0, ch1); });
}
void bias_backward(float* dbias, const bf16* dout, int N, int C) {
  parallel_ranges((C + k_chunk - 1) / k_chunk, 1, (int64_t)N * C >= k_par_min,
                  [&](int64_t ch0, int64_t ch1) { bias_bwd_bf16(dbias, dout, N, C, ch0, ch1); });
}

}  // namespace gpumix::kernels::cpu
