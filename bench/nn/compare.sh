#!/bin/bash
# GPUMix vs PyTorch training throughput on the CPU, side by side, in four modes: GPUMix fp32
# and bf16 (bench_train --dtype), PyTorch fp32 and bf16 autocast (torch_gpt_cpu.py --dtype):
# the same model, step (forward, backward, global-norm clip, AdamW), shapes and thread
# count, interleaved in each round (the order rotates from config to config and round to
# round) because shared machines are noisy. Each round also times a 2048^3 oneDNN bf16
# GEMM (bench_kernels BM_gemm_bf16/to_f32/2048^3): the measured peak that each mode's
# model FLOPs utilisation (MFU) is given against. Prints every run, then the medians, the
# ratios and the MFUs; the load average at start and end.
#
#   bench/nn/compare.sh [build-dir]        (default build-perf)
#   env: ROUNDS (3), STEPS (3), WARMUP (1), THREADS (2), TORCH_ATTN (bmm|mm),
#        MODES (default "gpumix-fp32 gpumix-bf16 torch-fp32 torch-bf16"),
#        CONFIGS ("L NH C T V B;..." default the three of issue 12)
#
# Model FLOPs per token (PaLM's convention, the causal mask not discounted):
#   6 (12 L C^2 + V C) + 12 L C T          (weights incl. the tied head; attention)
# A mode that cannot run shows n/a.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/nn/torch_peer.sh
BUILD=${1:-build-perf}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-2}
TORCH_ATTN=${TORCH_ATTN:-bmm}
read -r -a MODES <<<"${MODES:-gpumix-fp32 gpumix-bf16 torch-fp32 torch-bf16}"
IFS=';' read -r -a CONFIGS <<<"${CONFIGS:-4 4 256 256 8192 8;6 6 384 256 8192 8;12 12 768 256 50257 4}"
BENCH=$BUILD/bench/nn/bench_train
KBENCH=$BUILD/bench/kernels/bench_kernels
for exe in "$BENCH" "$KBENCH"; do
  [ -x "$exe" ] || { echo "no $exe: ninja -C $BUILD bench/nn/bench_train bench/kernels/bench_kernels" >&2; exit 1; }
done
export OMP_NUM_THREADS=$THREADS
[[ " ${MODES[*]}" != *" torch-"* ]] || require_torch
LOG=$(mktemp /tmp/compare.XXXXXX)
trap 'rm -f "$LOG"' EXIT

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load at start: $(cat /proc/loadavg)"
echo "threads $THREADS, $WARMUP warmup + $STEPS timed steps per run (median of the timed steps), $ROUNDS rounds," \
     "modes: ${MODES[*]}, torch attention: $TORCH_ATTN"

rate() { sed -n 's/^RESULT .* tokens_per_s \([0-9.]*\).*/\1/p'; }
median() { { grep -E '^[0-9.]+$' || true; } | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print "n/a"}'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN {if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a"}'; }
flops_per_token() { awk -v L="$1" -v C="$2" -v T="$3" -v V="$4" 'BEGIN {printf "%.0f", 6 * (12 * L * C * C + V * C) + 12 * L * C * T}'; }
# MFU in percent: tokens/s x FLOPs per token against the GEMM peak (GFLOP/s).
mfu() { awk -v r="$1" -v f="$2" -v p="$3" 'BEGIN {if (r ~ /^[0-9.]+$/ && p > 0) printf "%.1f%%", 100 * r * f / (p * 1e9); else print "n/a"}'; }

# The 2048^3 bf16 GEMM (fp32 accumulation and result) through oneDNN, GFLOP/s.
gemm_peak() {
  "$KBENCH" --benchmark_filter='^BM_gemm_bf16/to_f32/2048\^3/' --benchmark_min_time=1 --benchmark_format=json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["benchmarks"][0]["GFLOP/s"])'
}

