#!/usr/bin/env bash
# The main job: install and build GPUMix, then train a BPE tokenizer and a small GPT on the
# fortunes corpus (Debian's `fortunes` package, BSD-licensed English) on the CPU, and print
# generated text. Measured on a 2-core machine (sharing it with a CI build): 400 steps in
# 8.5 minutes (6.5 CPU-minutes; 220 ms/step once the machine was quiet), validation loss
# 5.43 vs the unigram baseline's 6.91: 1.48 nats below.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
out=${OUT_DIR:-runs/fortunes-$(date +%Y%m%d-%H%M%S)}
./build/tools/gpumix selfcheck
./build/tools/gpumix train --data /usr/share/games/fortunes --model gpt-nano \
    --steps "${STEPS:-400}" --batch 16 --seq 128 --lr 2e-3 --eval-interval 100 \
    --ckpt-interval 200 --out "$out"
echo
echo "---- sample ----"
./build/tools/gpumix generate --ckpt "$out" --prompt "The meaning of life" --tokens 120 \
    --temperature 0.8 --top-k 40
