#!/usr/bin/env python3
"""results.md of bench/gpu/check.sh from the logs of its stages.

usage: report.py LOGS BUILD OUT_MD

LOGS holds what the stages wrote (names as in check.sh): gpu.txt (the GPU found, or
"none: why"), build.txt (gpu_archs, nvcc), stages.tsv (stage, result, seconds), e2e_gpumix.txt,
e2e_eager.txt, e2e_compile.txt (RESULT lines of bench_train and torch_compare.py --e2e),
bench.json (bench_cuda, Google Benchmark JSON), attention.json and attention_torch.txt
(attention at B 16 T 1024 beside SDPA), sanitize.txt (compute-sanitizer), torch_kernels.txt, gpumix_bench.txt (gpumix bench's
table; its JSON and SVG beside it), hetero/ (bench/hetero's
layout: <cluster>-<planner>.txt, .rc, /log.jsonl; summarised by bench/hetero/summarize.py),
hetero.txt (its cluster and steps), build.log. BUILD's meson-logs/testlog.json has the tests.
First a table of every target of issue 13 (measured, target, met), then the stages and the
details. A missing input gives a row that says why, never an error.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_tests  # noqa: E402

logs, build, out_md = sys.argv[1], sys.argv[2], sys.argv[3]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read(name):
    p = os.path.join(logs, name)
    return open(p, errors="replace").read() if os.path.exists(p) else ""


gpu = read("gpu.txt").strip() or "none: the check did not look"
no_gpu = gpu.startswith("none")
# The rehearsal against the emulated CUDA device (GPUMIX_CHECK_EMULATED=1): its figures say
# what ran and what it printed, never a speed; each carries EMU.
emulated = gpu.startswith("emulated")
EMU = " [emulated, not a GPU]" if emulated else ""
stages = [l.split("\t") for l in read("stages.tsv").splitlines() if l.count("\t") == 2]
stage_result = {s[0]: s[1] for s in stages}
this_call = read("part.txt").split()  # the stages of the part this call ran (check.sh)


def why_missing(stage):
    """Why a stage gave no number: no GPU, or what happened to the stage."""
    if no_gpu:
        return "no GPU"
    r = stage_result.get(stage)
    if r is None and this_call and stage not in this_call:
        return f"{stage}: in the other part of the check (GPUMIX_CHECK_PART)"
    if r is None:
        return f"{stage} did not run"
    return f"{stage}: {r}" if r != "ok" else f"{stage} printed no result"


def result_line(text):
    """The fields of a RESULT line (bench_train, torch_compare.py --e2e), or {}."""
    m = re.search(r"^RESULT (\S+) (.*)$", text, re.MULTILINE)
    if not m:
        return {}
    f = m.group(2).split()
    r = dict(zip(f[0::2], f[1::2]))
    r["name"] = m.group(1)
    return r


def num(x):
    """x as a float; None for what is no number (also "nan": summarize.py's "no runs")."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


# ---- end to end --------------------------------------------------------------------------
e2e = {k: result_line(read(f"e2e_{k}.txt")) for k in ("gpumix", "eager", "compile")}
e2e_stage = {"gpumix": "e2e-gpumix", "eager": "e2e-torch-eager", "compile": "e2e-torch-compile"}
basis = re.search(r"^MFU basis: ([0-9.]+) MFLOP/token .*?(peak ([0-9.]+) TFLOP/s: .*|no peak known.*)$",
                  read("e2e_gpumix.txt"), re.MULTILINE)
mflop = num(basis.group(1)) if basis else None
peak = num(basis.group(3)) if basis and basis.group(3) else None


def mfu(rate):
    if rate is None or not mflop or not peak:
        return None
    return 100 * rate * mflop * 1e6 / (peak * 1e12)


def rate(k):
    return num(e2e[k].get("tokens_per_s"))


def fmt(x, spec=".0f", unit=""):
    return f"{x:{spec}}{unit}" if x is not None else "n/a"


def ratio_row(other):
    g, o = rate("gpumix"), rate(other)
    if g is None or o is None:
        return (why_missing(e2e_stage["gpumix"] if g is None else e2e_stage[other]), None)
    return (f"{g / o:.2f}x ({g:.0f} vs {o:.0f} tok/s)", g / o)


# ---- kernels -------------------------------------------------------------------------------
bench = []
try:
    bench = json.loads(read("bench.json") or "{}").get("benchmarks", [])
except json.JSONDecodeError:
    pass
memory_bound = [(b["name"], b["%copy"]) for b in bench if "%copy" in b and not b["name"].startswith("BM_copy")]
# Attention at issue 28's shape (B 16, T 1024, NH 12, HS 64): part 1's own stages,
# attention-gpumix (bench_cuda's BM_attention/T/mode/B, JSON) and attention-torch (a RESULT
# line of torch_compare.py --attention), forward and forward + backward.
attn_bench = []
try:
    attn_bench = json.loads(read("attention.json") or "{}").get("benchmarks", [])
except json.JSONDecodeError:
    pass
attn = {mode: next((b for b in attn_bench if re.match(r"BM_attention/\d+/%d/" % mode, b["name"])), None)
        for mode in (0, 1)}
sdpa = result_line(read("attention_torch.txt"))
# compute-sanitizer (stage sanitize): "SANITIZE tool rc N" per tool.
sanitized = dict(re.findall(r"^SANITIZE (\w+) rc (\d+)$", read("sanitize.txt"), re.MULTILINE))

# ---- heterogeneous run -----------------------------------------------------------------------
hetero_cfg = dict(l.split("=", 1) for l in read("hetero.txt").splitlines() if "=" in l)
hetero_md, hetero_speedup, worst = "", None, {}
hdir = os.path.join(logs, "hetero")
if hetero_cfg and os.path.isdir(hdir):
    try:
        s = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "hetero", "summarize.py"), hdir,
                            hetero_cfg["steps"], hetero_cfg.get("load_before", "?"), hetero_cfg.get("load_after", "?"),
                            f"{hetero_cfg['name']}|{hetero_cfg['devices']}"],
                           capture_output=True, text=True, timeout=60)
        out = s.stdout
        if s.returncode != 0:
            hetero_md = f"summarize.py failed: {s.stderr.strip()[-500:]}"
        else:
            hetero_md = out[out.find("## Throughput"):].replace("## ", "### ")
            row = re.search(r"^\| %s \|.*$" % re.escape(hetero_cfg["name"]), out, re.MULTILINE)
            if row:
                cells = [c.strip() for c in row.group(0).strip("|").split("|")]
                hetero_speedup = cells[5]  # GPUMix / even
            m = re.search(r"Worst ratios: step ([-0-9.na]+), per-rank compute ([-0-9.na]+), "
                          r"per-rank memory ([-0-9.na]+)", out)
            if m:
                worst = {"step": num(m.group(1)), "compute": num(m.group(2)), "memory": num(m.group(3))}
    except (subprocess.SubprocessError, KeyError) as e:
        hetero_md = f"summarize.py failed: {e}"

