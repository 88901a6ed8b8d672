// gpumix bench: the kernels of one training step on each listed device, beside the device's
// measured roofs (tools/bench.h measures; this file prints, compares and draws).
//   gpumix bench --devices cpu,cuda:0 --model gpt2 --seq 1024 --batch 8 --dtype bf16 --json a.json --svg a.svg
//   gpumix bench compare a.json b.json [--svg both.svg]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/precision.h"
#include "dist/plan/compute_dtype.h"
#include "draw/roofline.h"
#include "draw/svg.h"
#include "tools/bench.h"
#include "tools/command.h"
#include "tools/size_flag.h"

namespace {

using namespace gpumix;
using namespace gpumix::tools;
using json = nlohmann::json;

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 0.1 ? "%.1f" : s >= 0.001 ? "%.3f" : "%.4f", s * 1e3);
  return buf;
}

// A ratio to 3 significant digits: 0.327, 3.13, 1340.
std::string ratio3(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", r);
  return buf;
}

struct Figures {
  double intensity, ridge, achieved, share;  // FLOP/byte, FLOP/byte, FLOP/s or B/s, of the roof
  bool compute;
};

Figures figures(const KernelResult& k, const Roofs& r) {
  Figures f;
  f.intensity = k.bytes > 0 ? k.flops / k.bytes : 0;
  f.ridge = r.bandwidth_Bps > 0 ? r.peak_flops / r.bandwidth_Bps : 0;
  f.compute = f.intensity >= f.ridge && k.flops > 0;
  f.achieved = k.median_s > 0 ? (f.compute ? k.flops : k.bytes) / k.median_s : 0;
  f.share = k.median_s > 0 ? roof_seconds(k, r) / k.median_s : 0;
  return f;
}

std::string step_shape(const json& j) {
  const json& m = j.at("model");
  return str(m.at("name").get<std::string>(), " (L ", m.at("L").get<int>(), ", C ", m.at("C").get<int>(), ", NH ",
             m.at("NH").get<int>(), ", V ", m.at("V").get<int>(), "), T ", j.at("seq").get<int>(), ", B ",
             j.at("batch").get<int>(), ", ", j.at("dtype").get<std::string>());
}

// What an emulated device's numbers are (and are not).
std::string emulation_note(const json& d) {
  std::string note;
  if (d.value("emulated_gpu", false))
    note += "  EMULATED GPU (kernels/cuda_emulator, this build): the times are the emulator's on this CPU, "
            "never a GPU's speed\n";
  if (d.value("slowdown", 1.0) != 1.0)
    note += str("  emulated slowdown x", d.value("slowdown", 1.0),
                ": each kernel is followed by a wait of (factor - 1) x its time (core/ops.cpp), roofs included\n");
  return note;
}

