#!/bin/bash
# GPUMix vs PyTorch training throughput on the CPU, side by side: the same model, step
# (forward, backward, global-norm clip, AdamW), shapes and thread count, run interleaved in
# several rounds because shared machines are noisy. Prints each round's tokens/s of both
# and their ratio, then the medians.
#
#   bench/nn/compare.sh [build-dir]        (default build-perf; env: ROUNDS, STEPS, WARMUP,
#                                           THREADS, TORCH_ATTN=bmm|mm)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-perf}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-2}
TORCH_ATTN=${TORCH_ATTN:-bmm}
BENCH=$BUILD/bench/nn/bench_train
[ -x "$BENCH" ] || { echo "no $BENCH: ninja -C $BUILD bench/nn/bench_train" >&2; exit 1; }
export OMP_NUM_THREADS=$THREADS
BLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp  # torch: OpenBLAS (OpenMP), see PEERS.md

CONFIGS=("4 4 256 256 8192 8" "6 6 384 256 8192 8")
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load at start: $(uptime)"
echo "threads $THREADS, $WARMUP warmup + $STEPS timed steps per run (median of the timed steps), $ROUNDS rounds, torch attention: $TORCH_ATTN"

rate() { sed -n 's/^RESULT .* tokens_per_s \([0-9.]*\).*/\1/p'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A G T R
for round in $(seq 1 "$ROUNDS"); do
  for ci in "${!CONFIGS[@]}"; do
    read -r L NH C TT V B <<<"${CONFIGS[$ci]}"
    args=(--L "$L" --NH "$NH" --C "$C" --T "$TT" --V "$V" --B "$B" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --quiet)
    # Alternate which goes first, so neither always runs in the same part of the round.
    if (( (round + ci) % 2 )); then
      g=$("$BENCH" "${args[@]}" | rate)
      t=$(LD_LIBRARY_PATH=$BLAS_DIR /usr/bin/python3 bench/nn/torch_gpt_cpu.py "${args[@]}" --attn "$TORCH_ATTN" | tee /tmp/torch_gpt_cpu.$$.log | rate)
    else
      t=$(LD_LIBRARY_PATH=$BLAS_DIR /usr/bin/python3 bench/nn/torch_gpt_cpu.py "${args[@]}" --attn "$TORCH_ATTN" | tee /tmp/torch_gpt_cpu.$$.log | rate)
      g=$("$BENCH" "${args[@]}" | rate)
    fi
    [ "$round" = 1 ] && [ "$ci" = 0 ] && grep -m1 "BLAS loaded" /tmp/torch_gpt_cpu.$$.log
    r=$(awk -v g="$g" -v t="$t" 'BEGIN {printf "%.2f", g / t}')
    G[$ci]+="$g "; T[$ci]+="$t "; R[$ci]+="$r "
    printf "round %d  L=%s NH=%s C=%s T=%s V=%s B=%s  gpumix %8.1f tok/s  torch %8.1f tok/s  ratio %5.2f  (load %s)\n" \
      "$round" "$L" "$NH" "$C" "$TT" "$V" "$B" "$g" "$t" "$r" "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
rm -f /tmp/torch_gpt_cpu.$$.log
echo "medians:"
for ci in "${!CONFIGS[@]}"; do
  read -r L NH C TT V B <<<"${CONFIGS[$ci]}"
  gm=$(tr ' ' '\n' <<<"${G[$ci]}" | grep . | median)
  tm=$(tr ' ' '\n' <<<"${T[$ci]}" | grep . | median)
  rm_=$(tr ' ' '\n' <<<"${R[$ci]}" | grep . | median)
  printf "  L=%s NH=%s C=%s: gpumix %.1f tok/s, torch %.1f tok/s, ratio of medians %.2f, median of per-round ratios %.2f\n" \
    "$L" "$NH" "$C" "$gm" "$tm" "$(awk -v g="$gm" -v t="$tm" 'BEGIN {printf "%.2f", g / t}')" "$rm_"
done
echo "load at end: $(uptime)"
