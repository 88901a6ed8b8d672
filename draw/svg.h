// The few SVG elements GPUMix's pictures are drawn with (plans, runs), appended to a string:
// plain text, no dependency, readable by any browser. Coordinates in pixels, y downwards.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gpumix::draw {

// `s` with <, > and & escaped, for text and attribute values.
std::string svg_escape(const std::string& s);

// The opening <svg> element (sans-serif, 11 px) and a white background.
void svg_begin(std::string& o, double width, double height);
void svg_end(std::string& o);

// `extra`: further attributes, written as they are (" stroke='black'").
void svg_rect(std::string& o, double x, double y, double w, double h, const char* fill, const char* extra = "");
void svg_text(std::string& o, double x, double y, const std::string& s, const char* extra = "");
void svg_line(std::string& o, double x1, double y1, double x2, double y2, const char* stroke,
              const char* extra = "");
void svg_polyline(std::string& o, const std::vector<std::pair<double, double>>& points, const char* stroke,
                  const char* extra = "");

// Writes `svg` to `path`; throws std::runtime_error naming the file when it cannot.
void write_svg_file(const std::string& path, const std::string& svg);

}  // namespace gpumix::draw
