// Internal to kernels/cpu and its tests: what oneDNN chose for the GEMMs of matmul.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace gpumix::kernels::cpu {

// The operand and result types of a GEMM.
enum class GemmKind : int { f32 = 0, bf16_to_f32 = 1, bf16_to_bf16 = 2 };
const char* gemm_kind_name(GemmKind kind);

// oneDNN's name of the implementation it picked for the last primitive created of that
// kind (e.g. "brg:avx512_core_bf16"), "" before the first. GPUMIX_VERBOSE=1 also prints
// it to stderr once per kind.
std::string gemm_impl_info(GemmKind kind);
// Number of distinct GEMM primitives (shape, types, layouts, alpha, beta, threads) cached.
int64_t gemm_cached_primitives();

// A product with a transposed A of more rows than this runs in blocks of this many rows of
// C: oneDNN 2.6 ran the LM head's weight gradient (50,257 x 768 x 8,192, bf16) at 228 GFLOP/s
// whole and 390-415 in blocks of 2k-40k rows (1024-deep: 330 against 400).
constexpr int kGemmTransARowBlock = 32768;

}  // namespace gpumix::kernels::cpu
