#include "draw/roofline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "draw/svg.h"

namespace gpumix::draw {

std::string roofline_svg(const std::vector<RooflineDevice>& cols, const std::string& title) {
  const double W = 980, H = 660, left = 80, top = 60, right = 230, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  int undrawn = 0;
  for (const RooflineDevice& r : cols) {
    const double ridge = r.peak_flops / r.bandwidth_Bps;
    xmin = std::min(xmin, ridge / 100);
    xmax = std::max(xmax, ridge * 10);
    ymax = std::max(ymax, r.peak_flops);
    for (const RooflineKernel& k : r.kernels) {
      if (k.flops <= 0 || k.median_s <= 0) {
        undrawn++;
        continue;
      }
      const double ai = k.flops / k.bytes, rate = k.flops / k.median_s;
      xmin = std::min(xmin, ai);
      xmax = std::max(xmax, ai);
      ymin = std::min(ymin, rate);
      ymax = std::max(ymax, rate);
    }
  }
  if (ymin > ymax) ymin = ymax / 1e3;
  const double lx0 = std::floor(std::log10(xmin)), lx1 = std::ceil(std::log10(xmax));
  const double ly0 = std::floor(std::log10(ymin)), ly1 = std::ceil(std::log10(ymax * 1.5));
  auto X = [&](double v) { return left + (std::log10(v) - lx0) / (lx1 - lx0) * pw; };
  auto Y = [&](double v) { return top + ph - (std::log10(v) - ly0) / (ly1 - ly0) * ph; };
  std::string o;
  svg_begin(o, W, H);
  svg_text(o, left, 24, title, " font-size='15' font-weight='bold'");
  svg_text(o, left, 42,
                 str("achieved FLOP/s against arithmetic intensity (log-log); lines: each device's measured roofs "
                     "(copy bandwidth, GEMM peak)", undrawn ? str("; ", undrawn, " kernels without arithmetic (fills) not drawn") : ""),
                 " fill='#555'");
  for (double e = lx0; e <= lx1; e += 1) {
    svg_line(o, X(std::pow(10, e)), top, X(std::pow(10, e)), top + ph, "#e5e5e5");
    svg_text(o, X(std::pow(10, e)) - 12, top + ph + 16, format_si(std::pow(10, e), ""));
  }
  for (double e = ly0; e <= ly1; e += 1) {
    svg_line(o, left, Y(std::pow(10, e)), left + pw, Y(std::pow(10, e)), "#e5e5e5");
    svg_text(o, left - 60, Y(std::pow(10, e)) + 4, format_si(std::pow(10, e), "FLOP/s"));
  }
  svg_rect(o, left, top, pw, ph, "none", " stroke='black'");
  svg_text(o, left + pw / 2 - 110, H - 18, "arithmetic intensity (FLOP per byte stored)");
  const char* colors[] = {"#3b6fb6", "#c0392b", "#4c9a2a", "#e8a33d", "#8e5fb5", "#2aa198"};
  double legend_y = top + 10;
  for (size_t i = 0; i < cols.size(); ++i) {
    const char* color = colors[i % 6];
    const RooflineDevice& r = cols[i];
    const double ridge = r.peak_flops / r.bandwidth_Bps, x0 = std::pow(10, lx0), x1 = std::pow(10, lx1);
    const double xs = std::max(x0, std::pow(10, ly0) / r.bandwidth_Bps);
    svg_polyline(o, {{X(xs), Y(xs * r.bandwidth_Bps)}, {X(ridge), Y(r.peak_flops)}, {X(x1), Y(r.peak_flops)}},
                       color, " stroke-width='2'");
    for (const RooflineKernel& k : r.kernels) {
      if (k.flops <= 0 || k.median_s <= 0) continue;
      const double px = X(k.flops / k.bytes), py = Y(k.flops / k.median_s);
      char circle[200];
      std::snprintf(circle, sizeof circle, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'/>\n", px, py, color);
      o += circle;
      svg_text(o, px + 5, py - 3, k.role, str(" font-size='9' fill='", color, "'").c_str());
    }
    svg_rect(o, left + pw + 14, legend_y - 9, 10, 10, color);
    svg_text(o, left + pw + 28, legend_y, cols[i].name, " font-weight='bold'");
    svg_text(o, left + pw + 28, legend_y + 14, str("copy ", format_si(r.bandwidth_Bps, "B/s")));
    svg_text(o, left + pw + 28, legend_y + 28, str("GEMM ", format_si(r.peak_flops, "FLOP/s")));
    const std::string& note = r.note;
    if (!note.empty()) svg_text(o, left + pw + 28, legend_y + 42, note, " fill='#c0392b'");
    legend_y += note.empty() ? 48 : 62;
  }
  svg_end(o);
  return o;
}

}  // namespace gpumix::draw
