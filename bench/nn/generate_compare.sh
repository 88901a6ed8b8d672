#!/bin/bash
# Generation throughput side by side: GPUMix with the key/value cache and with the full
# recompute per token (bench_generate), and PyTorch with a hand-written cache loop and with
# the recompute (torch_generate.py), at the gpt2 shape (12 layers, 768 channels, 12 heads,
# context 1024, vocabulary 50257; random weights), greedy, one sequence, prompts of 16 and
# 900 tokens, 100 new tokens each. Prints every run, the cache's speed-up in each, and the
# load average at start and end (the figures mean something only on a quiet machine).
#
#   bench/nn/generate_compare.sh [build-dir]     (default build-perf)
#   env: THREADS (all cores), DTYPE (fp32), PROMPTS ("16 900"), NEW (100),
#        MODES ("gpumix-cache gpumix-full torch-cache torch-full")
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-perf}
THREADS=${THREADS:-$(nproc)}
DTYPE=${DTYPE:-fp32}
NEW=${NEW:-100}
read -r -a PROMPTS <<<"${PROMPTS:-16 900}"
read -r -a MODES <<<"${MODES:-gpumix-cache gpumix-full torch-cache torch-full}"
BENCH=$BUILD/bench/nn/bench_generate
[ -x "$BENCH" ] || { echo "no $BENCH: ninja -C $BUILD bench/nn/bench_generate" >&2; exit 1; }
if [[ " ${MODES[*]}" == *" torch-"* ]] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "PyTorch is missing: apt-get install -y python3-torch (Debian's), or MODES without torch-*" >&2
  exit 1
fi
export OMP_NUM_THREADS=$THREADS
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load at start: $(cat /proc/loadavg)"
echo "threads $THREADS, dtype $DTYPE, $NEW new tokens, greedy, gpt2 shape, random weights"
rate() { sed -n 's/^RESULT .* tokens_per_s \([0-9.]*\).*/\1/p'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN {if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.1f", a / b; else print "n/a"}'; }
declare -A R
for p in "${PROMPTS[@]}"; do
  for m in "${MODES[@]}"; do
    args=(--prompt "$p" --new "$NEW" --mode "${m#*-}" --dtype "$DTYPE" --threads "$THREADS")
    case "$m" in
      gpumix-*) line=$("$BENCH" "${args[@]}" || true) ;;
      torch-*) line=$(/usr/bin/python3 bench/nn/torch_generate.py "${args[@]}" || true) ;;
      *) echo "unknown mode $m" >&2; exit 2 ;;
    esac
    echo "$m prompt $p: $line"
    R[$m,$p]=$(rate <<<"$line")
  done
done
echo
printf '%-8s %14s %14s %8s %14s %14s %8s\n' prompt gpumix-cache gpumix-full speedup torch-cache torch-full speedup
for p in "${PROMPTS[@]}"; do
  printf '%-8s %14s %14s %8s %14s %14s %8s\n' "$p" "${R[gpumix-cache,$p]:-n/a}" "${R[gpumix-full,$p]:-n/a}" \
    "$(div "${R[gpumix-cache,$p]:-}" "${R[gpumix-full,$p]:-}")" "${R[torch-cache,$p]:-n/a}" \
    "${R[torch-full,$p]:-n/a}" "$(div "${R[torch-cache,$p]:-}" "${R[torch-full,$p]:-}")"
done
echo "(tokens/s; speedup: cache over full recompute)"
echo "load at end: $(cat /proc/loadavg)"
