#!/bin/bash
# Generation throughput side by side: GPUMix with the key/value cache and with the full
# recompute per token (bench_generate), and PyTorch with a hand-written cache loop and with
# the recompute (torch_generate.py, OpenBLAS pinned: torch_peer.sh), at the gpt2 shape (12
# layers, 768 channels, 12 heads, context 1024, vocabulary 50257; random weights), greedy,
# one sequence, prompts of 16 and 900 tokens, 100 new tokens each. The modes are interleaved
# in every round (their order rotates from round to round and prompt to prompt), because
# shared machines are noisy. Prints every run, then per prompt the medians over the rounds,
# the cache's speed-up in each framework and GPUMix's cache over PyTorch's (per round too),
# and the load average at start and end (the figures mean something only on a quiet machine).
#
#   bench/nn/generate_compare.sh [build-dir]     (default build-perf)
#   env: ROUNDS (3), THREADS (all cores), DTYPE (fp32), PROMPTS ("16 900"), NEW (100),
#        MODES ("gpumix-cache gpumix-full torch-cache torch-full")
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/nn/torch_peer.sh
BUILD=${1:-build-perf}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
DTYPE=${DTYPE:-fp32}
NEW=${NEW:-100}
read -r -a PROMPTS <<<"${PROMPTS:-16 900}"
read -r -a MODES <<<"${MODES:-gpumix-cache gpumix-full torch-cache torch-full}"
BENCH=$BUILD/bench/nn/bench_generate
[ -x "$BENCH" ] || { echo "no $BENCH: ninja -C $BUILD bench/nn/bench_generate" >&2; exit 1; }
[[ " ${MODES[*]}" != *" torch-"* ]] || require_torch
export OMP_NUM_THREADS=$THREADS
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load at start: $(cat /proc/loadavg)"
echo "threads $THREADS, dtype $DTYPE, $NEW new tokens, greedy, gpt2 shape, random weights, $ROUNDS rounds"
rate() { sed -n 's/^RESULT .* tokens_per_s \([0-9.]*\).*/\1/p'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN {if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.1f", a / b; else print "n/a"}'; }
median() { { grep -E '^[0-9.]+$' || true; } | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print "n/a"}'; }
declare -A R     # "mode,prompt" -> the rounds' rates
declare -A RATIO # prompt -> the rounds' gpumix-cache / torch-cache
n=${#MODES[@]}
for round in $(seq 1 "$ROUNDS"); do
  for pi in "${!PROMPTS[@]}"; do
    p=${PROMPTS[$pi]}
    declare -A this=()
    for k in $(seq 0 $((n - 1))); do  # rotate: each mode takes each place in turn
      m=${MODES[$(((k + round + pi) % n))]}
      args=(--prompt "$p" --new "$NEW" --mode "${m#*-}" --dtype "$DTYPE" --threads "$THREADS")
      case "$m" in
        gpumix-*) out=$("$BENCH" "${args[@]}" 2>&1 || true) ;;
        torch-*) out=$(torch_python bench/nn/torch_generate.py "${args[@]}" 2>&1 || true) ;;
        *) echo "unknown mode $m" >&2; exit 2 ;;
      esac
      [ "$round" = 1 ] && [ "$pi" = 0 ] && { grep -m1 "BLAS loaded" <<<"$out" || true; }
      r=$(rate <<<"$out")
      [ -n "$r" ] || { echo "  ($m prompt $p did not run: $(tail -n1 <<<"$out"))" >&2; r=n/a; }
      this[$m]=$r
      R[$m,$p]+="$r "
      echo "round $round $m prompt $p: $(grep '^RESULT' <<<"$out" || echo n/a)  (load $(cut -d' ' -f1 /proc/loadavg))"
    done
    RATIO[$p]+="$(div "${this[gpumix-cache]:-}" "${this[torch-cache]:-}") "
    unset this
  done
done
echo
printf '%-8s %14s %14s %8s %14s %14s %8s %16s\n' prompt gpumix-cache gpumix-full speedup torch-cache torch-full speedup 'gpumix/torch'
for p in "${PROMPTS[@]}"; do
  declare -A med=()
  for m in "${MODES[@]}"; do med[$m]=$(tr ' ' '\n' <<<"${R[$m,$p]:-}" | median); done
  printf '%-8s %14s %14s %8s %14s %14s %8s %16s\n' "$p" "${med[gpumix-cache]:-n/a}" "${med[gpumix-full]:-n/a}" \
    "$(div "${med[gpumix-cache]:-}" "${med[gpumix-full]:-}")" "${med[torch-cache]:-n/a}" "${med[torch-full]:-n/a}" \
    "$(div "${med[torch-cache]:-}" "${med[torch-full]:-}")" "$(div "${med[gpumix-cache]:-}" "${med[torch-cache]:-}")"
  echo "         (gpumix-cache / torch-cache per round: ${RATIO[$p]})"
  unset med
done
echo "(tokens/s, medians of $ROUNDS rounds; speedup: cache over full recompute; gpumix/torch: the two caches)"
echo "load at end: $(cat /proc/loadavg)"
