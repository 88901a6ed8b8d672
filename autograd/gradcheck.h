// Finite-difference gradient checker (for tests): compares the tape's gradients of
// L = sum(r * f(inputs)), r a fixed random projection, with central differences of L.
//
// bf16 mode (when any input's value is bf16): the analytic gradients come from the bf16
// path (bf16 forward and backward kernels, fp32 parameter gradients); the central
// differences from f evaluated on fp32 twins of the inputs (the same, bf16-representable
// values), i.e. of the function the bf16 path approximates: bf16 forward passes are too
// coarse (2^-8 relative per rounding) to difference directly. Each probe then allows, on
// top of the fp32 allowance atol + rtol |numeric|,
//     bf16_roundings * 2^-8 * (|numeric| + rms)
// with 2^-8 bf16's unit roundoff, rms the root mean square of the numeric gradients probed
// in that input (a rounded sum is off relative to the size of its terms, not of its result)
// and bf16_roundings the bf16 roundings between the input and its gradient (forward
// outputs and backward gradients on the longest path: 2 for a single op). In bf16 mode f
// must compute from its inputs only, as it also runs on their twins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tape.h"

namespace gpumix {

struct GradCheckOptions {
  double eps = 1e-2;          // finite-difference step (inputs are O(1))
  double atol = 2e-3;         // |numeric - analytic| <= atol + rtol * |numeric| ...
  double rtol = 2e-2;         // ... fp32 forward passes limit how tight this can be
  int bf16_roundings = 2;     // bf16 mode: see above
  int max_checks_per_input = 48;  // elements probed per input (all when fewer)
  uint64_t seed = 1234;
};

struct GradCheckResult {
  bool ok = true;
  double worst_excess = 0;  // largest |error| / allowance over all probes (<= 1 passes)
  std::string report;       // the worst element per input: index, numeric, analytic
};

// f must be deterministic. Every input whose requires_grad() is true is checked.
GradCheckResult check_gradients(const RecomputeFn& f, const std::vector<Var>& inputs,
                                const GradCheckOptions& options = {});

}  // namespace gpumix
