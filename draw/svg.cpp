#include "draw/svg.h"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace gpumix::draw {

std::string svg_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '\'') o += "&apos;";
    else o += c;
  }
  return o;
}

void svg_begin(std::string& o, double width, double height) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' font-family='sans-serif' "
                "font-size='11'>\n",
                width, height);
  o += buf;
  svg_rect(o, 0, 0, width, height, "white");
}

void svg_end(std::string& o) { o += "</svg>\n"; }

void svg_rect(std::string& o, double x, double y, double w, double h, const char* fill, const char* extra) {
  if (w <= 0) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='%s'%s/>\n", x, y, w, h,
                fill, extra);
  o += buf;
}

void svg_text(std::string& o, double x, double y, const std::string& s, const char* extra) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "<text x='%.1f' y='%.1f'%s>", x, y, extra);
  o += buf + svg_escape(s) + "</text>\n";
}

void svg_line(std::string& o, double x1, double y1, double x2, double y2, const char* stroke, const char* extra) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "<line x1='%.2f' y1='%.2f' x2='%.2f' y2='%.2f' stroke='%s'%s/>\n", x1, y1, x2, y2,
                stroke, extra);
  o += buf;
}

void svg_polyline(std::string& o, const std::vector<std::pair<double, double>>& points, const char* stroke,
                  const char* extra) {
  if (points.empty()) return;
  o += "<polyline fill='none' stroke='";
  o += stroke;
  o += "'";
  o += extra;
  o += " points='";
  char buf[64];
  for (const auto& [x, y] : points) {
    std::snprintf(buf, sizeof buf, "%.2f,%.2f ", x, y);
    o += buf;
  }
  o.back() = '\'';
  o += "/>\n";
}

void write_svg_file(const std::string& path, const std::string& svg) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + path + "' for writing");
  out << svg;
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + path + "' (is the disk full?)");
}

}  // namespace gpumix::draw
