// A roofline picture (`gpumix bench --svg`, `gpumix bench compare --svg`): per device its
// measured roofs (copy bandwidth, GEMM peak) as lines and each kernel of the step as a point,
// achieved FLOP/s against arithmetic intensity, log-log, with a legend.
#pragma once

#include <string>
#include <vector>

namespace gpumix::draw {

struct RooflineKernel {
  std::string role;  // the point's label ("qkv.fwd", ...)
  double flops = 0, bytes = 0, median_s = 0;  // per call; no point unless flops and median_s > 0
};

struct RooflineDevice {
  std::string name;          // the legend's label
  double bandwidth_Bps = 0;  // the roofs: best streaming copy,
  double peak_flops = 0;     // best GEMM
  std::vector<RooflineKernel> kernels;
  std::string note;          // a red legend line ("" : none): what an emulated device's numbers are not
};

std::string roofline_svg(const std::vector<RooflineDevice>& devices, const std::string& title);

}  // namespace gpumix::draw