void print_device(const json& run, const json& d) {
  const Roofs r = roofs_from_json(d.at("roofs"));
  std::printf("\n== %s (%s%s), %s\n", d.at("label").get<std::string>().c_str(), d.at("name").get<std::string>().c_str(),
              d.value("threads", 0) > 0 ? str(", ", d.value("threads", 0), " threads").c_str() : "",
              step_shape(run).c_str());
  std::printf("%s", emulation_note(d).c_str());
  std::printf("  roofs measured (before and after the kernels, the best): copy %s (streaming ops::scale), GEMM %s %s "
              "(ops::gemm %s); ridge %.1f FLOP/B\n",
              format_si(r.bandwidth_Bps, "B/s").c_str(), format_si(r.peak_flops, "FLOP/s").c_str(),
              run.at("dtype").get<std::string>().c_str(), r.gemm_shape.c_str(), r.peak_flops / r.bandwidth_Bps);
  if (!r.datasheet.empty())
    std::printf("  datasheet (%s, dist/plan/device_catalog): %s dense 16-bit, %s memory; measured %.0f %% and %.0f %%\n",
                r.datasheet.c_str(), format_si(r.datasheet_flops, "FLOP/s").c_str(), format_si(r.datasheet_Bps, "B/s").c_str(),
                100 * r.peak_flops / r.datasheet_flops, 100 * r.bandwidth_Bps / r.datasheet_Bps);
  else if (d.at("label").get<std::string>().rfind("cuda", 0) == 0)
    std::printf("  datasheet: this GPU is not in dist/plan/device_catalog\n");
  std::printf("\n  %-20s %5s %10s %7s %16s %8s %7s %6s  %s\n", "role", "calls", "median ms", "spread", "achieved",
              "FLOP/B", "bound", "roof", "call");
  std::vector<KernelResult> ks;
  for (const json& kj : d.at("kernels")) ks.push_back(kernel_from_json(kj));
  for (const KernelResult& k : ks) {
    if (!k.skipped.empty()) {
      std::printf("  %-20s %5d  skipped: %s\n", k.role.c_str(), k.per_step, k.skipped.c_str());
      continue;
    }
    const Figures f = figures(k, r);
    const double spread = k.median_s > 0 ? (k.max_s - k.min_s) / 2 / k.median_s : 0;
    std::printf("  %-20s %5d %10s %6.0f%% %16s %8.2f %7s %5.0f%%  %s\n", k.role.c_str(), k.per_step, ms(k.median_s).c_str(),
                100 * spread, format_si(f.achieved, f.compute ? "FLOP/s" : "B/s").c_str(), f.intensity,
                f.compute ? "compute" : "memory", 100 * f.share, k.what.c_str());
  }

  int above = 0;
  for (const KernelResult& k : ks) above += k.median_s > 0 && figures(k, r).share > 1.05;
  if (above)
    std::printf("  %d kernel(s) above 100 %% of a roof: their data sat in a cache the copy's did not fit, or other "
                "work on the machine lowered the roof (measured before and after the kernels, the best kept)\n",
                above);

  // The step: calls x median, largest first; and what it would take at the roofs.
  std::sort(ks.begin(), ks.end(), [](const KernelResult& a, const KernelResult& b) {
    return a.per_step * a.median_s > b.per_step * b.median_s;
  });
  double step = 0, at_roof = 0, block = 0;
  for (const KernelResult& k : ks) {
    step += k.per_step * k.median_s;
    at_roof += k.per_step * (k.median_s > 0 ? roof_seconds(k, r) : 0);
    block += k.per_block * k.median_s;
  }
  std::printf("\n  step breakdown (calls x median; collectives apart):\n  %-20s %10s %7s %12s %12s\n", "role",
              "ms/step", "share", "at roof ms", "saved at roof");
  for (const KernelResult& k : ks) {
    if (k.per_step == 0 || k.median_s <= 0) continue;
    const double t = k.per_step * k.median_s, tr = k.per_step * roof_seconds(k, r);
    std::printf("  %-20s %10s %6.1f%% %12s %11.1f%%\n", k.role.c_str(), ms(t).c_str(), step > 0 ? 100 * t / step : 0,
                ms(tr).c_str(), step > 0 ? 100 * (t - tr) / step : 0);
  }
  std::printf("  step: %s ms measured, %s ms if every kernel reached its roof (the step at %.0f %% of its roofs); "
              "one block forward + backward: %s ms\n",
              ms(step).c_str(), ms(at_roof).c_str(), step > 0 ? 100 * at_roof / step : 0, ms(block).c_str());
}

