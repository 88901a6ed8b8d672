#!/usr/bin/env bash
# Each thread-rank command line of the README, run again under `mpirun` (issue 23: `mpirun
# -np 2 gpumix train --devices ...` was refused with "--ranks is for the local backend"
# though no --ranks was given, and no test ran that line): both forms must train, and give
# the same losses (the same plan computes the same gradient on threads and on processes).
#   mpi_readme_lines.sh GPUMIX MPIRUN CORPUS
set -euo pipefail
gpumix=$1 mpirun=$2 corpus=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The tiny model of tests/tools, a few steps; one OpenMP thread per rank.
common=(--data "$corpus" --model gpt-nano --layers 2 --channels 32 --seq 16 --steps 4 --lr 3e-3
        --warmup 1 --eval-interval 0 --eval-windows 2 --ckpt-interval 0 --seed 5 --threads 1 --quiet)
losses() { python3 -c 'import json,sys; print(" ".join("%.6f" % json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l and "\"step\"" in l))' "$1/log.jsonl"; }
check() {  # NAME NP THREAD-FLAGS... -- MPI-FLAGS...
  local name=$1 np=$2; shift 2
  local thread=() mpi=()
  while [ "$1" != -- ]; do thread+=("$1"); shift; done; shift
  mpi=("$@")
  "$gpumix" train "${common[@]}" "${thread[@]}" --out "$dir/$name-threads" >"$dir/$name-threads.log" 2>&1 ||
    { cat "$dir/$name-threads.log"; echo "FAIL $name: thread ranks"; exit 1; }
  "$mpirun" -np "$np" "$gpumix" train "${common[@]}" "${mpi[@]}" --out "$dir/$name-mpi" >"$dir/$name-mpi.log" 2>&1 ||
    { cat "$dir/$name-mpi.log"; echo "FAIL $name: mpirun -np $np"; exit 1; }
  local a b; a=$(losses "$dir/$name-threads"); b=$(losses "$dir/$name-mpi")
  [ -n "$a" ] || { echo "FAIL $name: no losses logged"; exit 1; }
  echo "$name: threads [$a] mpirun [$b]"
  # fp32 on both, and any plan computes the same gradient as one device up to float
  # rounding (the planner may split a profiled cluster differently in the two runs).
  python3 -c 'import sys; a, b = (list(map(float, s.split())) for s in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) and all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b)) else 1)' "$a" "$b" ||
    { echo "FAIL $name: the losses differ by more than 1e-4 relative"; exit 1; }
}
# README: "Train on 3 ranks as threads of this process ... with an uneven plan"
check plan 3 --dtype fp32 --ranks 3 --batch 8 --batches 1,2,5 --micro-batches 1,1,2 --shares 0,0.3,0.7 -- \
  --dtype fp32 --batch 8 --batches 1,2,5 --micro-batches 1,1,2 --shares 0,0.3,0.7
# README: "Emulated heterogeneous devices, one per rank" (the planner's plan from a
# profile; --ranks from --devices on threads, from -np under mpirun).
devices=cpu:mem=1GiB,cpu:mem=1GiB:slow=2,cpu:mem=256MiB:slow=3
check devices 3 --dtype fp32 --batch 12 --devices "$devices" -- --dtype fp32 --batch 12 --devices "$devices"
# README, "Slow links: local updates between groups": --sync local:H with 2 groups of one rank,
# uneven batches, both outer steps (step 2 and the last) on thread ranks and under mpirun.
check local 2 --dtype fp32 --ranks 2 --batch 8 --batches 5,3 --micro-batches 5,3 --shares 0.5,0.5 --sync local:2 \
  --groups 2 -- --dtype fp32 --batch 8 --batches 5,3 --micro-batches 5,3 --shares 0.5,0.5 --sync local:2 --groups 2
# Between outer steps no collective crosses a group (dist/engine/local_mode.h), under mpirun
# as on threads: each step line's count, 0 at steps 1 and 3, the same on both.
python3 - "$dir/local-threads/log.jsonl" "$dir/local-mpi/log.jsonl" <<'EOF2' || exit 1
import json, sys
counts = []
for path in sys.argv[1:]:
    lines = [json.loads(l) for l in open(path)]
    c = {j["step"]: j["cross_group_collectives"] for j in lines if "step" in j and "final" not in j}
    if [c[1], c[3]] != [0, 0] or min(c[2], c[4]) < 3:
        sys.exit(f"FAIL local: {path}: cross_group_collectives per step {c}: 0 between outer steps, 3 or more at them")
    counts.append(c)
if counts[0] != counts[1]:
    sys.exit(f"FAIL local: cross_group_collectives on threads {counts[0]}, under mpirun {counts[1]}")
print("local: cross_group_collectives per step", counts[1])
EOF2
echo "ok"
