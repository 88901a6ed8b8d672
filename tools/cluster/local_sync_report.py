#!/usr/bin/env python3
"""The report of local_sync_runs.sh: OUT RATES ROUNDS STEPS TOKENS_PER_STEP NODES -> Markdown.

Per rate and mode (the rounds' runs side by side): the validation loss at the token budget
(all windows), the training wall time (the sum of the steps' ms: start-up and validation
left out), bytes across the links per token (steps 2 on), the training wall time at which
the run's validation loss (the same first windows at every evaluation) first reaches the
every-step runs' final one (the loosest of them, as they differ by rounding only), and, in local mode, the most any
group waited for another in an outer period (% of that period).
"""
import json
import os
import statistics
import sys


def read_run(folder, steps, tokens_per_step):
    recs = {}
    final = None
    for line in open(os.path.join(folder, "log.jsonl")):
        r = json.loads(line)
        if r.get("final"):
            final = r
        elif "step" in r:
            recs[r["step"]] = r
    if sorted(recs) != list(range(1, steps + 1)) or final is None:
        sys.exit(f"{folder}: expected steps 1-{steps} and a final line; the run did not finish")
    wall, at = 0.0, {}
    for s in range(1, steps + 1):
        wall += recs[s]["ms"] / 1e3
        at[s] = wall
    evals = [(s, recs[s]["val_loss"]) for s in sorted(recs) if "val_loss" in recs[s]]
    b = json.load(open(os.path.join(folder, "bytes.json")))
    return {
        "recs": recs, "wall": wall, "at": at, "evals": evals,
        "val_full": recs[steps].get("val_full_loss", final["val_loss"]),
        "bytes_per_token": b["after_step_1"] / ((steps - 1) * tokens_per_step),
    }


def group_wait(run, h, steps):
    """The most any rank (a group: one rank per node) waited for the slowest in one outer
    period: the sum over the period's steps of (slowest busy - its busy), % of the period.
    Every rank's busy times of a period are on its outer step's line (period_busy_ms: the
    groups meet only there); older logs have them on each step's (busy_ms)."""
    worst = 0.0
    for start in range(1, steps + 1, h):
        period = range(start, min(start + h, steps + 1))
        wall = sum(run["recs"][s]["ms"] for s in period)
        last = run["recs"][period[-1]]
        busy = last["period_busy_ms"] if "period_busy_ms" in last else [run["recs"][s]["busy_ms"] for s in period]
        for g in range(len(busy[0])):
            waited = sum(max(b) - b[g] for b in busy)
            worst = max(worst, 100 * waited / wall)
    return worst