void print_run(const json& run) {
  const json& m = run.at("machine");
  std::printf("gpumix bench: %s on %s (%s), build %s, load %s -> %s\n", step_shape(run).c_str(),
              m.at("hostname").get<std::string>().c_str(), m.at("cpu_model").get<std::string>().c_str(),
              run.at("build").at("git_describe").get<std::string>().c_str(), run.at("load_average_start").dump().c_str(),
              run.at("load_average_end").dump().c_str());
  for (const json& d : run.at("devices")) print_device(run, d);
  if (run.contains("collectives_note")) {
    std::printf("\ncollectives: %s\n", run["collectives_note"].get<std::string>().c_str());
    return;
  }
  std::printf("\ncollectives (threads of this process, one rank per device; bus bytes = (n-1)/n of the buffer):\n");
  std::printf("  %-22s %5s %10s %7s %14s  %s\n", "role", "calls", "median ms", "spread", "bus rate", "call");
  for (const json& kj : run.at("collectives")) {
    const KernelResult k = kernel_from_json(kj);
    std::printf("  %-22s %5d %10s %6.0f%% %14s  %s\n", k.role.c_str(), k.per_step, ms(k.median_s).c_str(),
                k.median_s > 0 ? 100 * (k.max_s - k.min_s) / 2 / k.median_s : 0,
                format_si(k.median_s > 0 ? k.bytes / k.median_s : 0, "B/s").c_str(), k.what.c_str());
  }
}

// ---- the roofline picture ----------------------------------------------------------------

struct Column {
  std::string name;  // "a.json: cpu" or "cpu"
  json run, device;
};

// The roofline picture's devices (draw/roofline.h) from the files' columns.
std::vector<draw::RooflineDevice> roofline_devices(const std::vector<Column>& cols) {
  std::vector<draw::RooflineDevice> out;
  for (const Column& c : cols) {
    const Roofs r = roofs_from_json(c.device.at("roofs"));
    draw::RooflineDevice d;
    d.name = c.name;
    d.bandwidth_Bps = r.bandwidth_Bps;
    d.peak_flops = r.peak_flops;
    for (const json& kj : c.device.at("kernels")) {
      const KernelResult k = kernel_from_json(kj);
      d.kernels.push_back({k.role, k.flops, k.bytes, k.median_s});
    }
    d.note = c.device.value("emulated_gpu", false) ? "emulated GPU: not a speed"
             : c.device.value("slowdown", 1.0) != 1.0 ? str("emulated slowdown x", c.device.value("slowdown", 1.0))
                                                       : "";
    out.push_back(std::move(d));
  }
  return out;
}

// ---- compare ---------------------------------------------------------------------------

json read_bench_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot open '" + path + "'; give a file written by `gpumix bench --json`");
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument("'" + path + "' is not JSON (" + e.what() + "); give a file written by `gpumix bench --json`");
  }
  if (!j.is_object() || !j.contains("gpumix_bench") || !j.contains("devices") || !j["devices"].is_array())
    throw std::invalid_argument("'" + path + "' is JSON but not a `gpumix bench --json` file (no \"gpumix_bench\" and "
                                "\"devices\"); give a file written by `gpumix bench --json`");
  try {  // every field compare reads, checked once here so that a damaged file names itself
    step_shape(j);
    for (const json& d : j["devices"]) {
      roofs_from_json(d.at("roofs"));
      for (const json& k : d.at("kernels")) kernel_from_json(k);
      d.at("label").get<std::string>();
    }
  } catch (const std::exception& e) {
    throw std::invalid_argument("'" + path + "' is not a complete `gpumix bench --json` file (" + e.what() +
                                "); write it again with `gpumix bench --json`");
  }
  return j;
}

std::vector<Column> columns_of(const std::vector<std::string>& files, const std::vector<json>& runs) {
  std::vector<Column> cols;
  for (size_t f = 0; f < files.size(); ++f)
    for (const json& d : runs[f].at("devices"))
      cols.push_back({files[f] + ": " + d.at("label").get<std::string>(), runs[f], d});
  return cols;
}

