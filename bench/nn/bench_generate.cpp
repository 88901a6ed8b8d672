// Generation throughput of one sequence (nn/infer.h sample_tokens): tokens/s with the
// key/value cache and with the full recompute per token, greedy, on a model of random
// weights (the shape is what costs, not the values). The prompt is processed first and its
// time is reported apart (prefill); tokens/s counts the new ids over the whole call.
//
//   bench_generate [--layers 12 --heads 12 --channels 768 --context 1024 --vocab 50257]
//                  [--prompt 16] [--new 100] [--dtype fp32|bf16] [--mode cache|full] [--threads N]
//
// Prints one line: RESULT mode M dtype D prompt P new N seconds S tokens_per_s R.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/precision.h"
#include "nn/gpt.h"
#include "nn/infer.h"

using namespace gpumix;

int main(int argc, char** argv) {
  GPTConfig c;
  c.name = "custom";
  c.L = 12;
  c.NH = 12;
  c.C = 768;
  c.T = 1024;
  c.V = 50257;
  int prompt = 16, fresh = 100, threads = 0;
  std::string dtype = "fp32", mode = "cache";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--layers") c.L = std::stoi(v);
    else if (k == "--heads") c.NH = std::stoi(v);
    else if (k == "--channels") c.C = std::stoi(v);
    else if (k == "--context") c.T = std::stoi(v);
    else if (k == "--vocab") c.V = std::stoi(v);
    else if (k == "--prompt") prompt = std::stoi(v);
    else if (k == "--new") fresh = std::stoi(v);
    else if (k == "--dtype") dtype = v;
    else if (k == "--mode") mode = v;
    else if (k == "--threads") threads = std::stoi(v);
    else {
      std::fprintf(stderr, "bench_generate: unknown option %s (see the file's header)\n", k.c_str());
      return 2;
    }
  }
  if (mode != "cache" && mode != "full") {
    std::fprintf(stderr, "bench_generate: --mode must be cache or full, got %s\n", mode.c_str());
    return 2;
  }
  if (threads > 0) omp_set_num_threads(threads);
  try {
    const DType dt = compute_dtype_from_name(dtype, "--dtype");
    GPT model(c, Device::cpu(), 1, dt);
    std::vector<int32_t> ids(prompt);
    for (int i = 0; i < prompt; ++i) ids[i] = (int32_t)((i * 40503u + 7) % (uint32_t)c.V);
    SampleOptions o;
    o.tokens = fresh;
    o.temperature = 0;  // greedy: no sampling cost in the figure
    o.kv_cache = mode == "cache";
    // Warm-up: oneDNN creates its primitives on first use of each shape.
    {
      std::vector<int32_t> w = ids;
      SampleOptions ow = o;
      ow.tokens = 2;
      sample_tokens(model, w, ow);
    }
    const auto t0 = std::chrono::steady_clock::now();
    sample_tokens(model, ids, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("RESULT mode %s dtype %s prompt %d new %d seconds %.3f tokens_per_s %.2f\n", mode.c_str(),
                dtype_name(dt), prompt, fresh, s, fresh / s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
