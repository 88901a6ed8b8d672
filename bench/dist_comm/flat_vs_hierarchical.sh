#!/usr/bin/env bash
# Flat vs hierarchical uneven all-gather-v / reduce-scatter-v across emulated nodes (issue 23
# item 3), side by side, at two link bandwidths. For the lead to run on a quiet machine:
#
#   bash bench/dist_comm/flat_vs_hierarchical.sh [OUT_DIR]       (root; default bench/results/hier)
#   NODES=2 SLOTS=2 RATES="1gbit 100mbit" SIZES='64KiB|1024KiB|8192KiB' bash bench/dist_comm/...
#
# Needs the cluster helper's tools/cluster/emulated_cluster.sh (network namespaces joined by
# tbf-shaped veth links, Open MPI over TCP between nodes and shared memory within one) and
# a build with build/bench/dist_comm/bench_collectives. For each rate it brings a cluster of
# NODES x SLOTS ranks up, runs bench_collectives under `mpirun --hostfile` (every benchmark
# in three forms: flat = Open MPI's own collective, hierarchical = dist/comm/hierarchical.h's
# three stages forced, auto = TopologyComm's cost-model choice with the links bench_collectives
# measured first, printed as "links measured for auto"), and
# tears it down (also on failure: `with` does). Output: OUT_DIR/RATE.json (Google Benchmark)
# and OUT_DIR/RATE.txt; a summary table of flat vs hierarchical time per case at the end,
# with the load average at the start and at the end (OUT_DIR/load.txt too): on a machine
# others share, the times hold only for that load.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:-bench/results/hier}")
nodes=${NODES:-2} slots=${SLOTS:-2} rates=${RATES:-"1gbit 100mbit"}
sizes=${SIZES:-'64KiB|1024KiB|8192KiB'}
cluster=${CLUSTER_SCRIPT:-tools/cluster/emulated_cluster.sh}  # another checkout's: CLUSTER_SCRIPT=...
bench=build/bench/dist_comm/bench_collectives
[ "$(id -u)" = 0 ] || { echo "flat_vs_hierarchical.sh: needs root (network namespaces); skipped" >&2; exit 77; }
[ -x "$bench" ] || { echo "flat_vs_hierarchical.sh: build $bench first (ninja -C build bench/dist_comm/bench_collectives)" >&2; exit 1; }
[ -f "$cluster" ] || { echo "flat_vs_hierarchical.sh: $cluster is missing (the emulated nodes of issue 23 items 1-2)" >&2; exit 1; }
[ -z "${GPUMIX_COLLECTIVES:-}" ] || { echo "unset GPUMIX_COLLECTIVES: it overrides the forced forms" >&2; exit 1; }
mkdir -p "$out"
np=$((nodes * slots))
load() { echo "$(date -u +%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"; }
echo "start $(load)" | tee "$out/load.txt"
for rate in $rates; do
  echo "== $nodes nodes x $slots ranks, links shaped at $rate"
  bash "$cluster" with --nodes "$nodes" --slots "$slots" --rate "$rate" -- \
    bash -c "mpirun --hostfile \"\$GPUMIX_CLUSTER_HOSTFILE\" -np $np $PWD/$bench \
      --benchmark_filter='/($sizes)' --benchmark_min_time=${MIN_TIME:-0.2} \
      --benchmark_out=$out/$rate.json --benchmark_out_format=json" | tee "$out/$rate.txt"
done
# Side by side: per op / skew / size, flat vs hierarchical (and what auto ran), per rate.
python3 - "$out" $rates <<'PY'
import json, sys, re
out, rates = sys.argv[1], sys.argv[2:]
print(f"{'rate':>8} {'case':<40} {'flat us':>10} {'hier us':>10} {'hier/flat':>9}  auto ran")
for rate in rates:
    rows = {}
    for b in json.load(open(f"{out}/{rate}.json"))["benchmarks"]:
        m = re.match(r"(\w+)/mpi/(flat|hierarchical|auto)/(.+)/real_time", b["name"])
        if not m: continue
        rows.setdefault((m.group(1), m.group(3)), {})[m.group(2)] = b
    for (op, case), f in sorted(rows.items()):
        if "flat" not in f or "hierarchical" not in f: continue
        fl, hi = f["flat"]["real_time"], f["hierarchical"]["real_time"]
        ran = f.get("auto", {}).get("label", "").rsplit("ran ", 1)[-1]
        print(f"{rate:>8} {op + '/' + case:<40} {fl:>10.0f} {hi:>10.0f} {hi / fl:>9.2f}  {ran}")
PY
echo "end $(load)" | tee -a "$out/load.txt"
