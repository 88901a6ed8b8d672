#!/usr/bin/env bash
# Local updates against every-step synchronisation across slow links (issue 29, item 4), on
# the emulated cluster (emulated_cluster.sh): K nodes of one rank each (one core per rank
# where the machine has them), the first node's device 2x slower (`slow=2`), links shaped
# at each rate. For one token budget (--steps x 16 x 128 tokens of gpt-nano), per rate:
#
#   every-step, full sharding      the plan gpumix makes for the devices (--sharding full)
#   every-step, hybrid             groups of one node, replicated across them (--sharding 1)
#   local updates, H in --H        --sync local:H, one group per node, planned by gpumix at
#                                  start-up (each group's rows by its measured speed)
#
# and the fast node alone (what `gpumix plan` picks left to itself on slow links), all under
# `mpirun --hostfile`; the every-step plans from one profile measured on the cluster before
# the runs. Each run logs its steps (log.jsonl); around it
# the bytes every node's link sent (the veth's counters: everything that crossed the switch)
# are read at its start, once its step 1 is logged, and at its end: bytes per token count
# steps 2 on, so that start-up (MPI's launch, a planner's profile) is left out. The rounds interleave the modes (every mode once per
# round). Then a Markdown report (stdout): per rate and mode, the validation loss at the
# budget, the training wall time (the steps' ms: start-up and validation left out), bytes
# across the links per token, the time each reaches the fastest every-step run's final
# validation loss, and in local mode each group's wait for the other (max over outer
# periods, % of the period); and per rate a picture of validation loss against wall time
# (`gpumix plot`). The load average at the start and the end is in the report.
#
#   local_sync_runs.sh [--gpumix PATH] [--data CORPUS] [--steps N] [--rates "1gbit 100mbit"]
#                      [--H "10 50 100"] [--nodes K] [--rounds R] [--outer "LR MOMENTUM"]
#                      [--longer "300 400" [--longer-only]] [--delay-ms D] --out DIR
#
# --delay-ms D: every collective whose ranks span nodes waits D ms before it starts
# (GPUMIX_TEST_CROSS_NODE_DELAY_MS, dist/comm/comm_mpi.cpp; the kernel here has no netem):
# the links' latency, D = half the round trip (25 for 50 ms), in the profile (so the plans
# price it) and in every run. Local updates pay it only at their outer steps
# (dist/engine/local_mode.h); every-step training at each of its step's collectives.
#
# --longer: local runs of more steps as well (each its own schedule to its end), to time
# when local updates reach the every-step runs' final validation loss where they do not
# within the budget. --longer-only: only those, added to the runs already in --out.
#
# Needs root (network namespaces); exits 77 where they cannot be made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpumix=$root/build/tools/gpumix data=/usr/share/games/fortunes steps=200 rates="1gbit 100mbit" hs="10 50 100"
nodes=2 rounds=1 out="" inside="" rate="" outer_lr_mom="0.7 0.9" longer="" longer_only=0 delay_ms=0
while [ $# -gt 0 ]; do
  case $1 in
    --gpumix) gpumix=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --H) hs=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --outer) outer_lr_mom=$2; shift 2 ;;
    --longer) longer=$2; shift 2 ;;
    --longer-only) longer_only=1; shift ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --inside) inside=1; rate=$2; shift 2 ;;
    *) echo "local_sync_runs.sh: unknown option '$1'; the options are --gpumix --data --steps --rates --H --nodes --rounds --outer --longer --longer-only --delay-ms --out" >&2; exit 2 ;;
  esac
