#!/usr/bin/env bash
# GPUMix across two emulated nodes, one of them lost mid-run (issue 23, items 2 and 4), in
# one command: builds the cluster (emulated_cluster.sh), profiles the devices under mpirun
# and plans (the profile, the plan file and its table must name every rank's node), trains
# the plan GPUMix makes for its unequal devices (profiled at start-up, planned: full or
# hybrid sharding, whichever its cost model predicts faster) on 2 nodes x 2 ranks through
# `mpirun --hostfile` (after a short local-update run, `--sync local:2`, one group per node,
# checked against thread ranks, its checkpoint resumed on one node as one group), printing
# its collectives predicted vs measured per kind before the first step, kills every process of the second node during a step, checks that the
# surviving ranks end naming the lost node and its ranks, resumes with
# `gpumix train --resume` on the surviving node alone (2 ranks, re-planned), and tears the
# cluster down. The losses of both parts must equal one process's (4 thread ranks, the
# same plan file, not interrupted) within fp32 rounding; the loss curve is printed and
# written.
#
#   lose_node.sh [--quick] [--rate RATE] [--gpumix PATH] [--data CORPUS] [--out DIR]
#
# --quick: the CI form (tests/tools/meson.build): a tiny model, 10 steps, 100 Mbit/s links.
# Default: gpt-nano at batch 16 x 128, 40 steps (the bench form; bench/results/cluster-*.md).
# Exits 77 (skipped) where network namespaces cannot be made (not root, a container).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
quick=0 rate=100mbit gpumix=$root/build/tools/gpumix data=/usr/share/games/fortunes out="" inside=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1; shift ;;
    --rate) rate=$2; shift 2 ;;
    --gpumix) gpumix=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --inside) inside=1; shift ;;
    *) echo "lose_node.sh: unknown option '$1'; the options are --quick --rate RATE --gpumix PATH --data CORPUS --out DIR" >&2; exit 2 ;;
  esac
done
[ -x "$gpumix" ] || { echo "lose_node.sh: no gpumix program at $gpumix; build it (ninja -C build) or pass --gpumix PATH" >&2; exit 1; }
[ -e "$data" ] || { echo "lose_node.sh: no corpus at $data; pass --data CORPUS (Debian's fortunes package gives /usr/share/games/fortunes)" >&2; exit 1; }

if [ $inside = 0 ]; then
  # The machine's load, at the start and the end: the step times hold only for it.
  echo "load at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
  # Outside: make the run folder (removed afterwards unless --out), then go onto the cluster.
  keep=1
  if [ -z "$out" ]; then out=$(mktemp -d /tmp/gpumix-lose-node.XXXXXX); keep=0; fi
  mkdir -p "$out"
  status=0
  args=(--rate "$rate" --gpumix "$gpumix" --data "$data" --out "$out")
  [ $quick = 1 ] && args+=(--quick)
  "$here/emulated_cluster.sh" with --nodes 2 --slots 2 --rate "$rate" -- "$0" --inside "${args[@]}" || status=$?
  echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  [ $keep = 1 ] || rm -rf "$out"
  exit $status
fi

# ---- inside: on the login node of the cluster that is up -----------------------------------
export GPUMIX_CACHE=${GPUMIX_CACHE:--}  # profiled afresh unless a cache is named
read -r -a nodes <<< "$GPUMIX_CLUSTER_NODES"
lost=${nodes[1]} left=${nodes[0]}
if [ $quick = 1 ]; then
  model=(--model gpt-nano --layers 2 --channels 32 --seq 16 --batch 8)
  profile_model=(--model gpt-nano --seq 16) batch=8  # `gpumix profile` takes presets only
  steps=10 ckpt=2 kill_after=5
  # Steps of a few ms could all be over before the kill lands: from step 6 on, the second
  # node's devices run 40x slower (the engine's test-only fault hook, dist/engine/fault.h;
  # timing only, the losses are unchanged), so the kill falls inside step 6.
  slow_after_kill=2:slow:$((kill_after + 1)):40,3:slow:$((kill_after + 1)):40
else
  model=(--model gpt-nano --seq 128 --batch 16)
  profile_model=(--model gpt-nano --seq 128) batch=16
  steps=40 ckpt=10 kill_after=25