def main():
    out, rates, rounds, steps, tps, nodes = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5]), int(sys.argv[6])
    longer = [int(x) for x in sys.argv[7].split()] if len(sys.argv) > 7 else []
    for rate in rates:
        folder = os.path.join(out, rate)
        names = sorted({d.split("-", 1)[1] for d in os.listdir(folder)
                        if d.startswith("r") and os.path.isdir(os.path.join(folder, d))},
                       key=lambda n: (not n.startswith("every"), n.startswith("local") and int(n.split("H")[1]), n))
        runs = {(k, n): read_run(os.path.join(folder, f"r{k}-{n}"), steps, tps)
                for k in range(1, rounds + 1) for n in names}
        print(f"\n### {nodes} nodes, links at {rate}\n")
        auto = json.load(open(os.path.join(folder, "plan-auto.json")))
        kept = [r["node_name"] for r in auto["ranks"] if not r.get("left_out")]
        print(f"`gpumix plan` left to itself (every-step) keeps {len(kept)} of {len(auto['ranks'])} nodes "
              f"({', '.join(kept)}), predicted step {auto['predicted']['step_s'] * 1e3:.0f} ms.\n")
        print("| mode | val loss at the budget (all windows) | training wall time, s | vs every-step on all nodes "
              "| bytes across the links per token | reaches the target at, s | vs every-step on all nodes "
              "| most a group waited in an outer period |")
        print("|---|---|---|---|---|---|---|---|")
        for n in names:
            cells = {key: [] for key in ("loss", "wall", "speed", "bpt", "reach", "reach_ratio", "wait")}
            for k in range(1, rounds + 1):
                r = runs[(k, n)]
                every = [runs[(k, m)] for m in names if m.startswith("every")]
                # The every-step runs compute the same losses up to rounding: the target is the
                # loosest of their final ones; the peer, the fastest every-step run on all nodes.
                target = max(e["evals"][-1][1] for e in every)
                peer = min((runs[(k, m)] for m in names if m in ("every-step-full", "every-step-hybrid")),
                           key=lambda e: e["wall"])
                reach = next((r["at"][s] for s, v in r["evals"] if v <= target), None)
                cells["loss"].append("%.4f" % r["val_full"])
                cells["wall"].append("%.1f" % r["wall"])
                cells["speed"].append("%.2fx" % (r["wall"] / peer["wall"]))
                cells["bpt"].append("%.0f" % r["bytes_per_token"])
                cells["reach"].append("not reached" if reach is None else "%.1f" % reach)
                cells["reach_ratio"].append("-" if reach is None else "%.2fx" % (reach / peer["wall"]))
                h = int(n.split("H")[1]) if n.startswith("local-H") else 0
                cells["wait"].append("%.1f %%" % group_wait(r, h, steps) if h else "-")
            print("| " + n + " | " + " | ".join(" / ".join(cells[c]) for c in cells) + " |")
        print("\n(target: the loosest final validation loss, first 16 windows, of the every-step runs; "
              "\"every-step on all nodes\": the faster of full and hybrid sharding in the same round)")
        if rounds > 1:
            print(f"\n(each cell: round 1 / round 2 / ...; the rounds ran the modes in turn)")
        if longer:  # local runs past the budget: when they reach the every-step loss
            k = rounds
            target = max(runs[(k, m)]["evals"][-1][1] for m in names if m.startswith("every"))
            peer = min((runs[(k, m)] for m in names if m in ("every-step-full", "every-step-hybrid")),
                       key=lambda e: e["wall"])
            alone = runs.get((k, "every-step-one-fast-node"))
            print(f"\nLocal runs of more steps (each its own learning-rate schedule to its end), against round {k}'s "
                  f"every-step target {target:.4f} (the fastest every-step run on all nodes took {peer['wall']:.1f} s"
                  + (f", the fast node alone {alone['wall']:.1f} s" if alone else "") + "):\n")
            print("| run | steps (tokens vs the budget) | val loss at its end (all windows) | reaches the target at step "
                  "| at, s | vs every-step on all nodes | vs the fast node alone |")
            print("|---|---|---|---|---|---|---|")
            for n in sorted(d for d in os.listdir(folder) if d.startswith("longer-") and os.path.isdir(os.path.join(folder, d))):
                L = int(n.rsplit("-", 1)[1])
                r = read_run(os.path.join(folder, n), L, tps)
                hit = next(((s, r["at"][s]) for s, v in r["evals"] if v <= target), None)
                print(f"| {n} | {L} ({L / steps:.1f}x) | {r['val_full']:.4f} | " +
                      ("not reached | - | - | -" if hit is None else
                       f"{hit[0]} | {hit[1]:.1f} | {hit[1] / peer['wall']:.2f}x | " +
                       (f"{hit[1] / alone['wall']:.2f}x" if alone else "-")) + " |")
        # Bytes across the links: every-step hybrid against each local run (the medians).
        med = {n: statistics.median(runs[(k, n)]["bytes_per_token"] for k in range(1, rounds + 1)) for n in names}
        for base in ("every-step-hybrid", "every-step-full"):
            if base in med:
                print(f"\nbytes per token, {base} / local: " + ", ".join(
                    f"{n} {med[base] / med[n]:.0f}x fewer" for n in names if n.startswith("local") and med[n] > 0))


if __name__ == "__main__":
    main()
