#!/usr/bin/env bash
# Median step time of one GPUMix plan on one host (shared memory) and across 2 emulated
# nodes (TCP over the veth link) unshaped, at 1 Gbit/s and at 100 Mbit/s (tbf), with the
# planner's predicted vs measured per collective kind at each rate. Run it as root on a
# quiet machine; it prints a Markdown table (bench/results/cluster-step-times.md).
#
#   step_times.sh [--gpumix PATH] [--data CORPUS] [--steps N] [--rates "none 1gbit 100mbit"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpumix=$root/build/tools/gpumix data=/usr/share/games/fortunes steps=20 rates="none 1gbit 100mbit"
while [ $# -gt 0 ]; do
  case $1 in
    --gpumix) gpumix=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    *) echo "step_times.sh: unknown option '$1'; the options are --gpumix --data --steps --rates" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/gpumix-step-times.XXXXXX)
trap 'rm -rf "$work"' EXIT
# gpt-nano at 16 x 128, 2 nodes x 2 ranks, a fast and a slow emulated device on each.
devices=cpu:mem=1GiB:slow=2,cpu:mem=1GiB,cpu:mem=1GiB:slow=2,cpu:mem=1GiB
args=(train --data "$data" --model gpt-nano --seq 128 --batch 16 --steps "$steps" --warmup 2 --eval-interval 0
      --eval-windows 2 --ckpt-interval 0 --seed 7 --devices "$devices" --quiet)
export GPUMIX_CACHE=$work/cache  # profiled once per placement, then from the cache
summary() {  # LOG -> "median step ms | predicted ms | AG pred/meas | RS pred/meas"
  python3 - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = [r["ms"] for r in rows if "step" in r and "ms" in r][2:]
pred = [r["predicted_ms"] for r in rows if "predicted_ms" in r]
fin = [r for r in rows if r.get("final")][-1]
c = fin.get("collectives", {})
def pm(k): return "%.1f / %.1f" % (c[k]["predicted_ms"], c[k]["measured_ms"]) if k in c else "-"
print("%.0f | %s | %s | %s" % (statistics.median(ms), "%.0f" % pred[-1] if pred else "-", pm("all_gather"), pm("reduce_scatter")))
EOF
}
echo "| where | median step ms | predicted step ms | AG per block ms (pred / meas) | RS per block ms (pred / meas) |"
echo "|---|---|---|---|---|"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 -x GPUMIX_CACHE \
  "$gpumix" "${args[@]}" --out "$work/host" > "$work/host.txt" 2>&1 || { cat "$work/host.txt"; exit 1; }
echo "| one host, shared memory | $(summary "$work/host/log.jsonl") |"
for rate in $rates; do
  "$here/emulated_cluster.sh" with --nodes 2 --slots 2 --rate "$rate" -- \
    mpirun --hostfile /run/gpumix-cluster/hostfile -np 4 -x GPUMIX_CACHE "$gpumix" "${args[@]}" --out "$work/$rate" \
    > "$work/$rate.txt" 2>&1 || { cat "$work/$rate.txt"; exit 1; }
  echo "| 2 nodes x 2 ranks, link $rate | $(summary "$work/$rate/log.jsonl") |"
done
echo
echo "(gpt-nano, 16 x 128, fp32 where the CPU lacks bf16 else bf16, $steps steps, the first 2 not counted; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