fi
# Unequal emulated devices: on each node a fast one and a slow one (mpirun fills the
# hostfile's slots in order: ranks 0, 1 on the first node, 2, 3 on the second).
devices=cpu:mem=1GiB:slow=2,cpu:mem=1GiB,cpu:mem=1GiB:slow=2,cpu:mem=1GiB
# No re-planning on drift (a loaded machine's noise would re-shard mid-run): the reference
# runs the plan file the cluster run started with.
common=(--data "$data" "${model[@]}" --dtype fp32 --steps $steps --lr 3e-3 --warmup 2 --eval-interval 0
        --eval-windows 2 --seed 7 --threads 1 --drift-threshold 0)
losses() {  # LOG -> "step loss" lines, the last record of each step
  python3 -c 'import json,sys
d = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "step" in r and "loss" in r: d[r["step"]] = r["loss"]
for s in sorted(d): print(s, "%.6f" % d[s])' "$1"
}
fail() { echo "FAIL: $*"; exit 1; }
median_ms() { python3 -c 'import json,sys,statistics
t = [json.loads(l).get("ms") for l in open(sys.argv[1]) if "\"step\"" in l]
t = [x for x in t if x is not None][1:]
print("%.0f" % statistics.median(t) if t else "?")' "$1"; }

echo "== 1. the ranks' nodes, as MPI tells them: mpirun gpumix profile, then gpumix plan"
mpirun --hostfile "$GPUMIX_CLUSTER_HOSTFILE" -np 4 "$gpumix" profile --devices "$devices" "${profile_model[@]}" \
  --dtype fp32 --max-micro-batch 2 --repeats 3 --cache - --out "$out/profile.json" > "$out/profile.txt" 2>&1 ||
  { cat "$out/profile.txt"; fail "mpirun gpumix profile failed"; }
"$gpumix" plan --profile "$out/profile.json" --global-batch $batch --out "$out/plan.json" > "$out/plan.txt" 2>&1 ||
  { cat "$out/plan.txt"; fail "gpumix plan failed"; }
grep -E "^ +[0-9]+ " "$out/plan.txt" | sed 's/^/  /'
python3 - "$out" "$left" "$lost" "$rate" <<'EOF'
import json, sys
out, left, lost, rate = sys.argv[1:]
want = [left, left, lost, lost]
prof = json.load(open(out + "/profile.json"))
got = [r.get("node_name") for r in prof["ranks"]]
if got != want: sys.exit(f"FAIL: the profile names the ranks' nodes {got}, not {want}")
if [r["node"] for r in prof["ranks"]] != [0, 0, 1, 1]: sys.exit("FAIL: the profile's node numbers are not 0, 0, 1, 1")
for kind in ("all_gather", "reduce_scatter"):
    c = prof["comm"][kind]
    if "inter_node" not in c: sys.exit(f"FAIL: the profile's {kind} has no inter-node link")
    intra, inter = c["intra_node"]["bandwidth_Bps"], c["inter_node"]["bandwidth_Bps"]
    print(f"  {kind}: intra-node {intra / 1e6:.0f} MB/s, inter-node {inter / 1e6:.1f} MB/s (measured apart)")
plan = json.load(open(out + "/plan.json"))
if [r.get("node_name") for r in plan["ranks"]] != want: sys.exit("FAIL: the plan file does not name the ranks' nodes")
EOF
grep -q "$lost" "$out/plan.txt" || fail "the plan table does not name node $lost"

echo "== 1b. local updates (--sync local:2): one group per node, a given uneven plan, against 4 thread ranks in 2 groups"
# The groups come from the nodes MPI reports (ranks 0, 1 | 2, 3), as --groups 2 makes them
# on threads: the same losses up to fp32 rounding. Local mode runs a given plan (no planner).
local_run=(--data "$data" "${model[@]}" --dtype fp32 --steps 4 --lr 3e-3 --warmup 1 --eval-interval 0
           --eval-windows 2 --seed 7 --threads 1 --ckpt-interval 0 --quiet
           --batches $((3 * batch / 8)),$((batch / 8)),$((batch / 4)),$((batch / 4))
           --micro-batches $((3 * batch / 8)),1,$((batch / 8)),$((batch / 4)) --shares 0.4,0.1,0.2,0.3 --sync local:2)
mpirun --hostfile "$GPUMIX_CLUSTER_HOSTFILE" -np 4 "$gpumix" train "${local_run[@]}" --out "$out/local" \
  > "$out/local.txt" 2>&1 || { cat "$out/local.txt"; fail "mpirun gpumix train --sync local:2 failed"; }
"$gpumix" train "${local_run[@]}" --ranks 4 --groups 2 --out "$out/local-threads" > "$out/local-threads.txt" 2>&1 ||
  { cat "$out/local-threads.txt"; fail "gpumix train --sync local:2 --ranks 4 --groups 2 failed"; }
python3 - "$out/local/log.jsonl" "$out/local-threads/log.jsonl" <<'EOF2'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"step"' in l and '"loss"' in l] for p in sys.argv[1:])
print("  losses: 2 nodes", " ".join("%.6f" % x for x in a), "| threads", " ".join("%.6f" % x for x in b))
if len(a) != 4 or len(a) != len(b) or any(abs(x - y) > 1e-4 * max(1.0, abs(y)) for x, y in zip(a, b)):
    sys.exit("FAIL: local updates on 2 nodes and on thread ranks differ by more than 1e-4 relative")
EOF2
# Its checkpoint (written after the last outer step: 2 groups' moments, the outer momentum)
# resumed on one node's 2 ranks: one group now, starting from the groups' token-weighted mean.
mpirun --host "$left:2" -np 2 "$gpumix" train --data "$data" "${model[@]}" --dtype fp32 --steps 6 --lr 3e-3 \
  --warmup 1 --eval-interval 0 --eval-windows 2 --seed 7 --threads 1 --ckpt-interval 0 --batches $((batch / 2)),$((batch / 2)) \
  --micro-batches $((batch / 2)),$((batch / 2)) --shares 0.5,0.5 --sync local:2 --resume "$out/local" \
  --out "$out/local-resumed" > "$out/local-resumed.txt" 2>&1 ||
  { cat "$out/local-resumed.txt"; fail "the local-update checkpoint did not resume on node $left"; }
grep -q "holds the AdamW moments of 2 groups.*token-weighted mean" "$out/local-resumed.txt" ||
  { cat "$out/local-resumed.txt"; fail "the resume did not say it starts from the 2 groups' token-weighted mean"; }
grep -q '"step":6,' "$out/local-resumed/log.jsonl" || fail "the resumed local-update run did not reach step 6"
echo "  resumed on $left alone (one group): $(grep -o 'the checkpoint holds the AdamW moments of 2 groups[^;]*' "$out/local-resumed.txt" | head -1)"

echo "== 2. mpirun --hostfile: 2 nodes x 2 ranks, links $(cat /run/"${GPUMIX_CLUSTER_PREFIX:-gpumix}"-cluster/shaped)"
echo "     the devices profiled and planned by gpumix train, the plan's collectives checked before step 1"
GPUMIX_FAULT=${slow_after_kill:-} mpirun --hostfile "$GPUMIX_CLUSTER_HOSTFILE" -np 4 -x GPUMIX_FAULT -x GPUMIX_CACHE \
  "$gpumix" train "${common[@]}" --devices "$devices" --ckpt-interval $ckpt --out "$out/run" > "$out/cluster.txt" 2>&1 &
mpirun_pid=$!
# Wait until step $kill_after is logged, then lose the second node during the next step.
for ((i = 0; i < 1200; i++)); do
  if [ -f "$out/run/log.jsonl" ] && grep -q "\"step\": *$kill_after[,}]" "$out/run/log.jsonl"; then break; fi
  kill -0 $mpirun_pid 2>/dev/null || break
  sleep 0.1
done
kill -0 $mpirun_pid 2>/dev/null || { cat "$out/cluster.txt"; fail "the cluster run ended before step $kill_after was logged"; }
grep -E "^plan \(gpumix\)|^step [0-9.]+ s =" "$out/cluster.txt" | sed 's/^/  /'
grep -A8 "^predicted vs measured, per collective kind" "$out/cluster.txt" | grep -E "^predicted|ms predicted" | sed 's/^/  /' ||
  fail "the cluster run printed no collectives predicted vs measured"
t0=$(date +%s.%N)
"$GPUMIX_CLUSTER" kill "$lost"
rc=0; wait $mpirun_pid || rc=$?
dt=$(python3 -c "import sys; print('%.1f' % ($(date +%s.%N) - $t0))")
echo "node $lost lost after step $kill_after: mpirun ended with status $rc after $dt s"
grep -E "gpumix: error: .*lost" "$out/cluster.txt" | sed 's/^/  /' || true
[ "$rc" != 0 ] || fail "mpirun ended with status 0 though a node was lost"
# How soon they end is the machine's load's to decide; that each survivor names the lost node
# says the peer watch ended them, not the collectives' 300 s timeout (past this test's).
for r in 0 1; do
  grep -q "rank $r (node $left): lost node $lost (ranks 2, 3)" "$out/cluster.txt" ||
    { cat "$out/cluster.txt"; fail "rank $r did not report 'lost node $lost (ranks 2, 3)'"; }
done

echo "== 3. one process, 4 thread ranks, the cluster run's plan file, not interrupted (the reference)"
[ -f "$out/run/plan.json" ] || fail "the cluster run wrote no plan file ($out/run/plan.json)"
"$gpumix" train "${common[@]}" --ranks 4 --plan "$out/run/plan.json" --devices "$devices" --ckpt-interval 0 --quiet \
  --out "$out/reference" > "$out/reference.txt" 2>&1 || { cat "$out/reference.txt"; fail "the reference run failed"; }

echo "== 4. --resume on the node left ($left): 2 ranks, re-planned from its devices"
mpirun --host "$left:2" -np 2 "$gpumix" train "${common[@]}" --devices cpu:mem=1GiB:slow=2,cpu:mem=1GiB \
  --resume "$out/run" --out "$out/resumed" > "$out/resume.txt" 2>&1 || { cat "$out/resume.txt"; fail "the resumed run failed"; }
grep -m1 -i "resum" "$out/resume.txt" | sed 's/^/  /' || true

# Loss curve: reference, the 4-rank run up to its loss, the 2-rank resume from its checkpoint.
python3 - "$out" $steps $ckpt <<'EOF'
import json, sys
out, steps, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def read(path):
    d = {}
    for l in open(path):
        r = json.loads(l)
        if "step" in r and "loss" in r: d[r["step"]] = r["loss"]
    return d
ref, before, resumed = (read(out + f) for f in ("/reference/log.jsonl", "/run/log.jsonl", "/resumed/log.jsonl"))
first = min(resumed) if resumed else 0
if sorted(resumed) != list(range(first, steps + 1)) or (first - 1) % ckpt != 0 or first - 1 > max(before):
    sys.exit(f"FAIL: the resumed run logged steps {sorted(resumed)}: not from a checkpoint (every {ckpt} steps, "
             f"the lost run reached step {max(before)}) to {steps}")
lines = [f"resumed from the checkpoint of step {first - 1}; the lost run had logged steps 1-{max(before)}",
         "step | one process, 4 thread ranks | 2 nodes x 2 ranks (node 1 lost) | resumed on node 0, 2 ranks"]
bad = []
for s in range(1, steps + 1):
    a, b = before.get(s), resumed.get(s)
    lines.append("%4d | %.6f | %s | %s" % (s, ref[s], "-" if a is None else "%.6f" % a, "-" if b is None else "%.6f" % b))
    bad += [(s, x, ref[s]) for x in (a, b) if x is not None and abs(x - ref[s]) > 1e-4 * max(1.0, abs(ref[s]))]
open(out + "/loss_curve.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
if bad: sys.exit("FAIL: losses differ from one process's by more than 1e-4 relative: " +
                 ", ".join("step %d %.6f vs %.6f" % x for x in bad))
EOF
echo "median step: reference $(median_ms "$out/reference/log.jsonl") ms, cluster (until the loss) $(median_ms "$out/run/log.jsonl") ms, resumed $(median_ms "$out/resumed/log.jsonl") ms"
echo "ok"
