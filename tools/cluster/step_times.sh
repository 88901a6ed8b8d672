#!/usr/bin/env bash
# Predicted vs measured: one GPUMix plan's step, per rank and per collective kind, on one host
# (shared memory) and across 2 emulated nodes (TCP over the veth link) at each link rate,
# with full sharding and with hybrid sharding (groups of one node, replicated across the
# two), each planned by GPUMix from a profile measured right before it (no profile cache:
# the machine's load then is the run's). Run it as root; it prints a Markdown table
# (bench/results/cluster-step-times.md) with the load average at the start and at the end:
# on a machine others share, the numbers hold only for that load.
#
#   step_times.sh [--gpumix PATH] [--data CORPUS] [--steps N] [--rates "none 1gbit 100mbit"]
#                 [--sharding "full 2"] [--ranks-per-node 2] [--keep DIR]
#
# --ranks-per-node 1 runs one rank per node (2 ranks on this 2-core machine: no rank waits
# for a core), to tell the cost model's error from the oversubscription's.
#
# Columns: the step's median (the first 2 steps left out) against the plan's prediction;
# each rank's compute per step (busy: the step without its waits for collectives), the
# range of measured / predicted over the ranks; one block's all-gather, reduce-scatter and
# (hybrid) all-reduce across the groups as the cost model predicted them against the same
# collectives timed by the engine on the running layout, in the form it ran them (flat or
# hierarchical). A second table says where the traced steps' time went (tools/cluster/
# step_breakdown.py: the rank with the most compute; its compute, and its time in or waiting
# for collectives, against the plan's). --keep DIR keeps every run's folder, console output,
# profile, plan and trace.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpumix=$root/build/tools/gpumix data=/usr/share/games/fortunes steps=20 rates="none 1gbit 100mbit"
shardings="full 2" keep="" per_node=2
while [ $# -gt 0 ]; do
  case $1 in
    --gpumix) gpumix=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --sharding) shardings=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    *) echo "step_times.sh: unknown option '$1'; the options are --gpumix --data --steps --rates --sharding --ranks-per-node --keep" >&2; exit 2 ;;
  esac
