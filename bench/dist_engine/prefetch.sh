#!/usr/bin/env bash
# Step time of the sharded engine with and without prefetching the next unit's gather,
# interleaved over rounds (the machine is noisy): 3 thread ranks, an uneven plan.
# Usage: bench/dist_engine/prefetch.sh [BUILD_DIR] [ROUNDS]   (needs a tokenizer of fortunes:
# TOKENIZER=path, default runs/fortunes/tokenizer.bpe from the main job)
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
tok=${TOKENIZER:-runs/fortunes/tokenizer.bpe}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--data /usr/share/games/fortunes --tokenizer "$tok" --model gpt-nano --batch 12 --seq 64
        --steps 12 --eval-interval 0 --quiet --ranks 3 --batches 2,4,6 --micro-batches 1,2,3
        --shares 0.2,0.3,0.5)
for round in $(seq "$rounds"); do
  for mode in prefetch no-prefetch; do
    flag=()
    [ "$mode" = no-prefetch ] && flag=(--no-prefetch)
    "$build/tools/gpumix" train "${common[@]}" "${flag[@]}" --out "$work/$mode-$round" >/dev/null 2>&1
    python3 -c "
import json, statistics
ms = [json.loads(l)['ms'] for l in open('$work/$mode-$round/log.jsonl') if '\"ms\"' in l][2:]
print(f'round $round  $mode  median {statistics.median(ms):7.1f} ms/step')"
  done
done