int cmd_compare(int argc, char** argv) {
  CLI::App app{"Compare `gpumix bench --json` files kernel by kernel", "gpumix bench compare"};
  std::vector<std::string> files;
  std::string svg_path;
  app.add_option("files", files, "two or more files written by gpumix bench --json (the first is the base)")->required();
  app.add_option("--svg", svg_path, "also draw every device of the files in one roofline picture");
  CLI11_PARSE(app, argc, argv);
  std::vector<json> runs;
  for (const std::string& f : files) runs.push_back(read_bench_file(f));
  const std::vector<Column> cols = columns_of(files, runs);
  if (cols.size() < 2)
    throw std::invalid_argument(str("compare needs two devices at least, the files hold ", cols.size(),
                                    "; give another file (or one measured with two --devices)"));
  for (size_t i = 1; i < runs.size(); ++i)
    if (step_shape(runs[i]) != step_shape(runs[0]))
      std::printf("note: %s measured %s, %s measured %s: their ratios compare unlike work\n", files[0].c_str(),
                  step_shape(runs[0]).c_str(), files[i].c_str(), step_shape(runs[i]).c_str());

  std::printf("gpumix bench compare: %s; base: column 1\n", step_shape(runs[0]).c_str());
  for (size_t i = 0; i < cols.size(); ++i) {
    const json& m = cols[i].run.at("machine");
    const Roofs r = roofs_from_json(cols[i].device.at("roofs"));
    std::printf("  [%zu] %s (%s) on %s (%s, %d cores), build %s (%s), load %s -> %s; copy %s, GEMM %s\n", i + 1,
                cols[i].name.c_str(), cols[i].device.at("name").get<std::string>().c_str(),
                m.at("hostname").get<std::string>().c_str(), m.at("cpu_model").get<std::string>().c_str(),
                m.value("cores", 0), cols[i].run.at("build").at("git_describe").get<std::string>().c_str(),
                cols[i].run.at("build").value("compiler", "").c_str(), cols[i].run.at("load_average_start").dump().c_str(),
                cols[i].run.at("load_average_end").dump().c_str(), format_si(r.bandwidth_Bps, "B/s").c_str(),
                format_si(r.peak_flops, "FLOP/s").c_str());
    std::printf("%s", emulation_note(cols[i].device).c_str());
  }
  // Roles in the base's order, then any the others add.
  std::vector<std::string> roles;
  for (const Column& c : cols)
    for (const json& k : c.device.at("kernels")) {
      const std::string role = k.at("role").get<std::string>();
      if (std::find(roles.begin(), roles.end(), role) == roles.end()) roles.push_back(role);
    }
  std::printf("\n  %-20s", "role");
  for (size_t i = 0; i < cols.size(); ++i)
    std::printf(" %11s %6s", str("[", i + 1, "] ms").c_str(), i == 0 ? "roof" : "x base");
  std::printf("   (x base: time / base time; roof: share of the column's roof)\n");
  std::vector<double> block(cols.size(), 0), step(cols.size(), 0);
  for (const std::string& role : roles) {
    std::printf("  %-20s", role.c_str());
    double base = 0;
    for (size_t i = 0; i < cols.size(); ++i) {
      const json* found = nullptr;
      for (const json& k : cols[i].device.at("kernels"))
        if (k.at("role") == role) found = &k;
      if (!found) {
        std::printf(" %11s %6s", "-", "-");
        continue;
      }
      const KernelResult k = kernel_from_json(*found);
      const Roofs r = roofs_from_json(cols[i].device.at("roofs"));
      if (k.median_s <= 0) {
        std::printf(" %11s %6s", "skipped", "-");
        continue;
      }
      block[i] += k.per_block * k.median_s;
      step[i] += k.per_step * k.median_s;
      if (i == 0) base = k.median_s;
      const std::string second = i == 0 ? str((int)std::lround(100 * figures(k, r).share), "%")
                                        : base > 0 ? ratio3(k.median_s / base) : "-";
      std::printf(" %11s %6s", ms(k.median_s).c_str(), second.c_str());
    }
    std::printf("\n");
  }
  std::printf("\n  one block, forward + backward (the kernels the planner's profile times as block_bwd_s):\n");
  for (size_t i = 0; i < cols.size(); ++i)
    std::printf("    [%zu] %s ms%s\n", i + 1, ms(block[i]).c_str(),
                i == 0 || block[i] <= 0 ? ""
                                        : str(": speed ", ratio3(block[0] / block[i]), "x the base's (per-block time ratio ",
                                              ratio3(block[i] / block[0]), ")").c_str());
  std::printf("  the step (calls x median, collectives apart):\n");
  for (size_t i = 0; i < cols.size(); ++i)
    std::printf("    [%zu] %s ms%s\n", i + 1, ms(step[i]).c_str(),
                i == 0 || step[i] <= 0 ? "" : str(": speed ", ratio3(step[0] / step[i]), "x the base's").c_str());
  if (!svg_path.empty()) {
    draw::write_svg_file(svg_path, draw::roofline_svg(roofline_devices(cols), "Roofline: " + step_shape(runs[0])));
    std::printf("wrote %s\n", svg_path.c_str());
  }
  return 0;
}

