#!/usr/bin/env python3
"""Summarises bench/hetero/run.sh: one markdown report on stdout.

usage: summarize.py WORK STEPS LOAD_BEFORE LOAD_AFTER NAME|DEVICES...
Each run left WORK/<cluster>-<planner>/log.jsonl, WORK/<cluster>-<planner>.txt (its output)
and .rc (its exit status). Medians are over the steps after the first two (warm-up)."""
import json
import os
import statistics
import sys

work, steps, load_before, load_after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
clusters = [c.split("|", 1) for c in sys.argv[5:]]
planners = ["gpumix", "even", "proportional"]
MiB = 1 << 20


def run(cluster, planner):
    base = os.path.join(work, f"{cluster}-{planner}")
    r = {"rc": int(open(base + ".rc").read()), "text": open(base + ".txt").read()}
    r["oom"] = r["rc"] != 0 and "out of memory" in r["text"]
    log = os.path.join(base, "log.jsonl")
    lines = [json.loads(x) for x in open(log)] if os.path.exists(log) else []
    stepped = [l for l in lines if "step" in l and not l.get("final")]
    final = next((l for l in lines if l.get("final")), None)
    timed = stepped[2:] if len(stepped) > 3 else stepped
    if r["rc"] != 0 or not timed:
        return r
    r["ms"] = statistics.median(l["ms"] for l in timed)
    r["tokens_per_s"] = statistics.median(l["tokens_per_s"] for l in timed)
    r["predicted_ms"] = timed[-1]["predicted_ms"]
    ranks = len(timed[-1]["busy_ms"])
    r["busy_ms"] = [statistics.median(l["busy_ms"][i] for l in timed) for i in range(ranks)]
    r["predicted_busy_ms"] = timed[-1]["predicted_busy_ms"]
    r["plan"] = stepped[0].get("plan", "")
    r["peak"] = final["peak_bytes"] if final else []
    r["predicted_bytes"] = final.get("predicted_bytes", []) if final else []
    return r


def ratio(measured, predicted):
    return measured / predicted if predicted else float("nan")


def worst(values):  # the ratio farthest from 1
    return max(values, key=lambda x: abs(x - 1)) if values else float("nan")


results = {(c, p): run(c, p) for c, _ in clusters for p in planners}
out = []
out.append("# Heterogeneous clusters: GPUMix vs even vs proportional (bench/hetero)\n")
out.append(f"gpt-nano (L=4, C=128, 4096-token BPE vocabulary) on `{'/usr/share/games/fortunes'}`, "
           f"global batch 24 x 128 tokens, {steps} steps per run, three emulated CPU ranks "
           "(threads of one process, 2 cores in all, placed by `dist::place_ranks`: the fast "
           "device on a core of its own; every kernel of a `slow=F` device takes F x its CPU "
           "time). Re-planning is off so that each plan "
           "runs as predicted. Medians over steps 3 and later.\n")
out.append(f"Machine load (1/5/15 min) before: {load_before}; after: {load_after}.\n")
out.append("Command: `bench/hetero/run.sh` (STEPS, GPUMIX override).\n")
out.append("## Throughput\n")
out.append("| cluster | devices | GPUMix tok/s | even tok/s | proportional tok/s | GPUMix / even | GPUMix / proportional |")
out.append("|---|---|---|---|---|---|---|")
for c, devices in clusters:
    cells = []
    for p in planners:
        r = results[(c, p)]
        cells.append("**OOM**" if r["oom"] else f"failed (rc {r['rc']})" if r["rc"] else f"{r['tokens_per_s']:.0f}")
    g = results[(c, "gpumix")]

    def speedup(other):
        o = results[(c, other)]
        if g["rc"] or "tokens_per_s" not in g:
            return "-"
        return "trains; baseline OOM" if o["oom"] else "-" if o["rc"] else f"{g['tokens_per_s'] / o['tokens_per_s']:.2f}x"
    out.append(f"| {c} | `{devices}` | {cells[0]} | {cells[1]} | {cells[2]} | {speedup('even')} | {speedup('proportional')} |")
out.append("")
out.append("Plans (batch / micro-batch / state share per rank):\n")
for c, _ in clusters:
    for p in planners:
        r = results[(c, p)]
        if r.get("plan"):
            out.append(f"- {c} / {p}: {r['plan']}")
        elif r["oom"]:
            msg = next((l for l in r["text"].splitlines() if "out of memory" in l), "").strip()
            out.append(f"- {c} / {p}: out of memory: {msg[:400]}")
out.append("")
out.append("## Predicted vs measured\n")
out.append("Step: the whole step (every rank waits for the slowest). Compute: each rank's step "
           "time minus its waits for collectives (`busy_ms` in log.jsonl) against the plan's "
           "prediction (`predicted_busy_ms`). Memory: each rank's allocator peak over the run "
           "against the memory model's total. Ratios are measured / predicted.\n")
out.append("| cluster / planner | step ms pred | step ms meas | ratio | compute ratio per rank | memory pred / peak per rank (MiB) | memory ratio per rank |")
out.append("|---|---|---|---|---|---|---|")
compute_ratios, memory_ratios, step_ratios = [], [], []
for c, _ in clusters:
    for p in planners:
        r = results[(c, p)]
        if "ms" not in r:
            continue
        cr = [ratio(m, q) for m, q in zip(r["busy_ms"], r["predicted_busy_ms"])]
        mr = [ratio(m, q) for m, q in zip(r["peak"], r["predicted_bytes"])]
        sr = ratio(r["ms"], r["predicted_ms"])
        step_ratios.append(sr)
        compute_ratios += cr
        memory_ratios += mr
        mem = ", ".join(f"{q / MiB:.0f} / {m / MiB:.0f}" for m, q in zip(r["peak"], r["predicted_bytes"]))
        out.append(f"| {c} / {p} | {r['predicted_ms']:.0f} | {r['ms']:.0f} | {sr:.2f} | "
                   f"{', '.join(f'{x:.2f}' for x in cr)} | {mem} | {', '.join(f'{x:.2f}' for x in mr)} |")
out.append("")
out.append(f"Worst ratios: step {worst(step_ratios):.2f}, per-rank compute {worst(compute_ratios):.2f}, "
           f"per-rank memory {worst(memory_ratios):.2f} (targets: time within 15 %, memory within 10 %).")
print("\n".join(out))
