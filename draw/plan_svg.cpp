#include "draw/plan_svg.h"

#include <algorithm>
#include <cstdio>

#include "dist/plan/json_fields.h"
#include "draw/svg.h"

namespace gpumix::draw {

using dist::Plan;
using dist::RankPlan;
using dist::RankWork;

namespace {

struct Row {
  const RankPlan* rank;
  int first, last;  // rank range
};

bool same_row(const RankPlan& a, const RankPlan& b) {
  const RankWork &x = a.work, &y = b.work;
  return a.device == b.device && x.batch == y.batch && x.micro_batch == y.micro_batch && x.offload == y.offload &&
         std::abs(x.share - y.share) <= 1e-12 && a.capacity == b.capacity;
}

std::vector<Row> rows_of(const Plan& p) {
  std::vector<Row> rows;
  for (size_t i = 0; i < p.ranks.size(); i++) {
    if (!rows.empty() && same_row(*rows.back().rank, p.ranks[i])) rows.back().last = (int)i;
    else rows.push_back({&p.ranks[i], (int)i, (int)i});
  }
  return rows;
}

}  // namespace

std::string plans_svg(const std::vector<Plan>& plans, const std::string& title) {
  const double label_w = 230, time_w = 420, gap = 40, mem_w = 300, row_h = 18, pad = 20;
  const double width = pad + label_w + time_w + gap + mem_w + 120;
  double max_step = 0, max_cap = 0;
  for (const Plan& p : plans) {
    max_step = std::max(max_step, p.predicted.step_s);
    for (const RankPlan& r : p.ranks) max_cap = std::max({max_cap, r.capacity, r.memory.total()});
  }
  if (max_step <= 0) max_step = 1;
  if (max_cap <= 0) max_cap = 1;
  double height = 70;
  for (const Plan& p : plans) height += 50 + rows_of(p).size() * row_h;
  std::string o;
  char buf[512];
  svg_begin(o, width, height);
  svg_text(o, pad, 22, title, " font-size='15' font-weight='bold'");
  // Legend.
  const char* colors[] = {"#4c9a2a", "#e8a33d", "#d9d9d9", "#3b6fb6", "#8e5fb5", "#2aa198", "#b5a06a"};
  const char* names[] = {"compute", "communication", "idle", "state", "gathered", "activations", "buffers"};
  double lx = pad;
  for (int k = 0; k < 7; k++) {
    svg_rect(o, lx, 32, 10, 10, colors[k]);
    svg_text(o, lx + 14, 41, names[k]);
    lx += 14 + 7.0 * std::string(names[k]).size() + 16;
  }
  double y = 70;
  for (const Plan& p : plans) {
    std::snprintf(buf, sizeof buf, "%s: step %.3f s, %.0f tokens/s%s", p.planner.c_str(), p.predicted.step_s,
                  p.predicted.tokens_per_s, p.fits() ? "" : "  - OUT OF MEMORY");
    const std::string head = buf;
    svg_text(o, pad, y + 4, head, p.fits() ? " font-weight='bold'" : " font-weight='bold' fill='#c0392b'");
    svg_text(o, pad + label_w, y + 20, "time over one step", " fill='#555'");
    svg_text(o, pad + label_w + time_w + gap, y + 20, "memory vs capacity", " fill='#555'");
    y += 28;
    for (const Row& row : rows_of(p)) {
      const RankPlan& r = *row.rank;
      std::string label = row.first == row.last ? "rank " + std::to_string(row.first)
                                                : "ranks " + std::to_string(row.first) + "-" + std::to_string(row.last);
      std::snprintf(buf, sizeof buf, " %s b=%lld m=%lld r=%.3f%s", r.device.c_str(), (long long)r.work.batch,
                    (long long)r.work.micro_batch, r.work.share, r.left_out() ? " (out)" : r.work.offload ? " off" : "");
      label += buf;
      svg_text(o, pad, y + row_h - 6, label.substr(0, 42));
      double x = pad + label_w;
      const double sc = time_w / max_step;
      if (r.left_out()) {
        svg_rect(o, x, y + 2, p.predicted.step_s * sc, row_h - 5, "#f2f2f2");
      } else {
        svg_rect(o, x, y + 2, r.busy_s * sc, row_h - 5, colors[0]);
        svg_rect(o, x + r.busy_s * sc, y + 2, r.comm_s * sc, row_h - 5, colors[1]);
        svg_rect(o, x + (r.busy_s + r.comm_s) * sc, y + 2, r.idle_s * sc, row_h - 5, colors[2]);
      }
      x = pad + label_w + time_w + gap;
      const double ms = mem_w / max_cap;
      const double parts[] = {r.memory.state, r.memory.gathered, r.memory.activations(), r.memory.buffers()};
      double acc = 0;
      for (int k = 0; k < 4; k++) {
        svg_rect(o, x + acc * ms, y + 2, parts[k] * ms, row_h - 5, colors[3 + k]);
        acc += parts[k];
      }
      if (acc > r.capacity) svg_rect(o, x + r.capacity * ms, y + 2, (acc - r.capacity) * ms, row_h - 5, "#c0392b", " fill-opacity='0.6'");
      svg_rect(o, x, y + 1, r.capacity * ms, row_h - 3, "none", " stroke='black' stroke-width='1'");
      std::snprintf(buf, sizeof buf, "%s / %s", dist::format_bytes(acc).c_str(), dist::format_bytes(r.capacity).c_str());
      svg_text(o, x + mem_w + 6, y + row_h - 6, buf, acc > r.capacity ? " fill='#c0392b'" : "");
      y += row_h;
    }
    y += 22;
  }
  svg_end(o);
  return o;
}

void write_plans_svg(const std::vector<Plan>& plans, const std::string& title, const std::string& path) {
  write_svg_file(path, plans_svg(plans, title));
}

}  // namespace gpumix::draw