done
die() { echo "local_sync_runs.sh: $*" >&2; exit 1; }
[ -n "$out" ] || die "--out DIR is required (the runs' folders and the pictures stay there)"
[ -x "$gpumix" ] || die "no gpumix program at $gpumix; build it (ninja -C build) or pass --gpumix PATH"
[ -e "$data" ] || die "no corpus at $data; pass --data CORPUS (Debian's fortune-mod gives /usr/share/games/fortunes)"
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 10 ] || die "--steps $steps: give at least 10"
[[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 2 ] || die "--nodes $nodes: local updates need at least 2 nodes"
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || die "--rounds $rounds: give at least 1"
[[ $delay_ms =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--delay-ms $delay_ms: give the delay in ms (0 or more, e.g. 25 for a 50 ms round trip)"
for l in $longer; do
  [[ $l =~ ^[0-9]+$ ]] && [ "$l" -gt "$steps" ] || die "--longer: $l must be a number of steps above --steps $steps"
done
for h in $hs; do
  for l in $longer; do [ $((l % h)) = 0 ] || die "--longer: $l is not a multiple of H = $h"; done
  [[ $h =~ ^[0-9]+$ ]] && [ "$h" -ge 1 ] && [ $((steps % h)) = 0 ] ||
    die "--H: $h must divide --steps $steps (validation runs after outer steps only)"
done
read -r outer_lr outer_mom <<< "$outer_lr_mom"
outer=(--outer-lr "$outer_lr" --outer-momentum "$outer_mom")  # DiLoCo's 0.7 0.9 unless --outer
batch=16 seq=128
# The first node's device is 2x slower; one rank per node.
devices=cpu:mem=1GiB:slow=2
for ((i = 1; i < nodes; i++)); do devices+=,cpu:mem=1GiB; done
# Validation on the same first 16 windows every 10 steps (every H in local mode: only after
# an outer step do the groups hold the same weights), on all windows at the end.
common=(--data "$data" --model gpt-nano --seq $seq --batch $batch --eval-windows 16 --seed 7
        --threads 1 --ckpt-interval 0 --drift-threshold 0 --quiet)

if [ -z "$inside" ]; then
  mkdir -p "$out"; out=$(realpath "$out")
  load() { echo "$(date -u +%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
  start_load=$(load)
  for r in $rates; do
    [ $longer_only = 0 ] || [ -d "$out/$r" ] || die "--longer-only: no runs at $r in $out to add to"
    log="$out/cluster-$r$([ $longer_only = 0 ] || echo -longer).txt"
    "$here/emulated_cluster.sh" with --nodes "$nodes" --slots 1 --rate "$r" -- \
      "$0" --inside "$r" --gpumix "$gpumix" --data "$data" --steps "$steps" --H "$hs" --nodes "$nodes" \
      --rounds "$rounds" --outer "$outer_lr_mom" --longer "$longer" --delay-ms "$delay_ms" $([ $longer_only = 0 ] || echo --longer-only) --out "$out" > "$log" 2>&1 || { tail -30 "$log"; exit 1; }
  done
  end_load=$(load)
  for r in $rates; do  # one picture per rate: every run of the last round
    runs=() labels=()
    for d in "$out/$r"/r"$rounds"-*/ "$out/$r"/longer-*/; do
      [ -d "$d" ] || continue
      name=$(basename "$d"); name=${name#r"$rounds"-}; runs+=("$d"); labels+=("${name/longer-local-H/local-H}")
    done
    "$gpumix" plot "${runs[@]}" --labels "$(IFS=,; echo "${labels[*]}")" --svg "$out/loss-vs-time-$r.svg" \
      --title "gpt-nano, $nodes nodes (one 2x slower), links $r: validation loss against training wall time" >/dev/null
  done
  python3 "$here/local_sync_report.py" "$out" "$rates" "$rounds" "$steps" $((batch * seq)) "$nodes" "$longer"
  echo
  echo "($(nproc) cores; gpt-nano, $batch x $seq tokens per step, $steps steps, devices $devices, one rank per node;"
  echo " local updates with --outer-lr $outer_lr --outer-momentum $outer_mom, Nesterov;"
  echo " each cross-node collective delayed $delay_ms ms (GPUMIX_TEST_CROSS_NODE_DELAY_MS; round trip $(python3 -c "print(2 * $delay_ms)") ms);"
  echo " start $start_load; end $end_load)"
  exit 0
fi

# ---- inside: on the login node of a cluster at $rate ----------------------------------------
work=$out/$rate
mkdir -p "$work"
read -r -a cluster_nodes <<< "$GPUMIX_CLUSTER_NODES"
link_bytes() {  # the bytes every node's link has sent, summed
  local n total=0 b
  for n in "${cluster_nodes[@]}"; do
    b=$(ip -n "$n" -j -s link show eth0 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])')
    total=$((total + b))
  done
  echo $total
}
run() {  # NAME MPIRUN-ARGS... -- TRAIN-ARGS...: one training run; its link bytes in NAME/bytes.json
  local name=$1; shift
  local launch=() before first="" after pid rc=0
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  before=$(link_bytes)
  mpirun "${delay[@]}" "${launch[@]}" "$gpumix" train "${common[@]}" --steps "${run_steps:-$steps}" "$@" --out "$work/$name" \
    > "$work/$name.txt" 2>&1 &
  pid=$!
  # The bytes once step 1 is logged: what follows is the training's (steps 2 on), without
  # the start-up's (launch, tokenizer, a planner's profile).
  while kill -0 $pid 2>/dev/null; do
    if [ -z "$first" ] && grep -qs '"step":1,' "$work/$name/log.jsonl"; then first=$(link_bytes); fi
    sleep 0.05
  done
  wait $pid || rc=$?
  [ $rc = 0 ] || { cat "$work/$name.txt"; die "$name failed (status $rc)"; }
  [ -n "$first" ] || die "$name: step 1 was never seen logged while it ran"
  after=$(link_bytes)
  echo "{\"total\": $((after - before)), \"after_step_1\": $((after - first))}" > "$work/$name/bytes.json"
  echo "$name: $((after - first)) bytes across the links after step 1 ($((after - before)) in all)"
}
all=(--hostfile "$GPUMIX_CLUSTER_HOSTFILE" -np "$nodes")  # a rank on every node
delay=(-x "GPUMIX_TEST_CROSS_NODE_DELAY_MS=$delay_ms")  # 0: none
[ $longer_only = 1 ] || {
echo "== profile and plans ($(cat /run/"${GPUMIX_CLUSTER_PREFIX:-gpumix}"-cluster/shaped); cross-node collectives delayed $delay_ms ms)"
mpirun "${delay[@]}" --hostfile "$GPUMIX_CLUSTER_HOSTFILE" -np "$nodes" "$gpumix" profile --devices "$devices" --model gpt-nano \
  --seq $seq --cache - --out "$work/profile.json" > "$work/profile.txt" 2>&1 || { cat "$work/profile.txt"; die "profile failed"; }
for s in full 1; do
  "$gpumix" plan --profile "$work/profile.json" --global-batch $batch --sharding $s --no-leave-out --out "$work/plan-$s.json" \
    > "$work/plan-$s.txt" 2>&1 || { cat "$work/plan-$s.txt"; die "plan --sharding $s failed"; }
done
# What gpumix plan picks left to itself where the links are slow: the slow node left out.
"$gpumix" plan --profile "$work/profile.json" --global-batch $batch --out "$work/plan-auto.json" > "$work/plan-auto.txt" 2>&1 ||
  { cat "$work/plan-auto.txt"; die "plan failed"; }
for ((round = 1; round <= rounds; round++)); do
  # The last node's device alone (a fast one): no link at all.
  run "r$round-every-step-one-fast-node" --host "${cluster_nodes[nodes - 1]}:1" -np 1 -- \
    --devices cpu:mem=1GiB --eval-interval 10
  run "r$round-every-step-full" "${all[@]}" -- --devices "$devices" --plan "$work/plan-full.json" --eval-interval 10
  run "r$round-every-step-hybrid" "${all[@]}" -- --devices "$devices" --plan "$work/plan-1.json" --eval-interval 10
  for h in $hs; do
    run "r$round-local-H$h" "${all[@]}" -- --devices "$devices" --eval-interval "$h" --sync "local:$h" "${outer[@]}"
  done
done
}
for run_steps in $longer; do
  for h in $hs; do
    run "longer-local-H$h-$run_steps" "${all[@]}" -- --devices "$devices" --eval-interval "$h" --sync "local:$h" "${outer[@]}"
  done
done