# ---- tests -----------------------------------------------------------------------------------
test_rows = gpu_tests.table(build)
totals = [0, 0, 0]
results = []
for r in test_rows:
    c = [x.strip() for x in r.strip("|").split("|")]
    if len(c) >= 6 and c[3].isdigit():
        results.append(c[1])
        for i in range(3):
            totals[i] += int(c[3 + i])

# ---- the targets table -------------------------------------------------------------------------
rows = []


def target(name, measured, goal, met):
    if emulated:
        measured, met = f"{measured}{EMU}", "- (emulated, not a GPU)"
    rows.append(f"| {name} | {measured} | {goal} | {met} |")


def met(ok):
    return "-" if ok is None else ("**yes**" if ok else "**no**")


if no_gpu:
    tests_measured, tests_ok = "no GPU (each test skipped; see below)", None
elif not results:
    tests_measured, tests_ok = why_missing("tests-gpu"), None
else:
    tests_measured = (f"{len(results)} tests: {totals[0]} cases passed, {totals[1]} failed, {totals[2]} skipped; "
                      f"results {', '.join(sorted(set(results)))}")
    # Skipped cases are no failure on a GPU machine (e.g. those that need two GPUs); none may fail.
    tests_ok = totals[1] == 0 and totals[0] > 0 and all(x in ("OK", "SKIP", "EXPECTEDFAIL") for x in results)
