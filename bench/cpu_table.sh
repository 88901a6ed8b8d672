#!/usr/bin/env bash
# The CPU's kernel table at the gpt2 shape (issue 21, item 6): `gpumix bench` on the CPU, gpt2,
# T 1024, B 8, bf16 (or $DTYPE), every kernel of a step against the measured roofs, written to
# bench/results/cpu-bench-gpt2.{md,json,svg} with the machine, the build, the load before and
# after, and the kernels furthest below their roof. Run it with nothing else on the machine:
# the script refuses to start when the 1-minute load average is above LOAD_MAX (default:
# half the cores), and records the load at the start and the end.
#   bench/cpu_table.sh [build-folder]        # ~5-15 min on a many-core machine
#   REPEAT=7 DTYPE=fp32 OUT=/tmp/t bench/cpu_table.sh build-perf
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
gpumix=$build/tools/gpumix
[ -x "$gpumix" ] || { echo "cpu_table.sh: $gpumix not built; run: ninja -C $build tools/gpumix" >&2; exit 1; }
out=${OUT:-bench/results}
dtype=${DTYPE:-bf16}
repeat=${REPEAT:-5}
cores=$(nproc)
load_max=${LOAD_MAX:-$(awk -v c="$cores" 'BEGIN { print c / 2 }')}
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v m="$load_max" 'BEGIN { exit !(l > m) }'; then
  echo "cpu_table.sh: load average $load is above $load_max (LOAD_MAX) on $cores cores: the figures would measure" \
       "the other work; wait for a quiet machine or set LOAD_MAX" >&2
  exit 1
fi
mkdir -p "$out"
name=cpu-bench-gpt2${DTYPE:+-$dtype}
cmd=("$gpumix" bench --devices cpu --model gpt2 --seq 1024 --batch 8 --dtype "$dtype" --repeat "$repeat"
     --json "$out/$name.json" --svg "$out/$name.svg")
"${cmd[@]}" >"$out/$name.txt"
{
  echo "# gpumix bench: the CPU at the gpt2 shape ($dtype)"
  echo
  echo "Written by \`bench/cpu_table.sh $build\` on $(date -u +%Y-%m-%d) ($(hostname), $cores cores);"
  echo "the JSON and the roofline picture beside this file. Command:"
  echo
  echo "    ${cmd[*]}"
  echo
  echo '```'
  cat "$out/$name.txt"
  echo '```'
  echo
  echo "## Furthest below their roof (share of the step they take, share of roof they reach)"
  echo
  python3 - "$out/$name.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
for d in run["devices"]:
    r = d["roofs"]
    rows = []
    step = sum(k["per_step"] * k["median_s"] for k in d["kernels"])
    for k in d["kernels"]:
        if k["median_s"] <= 0 or k["per_step"] == 0:
            continue
        roof = max(k["flops"] / r["peak_flops"], k["bytes"] / r["bandwidth_Bps"])
        rows.append((k["per_step"] * (k["median_s"] - roof), k, roof / k["median_s"]))
    rows.sort(key=lambda x: -x[0])
    print(f"Ordered by the step time each would save at its roof ({d['label']}):\n")
    print("| role | ms per step | share of step | share of roof | saved at roof, ms |")
    print("|---|---|---|---|---|")
    for saved, k, share in rows[:8]:
        t = k["per_step"] * k["median_s"]
        print(f"| {k['role']} | {t*1e3:.1f} | {100*t/step:.1f} % | {100*share:.0f} % | {saved*1e3:.1f} |")
    print()
la0, la1 = run["load_average_start"], run["load_average_end"]
print(f"Load average {la0[0]:.2f} at the start (what else ran), {la1[0]:.2f} at the end (the bench's own "
      "threads included).")
EOF
} >"$out/$name.md"
rm -f "$out/$name.txt"
echo "wrote $out/$name.md, $out/$name.json, $out/$name.svg"
