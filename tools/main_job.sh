#!/usr/bin/env bash
# The main job: install and build the gpumix program, then train a BPE tokenizer and a small GPT on the
# fortunes corpus (Debian's `fortunes` package, BSD-licensed English) on an emulated
# heterogeneous cluster of three CPU ranks: a fast one with little memory, a slow one (3x)
# with much, and one in between (1.5x). GPUMix profiles the three devices, prints its plan
# (each rank's batch, micro-batch and share of the training state), trains with each rank's
# busy share per step, re-plans if a device drifts, prints generated text, and draws the
# run (<out>/run.svg: losses, tokens/s, busy shares; docs/run.svg is one).
# DEVICES=... overrides the cluster (e.g. DEVICES=cpu for one rank), STEPS the steps.
# It computes in bf16 where the CPU has avx512_bf16 or AMX (the default of `gpumix train`,
# fp32 elsewhere; the settings table says which). In fp32 (an earlier build, build done):
# 400 steps at a median 0.38 s, the plan's prediction 0.386 s, each rank's compute within
# 0.92-1.00x of it, validation loss 5.43 vs 6.91; a run whose fast rank's core was busy for
# ~25 steps re-planned there and back.
# It installs build/'s packages and builds the gpumix program alone (tools/setup.sh --main;
# the tests, benchmarks and the sanitizer build's clang and llvm are the test command's, on
# the same build/; the CUDA backend only when DEVICES names a GPU): 111 build steps, 92
# compiles, the program's own sources as two unity files (tools/meson.build says why).
# From a fresh clone, quiet (load 0.54 at the start, 2.29 at the end: its own build), the
# packages already installed, no ccache, bf16: 3 min 27 s in all (2026-12-03): apt's check
# and meson setup a few seconds, the build 155 s, the training ~45 s (profile, 400 steps at
# ~0.1 s, validations, checkpoints), selfcheck, sample and plot ~3 s; validation loss 5.4316
# vs the unigram baseline's 6.9114. On a new machine apt's downloads and installs come on top.
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${DEVICES:-cpu:mem=24MiB,cpu:mem=1GiB:slow=3,cpu:mem=256MiB:slow=1.5}
# It builds what it runs: the CUDA backend only for a device list that names a GPU.
if [[ $devices == *cuda* ]]; then bash tools/setup.sh --main --cuda; else bash tools/setup.sh --main; fi
out=${OUT_DIR:-runs/fortunes-$(date +%Y%m%d-%H%M%S)}
./build/tools/gpumix selfcheck
./build/tools/gpumix train --data /usr/share/games/fortunes --model gpt-nano \
    --devices "$devices" \
    --steps "${STEPS:-400}" --batch 16 --seq 128 --lr 2e-3 --eval-interval 100 \
    --ckpt-interval 200 --out "$out"
echo
echo "---- sample ----"
./build/tools/gpumix generate --ckpt "$out" --prompt "The meaning of life" --tokens 120 \
    --temperature 0.8 --top-k 40
./build/tools/gpumix plot "$out" --svg "$out/run.svg"
