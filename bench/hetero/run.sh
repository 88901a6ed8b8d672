#!/usr/bin/env bash
# bench/hetero: GPUMix vs even vs proportional sharding on emulated heterogeneous clusters of
# three CPU ranks (docs/design.md "Devices and emulation"), measured side by side in one run:
# tokens/s, out-of-memory outcomes, predicted vs measured compute time per rank and step
# time, predicted vs measured peak memory per rank. Writes bench/results/hetero.md.
#   bench/hetero/run.sh                 the three clusters below, 10 steps per run
#   STEPS=20 bench/hetero/run.sh        longer runs
#   GPUMIX=build/tools/gpumix           the program (default: build/tools/gpumix)
# Every planner of a cluster runs on the same device profiles (measured once per device,
# cached in a temporary folder), so the comparison is of plans, not of profiling noise.
set -euo pipefail
cd "$(dirname "$0")/../.."
gpumix=${GPUMIX:-build/tools/gpumix}
steps=${STEPS:-10}
corpus=/usr/share/games/fortunes
work=$(mktemp -d /tmp/gpumix-hetero.XXXXXX)
trap 'rm -rf "$work"' EXIT
export GPUMIX_CACHE=$work/profiles

# name | devices: speed skew, equal memory (the cluster of the issue: slowdowns 1, 1.5, 3);
# memory skew, equal speed (the small device cannot hold a third of the training state);
# both (a fast device with little memory, slower ones with much). Three emulated ranks share
# this machine's two cores (devices of a real cluster do not): each cluster needs at most
# 2.0 cores (the speed cluster: 1 + 2/3 + 1/3), the ranks are packed onto cores by that
# demand, and a slow device's kernels take F x their CPU time, so a neighbour on the same
# core does not change its speed (dist/engine/launch.h, core/ops.cpp).
clusters=(
  "speed|cpu:mem=1GiB,cpu:mem=1GiB:slow=1.5,cpu:mem=1GiB:slow=3"
  "memory|cpu:mem=160MiB:slow=2,cpu:mem=160MiB:slow=2,cpu:mem=14MiB:slow=2"
  "both|cpu:mem=14MiB:slow=1.5,cpu:mem=1GiB:slow=4.5,cpu:mem=256MiB:slow=2.25"
)
planners=(gpumix even proportional)

"$gpumix" tokenizer train --data "$corpus" --vocab 4096 --out "$work/tokenizer.bpe" >/dev/null
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for c in "${clusters[@]}"; do
  name=${c%%|*}
  devices=${c#*|}
  for p in "${planners[@]}"; do
    out="$work/$name-$p"
    echo "== $name / $p: --devices $devices" >&2
    set +e
    "$gpumix" train --data "$corpus" --tokenizer "$work/tokenizer.bpe" --model gpt-nano --seq 128 \
      --batch 24 --steps "$steps" --lr 1e-3 --eval-interval 0 --eval-windows 2 --ckpt-interval 0 \
      --devices "$devices" --plan "$p" --drift-threshold 0 --threads 2 --quiet --out "$out" \
      >"$out.txt" 2>&1
    echo $? >"$out.rc"
    set -e
    tail -n 2 "$out.txt" >&2
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 bench/hetero/summarize.py "$work" "$steps" "$load_before" "$load_after" "${clusters[@]}" \
  | tee bench/results/hetero.md