# One run of one mode; prints its tokens/s, or n/a (and keeps its output in $LOG).
run_mode() {
  local mode=$1; shift
  local out status=0
  case $mode in
    gpumix-*) out=$("$BENCH" "$@" --dtype "${mode#gpumix-}" 2>&1) || status=$? ;;
    torch-*) out=$(torch_python bench/nn/torch_gpt_cpu.py "$@" \
                     --attn "$TORCH_ATTN" --dtype "${mode#torch-}" 2>&1) || status=$? ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  echo "$out" >>"$LOG"
  local r; r=$(rate <<<"$out")
  if [ "$status" != 0 ] || [ -z "$r" ]; then
    echo "  ($mode did not run: $(grep -m1 -iE 'error|not supported|unknown' <<<"$out" || tail -n1 <<<"$out"))" >&2
    echo "n/a"
  else
    echo "$r"
  fi
}

declare -A RATE   # "mode config" -> rates of the rounds
PEAKS=""
for round in $(seq 1 "$ROUNDS"); do
  peak=$(gemm_peak)
  PEAKS+="$peak "
  echo "round $round  oneDNN bf16 GEMM 2048^3: $peak GFLOP/s  (load $(cut -d' ' -f1 /proc/loadavg))"
  for ci in "${!CONFIGS[@]}"; do
    read -r L NH C TT V B <<<"${CONFIGS[$ci]}"
    args=(--L "$L" --NH "$NH" --C "$C" --T "$TT" --V "$V" --B "$B" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --quiet)
    n=${#MODES[@]}
    line="round $round  L=$L NH=$NH C=$C T=$TT V=$V B=$B "
    declare -A this=()
    for k in $(seq 0 $((n - 1))); do  # rotate: each mode takes each place in turn
      mode=${MODES[$(((k + round + ci) % n))]}
      this[$mode]=$(run_mode "$mode" "${args[@]}")
      RATE["$mode $ci"]+="${this[$mode]} "
    done
    [ "$round" = 1 ] && [ "$ci" = 0 ] && { grep -m1 "BLAS loaded" "$LOG" || true; }
    for mode in "${MODES[@]}"; do line+=" $mode ${this[$mode]}"; done
    echo "$line tok/s  (load $(cut -d' ' -f1 /proc/loadavg))"
    unset this
  done
done

peak=$(tr ' ' '\n' <<<"$PEAKS" | median)
echo "medians (oneDNN bf16 GEMM 2048^3 peak: median $peak GFLOP/s of$(printf ' %s' $PEAKS)):"
for ci in "${!CONFIGS[@]}"; do
  read -r L NH C TT V B <<<"${CONFIGS[$ci]}"
  f=$(flops_per_token "$L" "$C" "$TT" "$V")
  declare -A med=()
  line="  L=$L NH=$NH C=$C T=$TT V=$V B=$B ($(awk -v f="$f" 'BEGIN {printf "%.1f", f / 1e6}') MFLOP/token):"
  for mode in "${MODES[@]}"; do
    med[$mode]=$(tr ' ' '\n' <<<"${RATE["$mode $ci"]:-}" | median)
    line+=" $mode ${med[$mode]} tok/s (MFU $(mfu "${med[$mode]}" "$f" "$peak"));"
  done
  echo "$line"
  tf=${med[torch-fp32]:-n/a} tb=${med[torch-bf16]:-n/a}
  best=$(awk -v a="$tf" -v b="$tb" 'BEGIN {x = (a ~ /^[0-9.]+$/) ? a : 0; y = (b ~ /^[0-9.]+$/) ? b : 0; m = x > y ? x : y; if (m > 0) print m; else print "n/a"}')
  echo "    ratios: gpumix-bf16 / torch best $(div "${med[gpumix-bf16]:-n/a}" "$best"), gpumix-fp32 / torch-fp32 $(div "${med[gpumix-fp32]:-n/a}" "$tf"), gpumix-bf16 / gpumix-fp32 $(div "${med[gpumix-bf16]:-n/a}" "${med[gpumix-fp32]:-n/a}")"
  unset med
done
echo "load at end: $(cat /proc/loadavg)"
