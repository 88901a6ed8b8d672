#!/usr/bin/env python3
"""Where a planned run's step went, against the plan: `step_breakdown.py RUN_DIR TRACE`.

RUN_DIR is a `gpumix train` run folder (its plan.json: the predictions), TRACE the file its
`--trace` wrote. For the rank with the most compute, the median over the traced steps of
  compute      the spans of category compute (forward, backward, head) and the optimizer
  collectives  the time it spent in or waiting for collectives: blocking gathers, issuing and
               waiting for prefetched ones, reduce-scatters, hybrid all-reduces (issuing and waiting), the
               step's loss and norm all-reduces
  other        the rest of the step (loading the batch, bookkeeping)
against the plan's busy time (compute) and its comm + idle (the step's prediction without
the rank's compute). Prints one Markdown row: step, compute, collectives, other (ms, measured
/ predicted where predicted).
"""
import json
import statistics
import sys


def main():
    run, trace_path = sys.argv[1], sys.argv[2]
    plan = json.load(open(run + "/plan.json"))
    events = [e for e in json.load(open(trace_path))["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 0]
    ranks = sorted({e["pid"] for e in events})
    per_rank = {}
    for r in ranks:
        mine = [e for e in events if e["pid"] == r]
        rows = []
        for step in [e for e in mine if e["name"] == "step"]:
            a, b = step["ts"], step["ts"] + step["dur"]
            inside = [e for e in mine if e is not step and a <= e["ts"] and e["ts"] + e["dur"] <= b + 1]
            compute = sum(e["dur"] for e in inside if e["cat"] == "compute" or e["name"] == "optimizer")
            # The rank's own thread (tid 0): its collectives and waits, none nested in another (a
            # prefetched gather's or all-reduce's flight is on the collectives' track).
            waits = [e for e in inside if e["cat"] in ("collective", "wait")]
            comm = sum(e["dur"] for e in waits)
            rows.append((step["dur"] / 1e3, compute / 1e3, comm / 1e3))
        per_rank[r] = [statistics.median(x) for x in zip(*rows)]
    r = max(per_rank, key=lambda k: per_rank[k][1])
    step, compute, comm = per_rank[r]
    p = plan["ranks"][r]["time_s"]
    busy = p["busy"] * 1e3
    waits = (p["comm"] + p["idle"]) * 1e3
    print("%.0f / %.0f | rank %d: %.0f / %.0f | %.0f / %.0f | %.0f" % (
        step, plan["predicted"]["step_s"] * 1e3, r, compute, busy, comm, waits, step - compute - comm))


if __name__ == "__main__":
    main()