done
[ -x "$gpumix" ] || { echo "step_times.sh: no gpumix program at $gpumix; build it (ninja -C build) or pass --gpumix PATH" >&2; exit 1; }
[ "$steps" -ge 4 ] || { echo "step_times.sh: --steps $steps: give at least 4 (the first 2 warm up)" >&2; exit 2; }
case $per_node in 1|2) ;; *) echo "step_times.sh: --ranks-per-node $per_node: give 1 or 2" >&2; exit 2 ;; esac
if [ -n "$keep" ]; then mkdir -p "$keep"; work=$(realpath "$keep"); else
  work=$(mktemp -d /tmp/gpumix-step-times.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
load() { echo "$(date -u +%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
start_load=$(load)
# gpt-nano at 16 x 128, 2 nodes x 2 ranks, a fast and a slow emulated device on each; or 2
# nodes x 1 rank, the slow device on one node and the fast one on the other.
if [ "$per_node" = 2 ]; then devices=cpu:mem=1GiB:slow=2,cpu:mem=1GiB,cpu:mem=1GiB:slow=2,cpu:mem=1GiB; else
  devices=cpu:mem=1GiB:slow=2,cpu:mem=1GiB; fi
np=$((2 * per_node))
# The emulated nodes share this machine's cores, but each rank sizes its threads by its own
# node's ranks: give each rank its part of the machine (at least one thread).
threads=$(( $(nproc) / np )); [ "$threads" -ge 1 ] || threads=1
args=(train --data "$data" --model gpt-nano --seq 128 --batch 16 --steps "$steps" --warmup 2 --eval-interval 0
      --eval-windows 2 --ckpt-interval 0 --seed 7 --devices "$devices" --drift-threshold 0 --threads "$threads" --quiet)
export GPUMIX_CACHE=-  # every run profiles afresh, under the load it runs in
# Across nodes the prefetched gathers run on a thread of their own; GPUMIX_BACKGROUND_GATHERS=0
# in the environment of this script keeps them on the ranks' thread (to compare).
export GPUMIX_BACKGROUND_GATHERS=${GPUMIX_BACKGROUND_GATHERS:-1}
first=$((steps / 2)) last=$((steps / 2 + 2)); [ $last -le "$steps" ] || last=$steps
trace() { echo "--trace $work/$1.trace.json --trace-steps $first:$last"; }  # NAME -> the flags
breakdown=""  # the second table's rows
summary() {  # LOG -> the table's columns after "where | sharding"
  python3 - "$1" <<'EOF'
import json, sys
fin = [json.loads(l) for l in open(sys.argv[1]) if '"final"' in l][-1]
s, b, c = fin["step_ms"], fin["busy_ms"], fin.get("collectives", {})
ratios = [m / p for m, p in zip(b["measured"], b["predicted"]) if p > 0]
def pm(k):
    if k not in c: return "-"
    x = c[k]
    form = {"hierarchical": " hier", "flat": ""}.get(x.get("form", ""), "")
    return "%.2f / %.2f%s" % (x["predicted_ms"], x["measured_ms"], form)
print("%.0f | %.0f | %.2f | %.2f-%.2f | %s | %s | %s" % (s["measured"], s["predicted"], s["ratio"], min(ratios),
      max(ratios), pm("all_gather"), pm("reduce_scatter"), pm("all_reduce")))
EOF
}
sharding_name() { [ "$1" = full ] && echo full || echo "hybrid, groups of $1"; }
echo "| where | sharding | step ms measured | predicted | ratio | compute per rank, measured / predicted | AG per block ms pred / meas | RS pred / meas | AR pred / meas |"
echo "|---|---|---|---|---|---|---|---|---|"
for sharding in $shardings; do
  # shellcheck disable=SC2046
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np $np -x GPUMIX_CACHE \
    "$gpumix" "${args[@]}" --sharding "$sharding" --out "$work/host-$sharding" $(trace "host-$sharding") \
    > "$work/host-$sharding.txt" 2>&1 || { cat "$work/host-$sharding.txt"; exit 1; }
  row="one host ($np ranks), shared memory | $(sharding_name "$sharding")"
  echo "| $row | $(summary "$work/host-$sharding/log.jsonl") |"
  breakdown+="| $row | $(python3 "$here/step_breakdown.py" "$work/host-$sharding" "$work/host-$sharding.trace.json") |"$'\n'
done
for rate in $rates; do
  # One cluster per rate, every sharding run on it.
  runs=""
  for sharding in $shardings; do
    runs+="mpirun --hostfile \$GPUMIX_CLUSTER_HOSTFILE -np $np -x GPUMIX_CACHE -x GPUMIX_BACKGROUND_GATHERS $gpumix ${args[*]} --sharding $sharding "
    runs+="--out $work/$rate-$sharding $(trace "$rate-$sharding") > $work/$rate-$sharding.txt 2>&1 || "
    runs+="{ cat $work/$rate-$sharding.txt; exit 1; }; "
  done
  "$here/emulated_cluster.sh" with --nodes 2 --slots "$per_node" --rate "$rate" -- bash -c "$runs" > "$work/cluster-$rate.txt" 2>&1 ||
    { cat "$work/cluster-$rate.txt"; exit 1; }
  for sharding in $shardings; do
    row="2 nodes x $per_node rank$([ "$per_node" = 1 ] || echo s), link $rate | $(sharding_name "$sharding")"
    echo "| $row | $(summary "$work/$rate-$sharding/log.jsonl") |"
    breakdown+="| $row | $(python3 "$here/step_breakdown.py" "$work/$rate-$sharding" "$work/$rate-$sharding.trace.json") |"$'\n'
  done
done
echo
echo "Where the traced steps ($first-$last) went, ms, measured / predicted (median over the steps):"
echo
echo "| where | sharding | step | compute (the rank with the most) | its collectives and waits for them | other |"
echo "|---|---|---|---|---|---|"
printf '%s' "$breakdown"
echo
echo "(gpt-nano, 16 x 128, fp32 where the CPU lacks bf16 else bf16, $steps steps, the first 2 not counted, each run"
echo "profiled afresh; $(nproc) cores; start $start_load; end $(load))"
