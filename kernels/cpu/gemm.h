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

}  // namespace gpumix::kernels::cpu