target("CUDA tests (every test named cuda/gpu/nccl)", tests_measured, "all pass", met(tests_ok))
m, r = ratio_row("eager")
target("gpt2 124M bf16 T=1024 tokens/s vs PyTorch eager", m, ">= 1.0x", met(None if r is None else r >= 1))
m, r = ratio_row("compile")
target("... vs torch.compile", m, "aim >= 1.0x", met(None if r is None else r >= 1))
u = mfu(rate("gpumix"))
target("gpt2 124M MFU", fmt(u, ".1f", " %") if u is not None else
       (why_missing("e2e-gpumix") if rate("gpumix") is None else "n/a (no peak known for the device)"),
       ">= 40 %", met(None if u is None else u >= 40))
if memory_bound:
    low = [(n, p) for n, p in memory_bound if p < 70]
    wn, wp = min(memory_bound, key=lambda x: x[1])
    target("memory-bound kernels, % of measured copy bandwidth",
           f"worst {wp:.0f} % ({wn.split('/manual_time')[0]}); {len(low)} of {len(memory_bound)} below 70 %",
           ">= 70 % each", met(not low))
else:
    target("memory-bound kernels, % of measured copy bandwidth", why_missing("bench-cuda"), ">= 70 % each", "-")
for mode, what, key in ((1, "fwd+bwd", "fwd_bwd_ms"), (0, "fwd", "fwd_ms")):
    name = f"attention {what} B=16 T=1024 NH=12 HS=64 vs SDPA (flash)"
    a, s_ms = attn[mode], num(sdpa.get(key))
    if a and s_ms:
        a_ms = a.get("us", 0) / 1e3
        target(name, f"{a_ms:.2f} ms vs {s_ms:.2f} ms ({a_ms / s_ms:.2f}x the time)", "<= 1.5x the time",
               met(a_ms <= 1.5 * s_ms))
    else:
        target(name, why_missing("attention-gpumix" if not a else "attention-torch"), "<= 1.5x the time", "-")
for tool in ("memcheck", "racecheck", "synccheck"):
    rc = sanitized.get(tool)
    target(f"compute-sanitizer {tool} (kernel tests, small shapes)",
           why_missing("sanitize") if rc is None else ("no error" if rc == "0" else f"errors or did not finish (rc {rc})"),
           "no error", met(None if rc is None else rc == "0"))
hetero_ok = None
if hetero_speedup and hetero_speedup.endswith("x"):
    hetero_ok = num(hetero_speedup[:-1]) >= 1.5
elif hetero_speedup and "OOM" in hetero_speedup:
    hetero_ok = True
target("3 emulated devices on one GPU: GPUMix vs even",
       hetero_speedup if hetero_speedup not in (None, "", "-") else why_missing("hetero-gpumix"),
       ">= 1.5x", met(hetero_ok))
for key, goal, tol in (("compute", "time within 15 % per rank", 0.15), ("memory", "memory within 10 % per rank", 0.10)):
    w = worst.get(key)
    extra = f" (whole step {worst['step']:.2f})" if key == "compute" and worst.get("step") is not None else ""
    target(f"predictions: {goal}",
           f"worst measured / predicted {w:.2f}{extra}" if w is not None else why_missing("hetero-gpumix"),
           f"within {1 - tol:.2f}-{1 + tol:.2f}", met(None if w is None else abs(w - 1) <= tol))

# ---- results.md ---------------------------------------------------------------------------------
md = [f"# GPU check, {read('date.txt').strip()}", "",
      f"Device: {gpu}", f"Build: {read('build.txt').strip() or 'n/a'}", "",
      f"## Targets (issues 13 and 28){EMU}", "", "| target | measured | target | met |", "|---|---|---|---|", *rows, "",
      "## Stages", "", "| stage | result | seconds |", "|---|---|---|",
      *[f"| {s[0]} | {s[1]} | {s[2]} |" for s in stages], "",
      f"## CUDA tests{EMU}", "", "| test | result | seconds | passed | failed | skipped | skip reason, failed cases |",
      "|---|---|---|---|---|---|---|", *test_rows, ""]