// ---- bench -------------------------------------------------------------------------------

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string part = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    out.push_back(part);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  for (const std::string& p : out)
    if (p.empty()) throw std::invalid_argument("'" + s + "' has an empty entry; separate entries by single commas");
  return out;
}

int cmd_bench(int argc, char** argv) {
  if (argc >= 2 && !std::strcmp(argv[1], "compare")) return cmd_compare(argc - 1, argv + 1);
  CLI::App app{"Time every kernel of a training step against the device's measured roofs "
               "(`gpumix bench compare A.json B.json` compares runs)",
               "gpumix bench"};
  std::string devices = "cpu", model_name = "gpt2", dtype_text, json_path, svg_path, filter;
  int seq = 0, batch = 8, repeat = 5;
  bool quiet = false;
  app.add_option("--devices", devices, "devices to measure, each alone: cpu, cuda:0, cpu:slow=3, ... (comma-separated)");
  app.add_option("--model", model_name, "model preset whose step is measured");
  app.add_option("--seq", seq, "sequence length (default: the model's context)");
  app.add_option("--batch", batch, "sequences per step (one micro-batch)");
  app.add_option("--dtype", dtype_text, dist::compute_dtype_help());
  app.add_option("--json", json_path, "write every figure (and the machine, build, load) to this file");
  app.add_option("--svg", svg_path, "draw the roofline of every device to this file");
  app.add_option("--filter", filter, "only these roles, comma-separated (a prefix selects a family: qkv, attn, ln)");
  app.add_option("--repeat", repeat, "timed repeats per kernel after one warm-up (median, spread)");
  app.add_flag("--quiet", quiet, "no progress on stderr");
  CLI11_PARSE(app, argc, argv);

  BenchOptions o;
  o.devices = split_commas(devices);
  o.model = gpt_preset(model_name);
  check_seq_flag(app.count("--seq") > 0, seq, "the model's context");
  o.seq = seq > 0 ? seq : o.model.T;
  o.batch = batch;
  o.repeat = repeat;
  o.progress = !quiet;
  if (!filter.empty()) o.filters = split_commas(filter);
  const Device first = o.devices[0].rfind("cuda", 0) == 0 ? Device::cuda() : Device::cpu();
  o.dtype = dist::compute_dtype_on(first, parse_dtype_flag(dtype_text));
  const json run = run_bench(o);
  print_run(run);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << run.dump(1) << "\n";
    if (!out) throw std::runtime_error("cannot write '" + json_path + "'");
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  if (!svg_path.empty()) {
    std::vector<Column> cols;
    for (const json& d : run.at("devices")) cols.push_back({d.at("label").get<std::string>(), run, d});
    draw::write_svg_file(svg_path, draw::roofline_svg(roofline_devices(cols), "Roofline: " + step_shape(run)));
    std::printf("wrote %s\n", svg_path.c_str());
  }
  return 0;
}

}  // namespace

GPUMIX_COMMAND("bench", "time a training step's kernels against the device's roofs; compare runs", cmd_bench);
