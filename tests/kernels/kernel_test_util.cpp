#include "kernel_test_util.h"

#include <cfloat>
#include <cmath>
#include <random>

#include "kernels/half_types.h"
#include "kernels/cpu/isa.h"

namespace gpumix::kernels::test {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double fp32_rtol(int64_t k) { return 8.0 * FLT_EPSILON * std::sqrt((double)std::max<int64_t>(k, 1)); }

double bf16_out_rtol(int64_t k) { return std::ldexp(1.0, -8) + fp32_rtol(k); }

double bf16_rtol(int64_t k) {
  return std::ldexp(1.0, -8) * (1.0 + 2.0 * std::sqrt((double)std::max<int64_t>(k, 1))) + fp32_rtol(k);
}

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> h(x.size());
  for (size_t i = 0; i < x.size(); i++) h[i] = bf16(x[i]);
  return h;
}

std::vector<float> to_f32(const std::vector<bf16>& h) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); i++) x[i] = (float)(h[i]);
  return x;
}

std::vector<bf16> random_bf16(size_t n, uint32_t seed, float lo, float hi) {
  return to_bf16(random_floats(n, seed, lo, hi));
}

void for_each_isa(const std::function<void()>& f) {
  using cpu::Isa;
  const Isa before = cpu::cpu_isa();
  for (Isa isa : {Isa::portable, Isa::avx512, Isa::avx512_bf16}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_cpu_isa(isa);
    SCOPED_TRACE(std::string("isa ") + cpu::isa_name(isa));
    f();
  }
  cpu::set_cpu_isa(before);
}

::testing::AssertionResult all_close(const char* what, const float* fast, const float* ref,
                                     int64_t n, double rtol) {
  double sq = 0.0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; i++) {
    if (std::isfinite(ref[i])) {
      sq += (double)ref[i] * ref[i];
      finite++;
    }
  }
  const double atol = rtol * (finite ? std::sqrt(sq / finite) : 0.0);
  int64_t worst = -1;
  double worst_excess = 0.0, worst_allow = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double f = fast[i], r = ref[i];
    double excess;
    double allow = atol + rtol * std::fabs(r);
    if (std::isnan(r) || std::isnan(f)) {
      excess = std::isnan(r) && std::isnan(f) ? 0.0 : INFINITY;
    } else if (std::isinf(r) || std::isinf(f)) {
      excess = f == r ? 0.0 : INFINITY;
    } else {
      excess = std::fabs(f - r) - allow;
    }
    if (excess > 0.0 && (worst < 0 || excess > worst_excess)) {
      worst = i;
      worst_excess = excess;
      worst_allow = allow;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = std::fabs((double)fast[i] - ref[i]);
    if (!(d <= atol + rtol * std::fabs((double)ref[i])) && !(fast[i] == ref[i]) &&
        !(std::isnan(fast[i]) && std::isnan(ref[i])))
      bad++;
  }
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << n << " elements out of tolerance; worst [" << worst
         << "]: got " << fast[worst] << ", reference " << ref[worst] << ", |diff| "
         << std::fabs((double)fast[worst] - ref[worst]) << " exceeds the allowance "
         << worst_allow << " by " << worst_excess << " (x" << (worst_excess + worst_allow) / worst_allow
         << "); allowance = atol + rtol*|ref|, rtol " << rtol << ", atol " << atol;
}

}  // namespace gpumix::kernels::test