cfg = re.search(r"^bench_train: (L=.*)$", read("e2e_gpumix.txt"), re.MULTILINE)
md += [f"## End-to-end training: gpt2 124M, T=1024, bf16{EMU}", "",
       f"Same model, B, T and steps for all three (bench/nn/bench_train.cpp, bench/gpu/torch_compare.py --e2e): "
       f"{cfg.group(1) if cfg else read('e2e.txt').strip()}. Each step timed to a device synchronise at its end; "
       f"medians of the timed steps after the warm-up.",
       f"MFU basis: {basis.group(0)[len('MFU basis: '):] if basis else 'n/a (bench_train did not print it)'}.", "",
       "| run | ms/step | tokens/s | MFU | peak MiB | GPUMix / this |", "|---|---|---|---|---|---|"]
for k, label in (("gpumix", "GPUMix"), ("eager", "PyTorch eager"), ("compile", "torch.compile")):
    r = e2e[k]
    if not r:
        md.append(f"| {label} | {why_missing(e2e_stage[k])} | | | | |")
        continue
    g = rate("gpumix")
    md.append(f"| {label}{EMU} | {r.get('ms_per_step', 'n/a')} | {fmt(rate(k))} | {fmt(mfu(rate(k)), '.1f', ' %')} | "
              f"{r.get('peak_mib', 'n/a')} | {fmt(g / rate(k) if g and rate(k) else None, '.2f', 'x')} |")
compile_note = re.search(r"^warm-up \(compilation included\) took .*$", read("e2e_compile.txt"), re.MULTILINE)
if compile_note:
    md += ["", f"torch.compile: {compile_note.group(0)}."]
md += ["", f"## Heterogeneous run: three emulated devices on one GPU{EMU}", ""]
if emulated:
    md += ["Emulated, not a GPU: the step times, speed-ups and predicted / measured ratios below are those of "
           "the CPU emulator (kernels/cuda_emulator) at reduced shapes, never a speed.", ""]
if hetero_cfg:
    md += [f"`gpumix train --model {hetero_cfg.get('model', '?')} --devices {hetero_cfg['devices']}` "
           f"({hetero_cfg.get('what', '')}), {hetero_cfg['steps']} steps per plan, re-planning off; "
           "medians over steps 3 and later (bench/hetero/summarize.py).", ""]
md += [hetero_md or why_missing("hetero-gpumix"), ""]
md += [f"## CUDA kernels (bench_cuda: CUDA events, L2 flushed for memory-bound kernels, random data){EMU}", ""]
ctx = json.loads(read("bench.json") or "{}").get("context", {}) if bench else {}
if bench:
    md += [f"Device {ctx.get('device', '?')}; measured copy bandwidth {num(ctx.get('copy_GBps')) or 0:.0f} GB/s.", "",
           "| kernel | us | GB/s | % copy | TFLOP/s |", "|---|---|---|---|---|"]
    for b in bench:
        md.append(f"| {b['name'].split('/manual_time')[0]}{EMU} | {fmt(b.get('us'), '.1f')} | {fmt(b.get('GB/s'))} | "
                  f"{fmt(b.get('%copy'))} | {fmt(b.get('TFLOP/s'), '.1f')} |")
else:
    md.append(why_missing("bench-cuda") + ": " + (read("bench.txt").strip().splitlines() or [""])[-1])
md += ["", "## PyTorch, the same kernels, timed the same way", "", "```",
       *[l for l in read("torch_kernels.txt").splitlines() if not l.startswith("====")][-30:], "```"]
# gpumix bench's own table (every kernel of a step against the measured roofs), as it printed it.
table = [l for l in read("gpumix_bench.txt").splitlines() if not l.startswith("====")]
md += ["", f"## Every kernel of a training step against the roofs (gpumix bench){EMU}", ""]
md += ["```", *table, "```", "", "JSON and roofline: gpumix_bench.json, gpumix_bench.svg in logs.tar.gz."] if any(
    "step breakdown" in l for l in table) else [why_missing("gpumix-bench") + ": " + (table or [""])[-1]]
warnings = [l for l in read("build.log").splitlines() if re.search(r"\b(warning|error)\b:|FAILED:", l)]
if warnings:
    md += ["", "## Build warnings and errors (first 20)", "", "```", *warnings[:20], "```"]
md += ["", f"Logs: logs.tar.gz ({', '.join(sorted(os.listdir(logs)))})."]
with open(out_md, "w") as f:
    f.write("\n".join(md) + "\n")
