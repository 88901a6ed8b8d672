// Finite-difference gradient checker (for tests): compares the tape's gradients of
// L = sum(r * f(inputs)), r a fixed random projection, with central differences of L.
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
