// An SVG picture of plans: per planner, one row per device (consecutive ranks with the
// same device and plan share a row) with its compute / communication / idle time over one
// step (all planners on one time scale), and its memory as stacked bars (state, gathered
// parameters, activations, buffers) against its capacity (the outline; red past it).
#pragma once

#include <string>
#include <vector>

#include "dist/plan/plan.h"

namespace gpumix::draw {

std::string plans_svg(const std::vector<dist::Plan>& plans, const std::string& title);
void write_plans_svg(const std::vector<dist::Plan>& plans, const std::string& title, const std::string& path);

}  // namespace gpumix::draw
