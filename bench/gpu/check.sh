#!/usr/bin/env bash
# The one GPU check (issues 13, 20 and 28): on a fresh GPU machine (python with meson, ninja
# and PyTorch; no apt, no network) runs, from a build made and packed HERE (no compilation
# there), in two parts, each within one device call with a rerun to spare:
#   part 1 (the first GPU minutes; the default):
#     1. every GPU test of the build (meson tests named cuda/gpu/nccl: bench/gpu/gpu_tests.py,
#        run by bench/gpu/carried.py test: the build's meson may not be the machine's);
#     2. attention forward + backward at B 16, T 1024, NH 12, HS 64: GPUMix's kernels
#        (bench_cuda) beside PyTorch's scaled_dot_product_attention (flash);
#     3. gpt2 124M (T 1024, bf16) end to end: GPUMix (bench_train --device cuda:0) beside
#        PyTorch eager and torch.compile (bench/gpu/torch_compare.py --e2e): tokens/s, MFU;
#     4. compute-sanitizer memcheck, racecheck and synccheck on the kernel tests' small shapes;
#   part 2 (GPUMIX_CHECK_PART=2, a second call when device time is left):
#     5. the CUDA kernels (bench_cuda) and the same kernels in PyTorch, then every kernel
#        of a gpt2 step against the GPU's measured roofs (gpumix bench, issue 21);
#     6. the heterogeneous cluster: three emulated devices on the one GPU, `gpumix train`
#        under --plan gpumix, even and proportional: step times, per-rank predicted vs
#        measured time and memory (bench/hetero/summarize.py).
# GPUMIX_CHECK_PART=all runs both in one call (GPUMIX_CHECK_BUDGET=560, timeout_s=600).
# It writes $OUT/results.md (a table of every target of the issues, measured / target / met,
# then the stages and the details) and $OUT/logs.tar.gz (every log), or the same under
# bench/results/gpu-<date>/ when $OUT is unset. Every stage has a time limit (the table
# LIMIT below, the one place they are set; GPUMIX_CHECK_PLAN=1 prints it with each part's
# sum and fails when a part exceeds the budget); a failed or late stage is recorded and the
# check goes on; results.md is rewritten after each stage, so a check cut short still
# reports what it measured.
#
# HOW THE FIRST GPU SESSION RUNS IT (bench/gpu/README.md says the same, with the why):
#   here:   bench/gpu/prepare.sh      # builds sm_90 (build-gpu90, ~10-40 min on 2 cores the
#                                     # first time, ccache after), packs .gpudeps/ (< 64 MiB)
#   device: run(command="bash bench/gpu/check.sh", carry=[".gpudeps"], timeout_s=340)
#   then:   copy files_at/results.md and logs.tar.gz to bench/results/gpu-<date>/, commit;
#           if device time is left, the same with "GPUMIX_CHECK_PART=2 bash bench/gpu/check.sh".
# Each part's stages get 280 s in all (GPUMIX_CHECK_BUDGET), the call 340 s: with the machine's
# start (1-2 min) twice, a rerun fits in the 15 minutes. If the GPU is not compute capability 9.0,
# or the carried programs do not load there, the check builds there as before (deps from
# .gpudeps/deps.tar.xz) and results.md says why; then rerun part 1 with
# GPUMIX_CHECK_BUDGET=560 and timeout_s=600 (the build alone takes ~240 s).
#
# Here (no GPU) it rehearses everything up to the point where a GPU is needed:
#   bench/gpu/rehearse.sh            # unpacks .gpudeps into a fresh copy of the tree, as there
#   GPUMIX_CHECK_SCALE=4 OUT=/tmp/gpucheck-rehearsal bash bench/gpu/check.sh   # in place
# And against the emulated CUDA device (-Demulated_cuda=true) from a carried emulated build,
# where every GPU stage really runs (reduced shapes: the emulator is slow) and every figure
# is marked "emulated, not a GPU":
#   GPUMIX_CHECK_EMULATED=1 bench/gpu/prepare.sh && GPUMIX_CHECK_EMULATED=1 bench/gpu/rehearse.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
RES=${OUT:-$ROOT/bench/results/gpu-$(date +%Y%m%d-%H%M%S)}
LOGS=${GPUMIX_CHECK_LOGS:-/tmp/gpucheck-logs}  # tarred into $RES: the device tool returns 8 files at most
# Knobs (defaults are for the GPU machine): GPUMIX_CHECK_SCALE multiplies every time limit
# (a loaded 2-core machine, the emulator); GPUMIX_CHECK_EMULATED=1 runs the carried EMULATED
# build's GPU stages on the CPU; GPUMIX_CHECK_KEEP_BUILD=1 reuses $BUILD when building here.
SCALE=${GPUMIX_CHECK_SCALE:-1}
EMULATED=${GPUMIX_CHECK_EMULATED:-0}
PART=${GPUMIX_CHECK_PART:-1}
case "$PART" in 1|2) DEFAULT_BUDGET=280 ;; all) DEFAULT_BUDGET=560 ;;
  *) echo "check.sh: GPUMIX_CHECK_PART must be 1, 2 or all, got '$PART'" >&2; exit 2 ;; esac
BUDGET=${GPUMIX_CHECK_BUDGET:-$DEFAULT_BUDGET}  # seconds for all stages; the device call gets 60 more

# ---- the time plan: every stage's limit in seconds on an H200 (x SCALE elsewhere) ------------
# The carried build's setup opens both parts (each call may find a fresh machine). The
# fallback (building on the GPU machine, when the carried build cannot run there) adds its
# own stages and needs GPUMIX_CHECK_BUDGET=560 with timeout_s=600 for part 1: no rerun fits.
FALLBACK_BUDGET=560
declare -A LIMIT=(
  [carried]=20 [tests-gpu]=55 [attention-gpumix]=15 [attention-torch]=20 [e2e-gpumix]=25
  [e2e-torch-eager]=20 [e2e-torch-compile]=60 [sanitize]=30
  [bench-cuda]=45 [torch-kernels]=25 [gpumix-bench]=60 [hetero-tokenizer]=20 [hetero-gpumix]=50
  [hetero-even]=25 [hetero-proportional]=25
  [deps]=30 [nccl]=15 [configure]=30 [build]=240)
PART1="carried tests-gpu attention-gpumix attention-torch e2e-gpumix e2e-torch-eager e2e-torch-compile sanitize"
PART2="carried bench-cuda torch-kernels gpumix-bench hetero-tokenizer hetero-gpumix hetero-even hetero-proportional"
FALLBACK="deps nccl configure build"
case "$PART" in 1) RUNS=" $PART1 $FALLBACK " ;; 2) RUNS=" $PART2 $FALLBACK " ;; all) RUNS=" $PART1 $PART2 $FALLBACK " ;; esac
sum_limits() { local t=0 n; for n in "$@"; do t=$(( t + LIMIT[$n] )); done; echo $t; }
if [ "${GPUMIX_CHECK_PLAN:-0}" = 1 ]; then
  bad=0
  for part in 1 2; do
    names=PART$part; total=$(sum_limits ${!names})
    echo "part $part: $(for n in ${!names}; do printf '%s %ss, ' "$n" "${LIMIT[$n]}"; done)total ${total}s of a ${DEFAULT_BUDGET}s budget"
    [ "$total" -le 280 ] || { echo "check.sh: part $part's stage limits add to ${total}s, more than its 280 s" >&2; bad=1; }
  done
  total=$(sum_limits $PART1 $FALLBACK)
  echo "part 1 building on the GPU machine (fallback: $FALLBACK): total ${total}s (GPUMIX_CHECK_BUDGET=$FALLBACK_BUDGET)"
  [ "$total" -le $FALLBACK_BUDGET ] || { echo "check.sh: the fallback's part 1 adds to ${total}s, more than $FALLBACK_BUDGET s" >&2; bad=1; }
  exit $bad
fi
BUDGET=$(( BUDGET * SCALE ))
CARRIED_TAR="$ROOT/.gpudeps/build.tar.xz"
[ "$EMULATED" = 1 ] && CARRIED_TAR="$ROOT/.gpudeps-emu/build.tar.xz"  # never carried to a GPU
CARRIED=${GPUMIX_CARRIED_DIR:-/tmp/gpumix-carried}  # unpacked outside the working tree
BUILD=${GPUMIX_BUILD:-/tmp/gpumix-build-gpu}        # used when the check has to build here
rm -rf "$LOGS" && mkdir -p "$LOGS" "$RES"
T0=$(date +%s)
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}  # PyTorch runs without the carried libraries
elapsed() { echo $(( $(date +%s) - T0 )); }
pyrun() { env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 python3 "$@"; }

# results.md and logs.tar.gz from what the stages wrote so far.
report() {
  pyrun "$ROOT/bench/gpu/report.py" "$LOGS" "$BUILD" "$RES/results.md" 2>> "$LOGS/report.err" ||
    echo "report.py failed: $(tail -n 3 "$LOGS/report.err")" > "$RES/results.md"
  tar -C "$LOGS" --exclude='ckpt-*' -czf "$RES/logs.tar.gz" . 2>/dev/null
}

# stage NAME LOG CMD...: runs CMD under timeout (LIMIT[NAME] x SCALE, at most what is left
# of the budget), appends to $LOGS/LOG, records the result in stages.tsv, rewrites the
# report. Returns CMD's status (125 when the stage is not in this part or out of time). On a
# machine without a GPU, a GPU stage's result says so (in the emulated rehearsal only
# PyTorch's: GPUMix's run on the emulated device).
GPU_STAGES=" tests-gpu attention-gpumix attention-torch e2e-gpumix e2e-torch-eager e2e-torch-compile sanitize bench-cuda torch-kernels gpumix-bench hetero-gpumix hetero-even hetero-proportional "
TORCH_STAGES=" attention-torch e2e-torch-eager torch-kernels e2e-torch-compile "
in_part() { [[ "$RUNS" == *" $1 "* ]]; }
stage() {
  local name=$1 log="$LOGS/$2"; shift 2
  in_part "$name" || return 125
  local limit=$(( LIMIT[$name] * SCALE ))
  local left=$(( BUDGET - $(elapsed) ))
  if [ "$left" -lt 15 ]; then
    printf '%s\tskipped: out of time (budget %s s)\t0\n' "$name" "$BUDGET" >> "$LOGS/stages.tsv"
    echo "[$(elapsed)s] $name: skipped, out of time"; report; return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local s; s=$(date +%s)
  mkdir -p "$(dirname "$log")"
  echo "==== $name (limit ${limit}s) $(date -u +%H:%M:%S): $*" >> "$log"
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  local what="ok"
  [ $rc -ne 0 ] && what="FAILED rc=$rc"
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && what="did not finish in ${limit} s"
  # Emulated, GPUMix's stages run; PyTorch's and compute-sanitizer (a GPU tool) stop there.
  local nogpu=$GPU_STAGES; [ "$EMULATED" = 1 ] && nogpu="$TORCH_STAGES sanitize "
  if [ "$NO_GPU" = 1 ] && [[ "$nogpu" == *" $name "* ]]; then
    local said; said=$(grep -m1 -ioE "no CUDA[^;]*|no GPU[^;]*|skipping|PyTorch unavailable[^;]*" "$log" | head -1 | cut -c1-160)
    [ -z "$said" ] && said="rc=$rc: $(grep -v '^====' "$log" | tail -n 1 | cut -c1-160)"
    what="no GPU: ran up to the GPU point ($said)"
  fi
  printf '%s\t%s\t%s\n' "$name" "$what" "$(( $(date +%s) - s ))" >> "$LOGS/stages.tsv"
  echo "[$(elapsed)s] $name: $what ($(( $(date +%s) - s ))s)"
  report
  return $rc
}

# ---- environment ---------------------------------------------------------------------------
# meson and ninja: on the PATH, else the python packages' (pip's meson, ninja), through
# wrappers that timeout and gpu_tests.py can run (only the build-here fallback needs them).
TOOLS=/tmp/gpumix-check-tools
mkdir -p "$TOOLS" && export PATH="$PATH:$TOOLS"
command -v meson >/dev/null || ! python3 -c "import mesonbuild" 2>/dev/null ||
  printf '#!/bin/sh\nexec python3 -m mesonbuild.mesonmain "$@"\n' > "$TOOLS/meson"
command -v ninja >/dev/null || ! NINJA_DIR=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null) ||
  ln -sf "$NINJA_DIR/ninja" "$TOOLS/ninja"
chmod +x "$TOOLS"/* 2>/dev/null
date -u '+%Y-%m-%d %H:%M UTC' > "$LOGS/date.txt"
echo "$RUNS" > "$LOGS/part.txt"  # report.py: which stages this call runs (GPUMIX_CHECK_PART)
if ! command -v nvidia-smi >/dev/null; then
  NO_GPU=1; echo "none: no nvidia-smi (no NVIDIA driver)" > "$LOGS/gpu.txt"
elif GPUS=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1) &&
     [ -n "$GPUS" ]; then
  NO_GPU=0; echo "$GPUS" | head -1 > "$LOGS/gpu.txt"
else
  NO_GPU=1; echo "none: nvidia-smi: $(echo "$GPUS" | head -1)" > "$LOGS/gpu.txt"
fi
if [ "$EMULATED" = 1 ]; then
  # report.py marks every figure of such a run "emulated, not a GPU".
  echo "emulated, not a GPU: ${GPUMIX_EMULATED_GPU:-H200} emulated on the CPU (kernels/cuda_emulator; $(cat "$LOGS/gpu.txt"))" > "$LOGS/gpu.txt"
fi
{
  echo "date: $(date -u)"; uname -a; cat "$LOGS/gpu.txt"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.limit --format=csv 2>&1
  export PATH="/usr/local/cuda/bin:$PATH"
  command -v nvcc && nvcc --version | tail -2
  g++ --version | head -1; python3 --version; meson --version; ninja --version
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" 2>&1
  ldd --version 2>&1 | head -1
  nproc; free -g | head -2; df -h /tmp | tail -1; cat /proc/loadavg
} > "$LOGS/env.log" 2>&1
export PATH="/usr/local/cuda/bin:$PATH"
NVCC=$(command -v nvcc || true)
# The GPU's compute capability (e.g. 90); 90 when no GPU answers (the rehearsal).
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
CC_NOTE=""
# GPUMIX_CHECK_CC: the rehearsal of another GPU (e.g. 80: the carried sm_90 build is refused).
[ -n "${GPUMIX_CHECK_CC:-}" ] && { CC=$GPUMIX_CHECK_CC; CC_NOTE=" (GPUMIX_CHECK_CC)"; }
[ -z "$CC" ] && { CC=90; CC_NOTE=" (no GPU answered: 90 assumed)"; }

# ---- the carried build (bench/gpu/prepare.sh, made on the development machine) ---------------
# Used when it unpacks, every program loads, and it was built for this GPU's compute
# capability; otherwise the check builds here as before, and build.txt (results.md's
# "Build:" line) says why.
USE_CARRIED=0
if [ -f "$CARRIED_TAR" ]; then
  stage carried build.log python3 "$ROOT/bench/gpu/carried.py" setup "$CARRIED_TAR" "$CARRIED" "$ROOT"
  if [ $? -eq 0 ]; then
    C_ARCHS=$(python3 "$ROOT/bench/gpu/carried.py" manifest "$CARRIED" gpu_archs)
    C_EMU=$(python3 "$ROOT/bench/gpu/carried.py" manifest "$CARRIED" emulated)
    C_COMMIT=$(python3 "$ROOT/bench/gpu/carried.py" manifest "$CARRIED" commit)
    C_SHORT=${C_COMMIT:0:12}; [[ "$C_COMMIT" == not-rebuilt-* ]] && C_SHORT="${C_COMMIT:12:12} (NOT rebuilt before packing: programs maybe older)"
    C_WHAT="commit $C_SHORT of $(python3 "$ROOT/bench/gpu/carried.py" manifest "$CARRIED" date)"
    [ "$(python3 "$ROOT/bench/gpu/carried.py" manifest "$CARRIED" dirty)" = 1 ] && C_WHAT="$C_WHAT, with uncommitted changes"
    # A build of another commit than this tree's measures other code: said, not refused.
    HEAD_COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || true)
    [ -n "$HEAD_COMMIT" ] && [ "$HEAD_COMMIT" != "$C_COMMIT" ] &&
      C_WHAT="$C_WHAT; WARNING: this tree is at ${HEAD_COMMIT:0:12}, rerun bench/gpu/prepare.sh"
    if [ "$EMULATED" = 1 ] && [ "$C_EMU" = 1 ]; then
      USE_CARRIED=1
      echo "carried EMULATED build (-Demulated_cuda=true, $C_WHAT): emulated, not a GPU; no compilation here" > "$LOGS/build.txt"
    elif [ "$EMULATED" = 1 ]; then
      WHY="GPUMIX_CHECK_EMULATED=1 but the carried build is the nvcc one: GPUMIX_CHECK_EMULATED=1 bench/gpu/prepare.sh packs the emulated build"
    elif [ "$C_EMU" = 1 ]; then
      WHY="the carried build is the EMULATED one (prepared with GPUMIX_CHECK_EMULATED=1): never measured as a GPU; bench/gpu/prepare.sh packs the nvcc one"
    elif [[ " $C_ARCHS " != *" $CC "* ]]; then
      WHY="the carried build is for compute capability $C_ARCHS, this GPU is $CC"
    else
      USE_CARRIED=1
      echo "carried build (gpu_archs $C_ARCHS, $C_WHAT, made by bench/gpu/prepare.sh; GPU cc $CC$CC_NOTE): no compilation here" > "$LOGS/build.txt"
    fi
  else
    WHY="the carried build does not run here: $(grep -A3 'cannot run here' "$LOGS/build.log" | tail -n +2 | tr '\n' ' ' | cut -c1-300)"
  fi
else
  WHY="no ${CARRIED_TAR#$ROOT/} ($([ "$EMULATED" = 1 ] && echo "GPUMIX_CHECK_EMULATED=1 ")bench/gpu/prepare.sh makes it; carry .gpudeps)"
fi
if [ "$USE_CARRIED" = 1 ]; then
  BUILD="$CARRIED/build"
  . "$CARRIED/env.sh"
elif [ "$EMULATED" = 1 ]; then
  echo "$WHY" | tee "$LOGS/build.txt"; report; cat "$RES/results.md"; exit 2
else
  echo "built here (the carried build not used: $WHY); gpu_archs=$CC$CC_NOTE, $( (nvcc --version 2>/dev/null || echo "no nvcc") | grep -oE "release [0-9.]+|no nvcc"), ninja -j$(nproc)" > "$LOGS/build.txt"
  echo "check.sh: $(cat "$LOGS/build.txt")"
fi

# ---- dependencies from .gpudeps, to build here (the fallback) -----------------------------------
DEPS_ROOT=${GPUMIX_DEPS_ROOT:-/tmp/gpumix-gpudeps/root}
if [ "$USE_CARRIED" = 0 ]; then
  setup_deps() {
    if [ ! -f "$ROOT/.gpudeps/deps.tar.xz" ]; then
      echo "missing .gpudeps/deps.tar.xz: run bench/gpu/prepare.sh here and carry .gpudeps"; return 1
    fi
    rm -rf "$DEPS_ROOT" && mkdir -p "$(dirname "$DEPS_ROOT")" &&
      { tar -C "$(dirname "$DEPS_ROOT")" -xJf "$ROOT/.gpudeps/deps.tar.xz" ||
        python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
          "$ROOT/.gpudeps/deps.tar.xz" "$(dirname "$DEPS_ROOT")"; } || return 1
    # make the .pc files point into the unpacked tree ("prefix=/usr" and "/usr/...")
    find "$DEPS_ROOT" -name '*.pc' -print0 | xargs -0 sed -i -e "s|/usr/|$DEPS_ROOT/usr/|g" -e "s|=/usr\$|=$DEPS_ROOT/usr|"
    echo "unpacked $(du -sh "$DEPS_ROOT" | cut -f1) into $DEPS_ROOT"
  }
  export -f setup_deps; export ROOT DEPS_ROOT
  stage deps env.log bash -c setup_deps
  L="$DEPS_ROOT/usr/lib/x86_64-linux-gnu"
  export PKG_CONFIG="$DEPS_ROOT/usr/bin/pkgconf"
  export PKG_CONFIG_LIBDIR="$L/pkgconfig:$DEPS_ROOT/usr/share/pkgconfig"
  unset PKG_CONFIG_PATH
  export CPATH="$DEPS_ROOT/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$L${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

  # NCCL: meson's CUDA dependency looks for libnccl in the toolkit's lib64. If the toolkit
  # has none, use PyTorch's wheel (nvidia-nccl-cu13) through a shadow toolkit of symlinks.
  find_nccl() {
    [ -z "$NVCC" ] && { echo "no nvcc"; return 1; }
    local cuda; cuda=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
    if ls "$cuda"/lib64/libnccl.so* >/dev/null 2>&1 || ls "$cuda"/targets/x86_64-linux/lib/libnccl.so* >/dev/null 2>&1; then
      echo "NCCL in the toolkit $cuda"; echo "$cuda" > /tmp/gpumix_cuda_path; return 0
    fi
    local n
    n=$(python3 -c "import importlib.util as u; s=u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0])" 2>/dev/null)
    [ -z "$n" ] && { echo "no NCCL in $cuda nor in python's nvidia.nccl"; return 1; }
    local sh=/tmp/cuda-shadow
    rm -rf "$sh" && mkdir -p "$sh/lib64" "$sh/include"
    for f in "$cuda"/*; do case "$(basename "$f")" in lib64|include) ;; *) ln -s "$f" "$sh/";; esac; done
    for f in "$(readlink -f "$cuda/lib64")"/*; do ln -s "$f" "$sh/lib64/"; done
    for f in "$(readlink -f "$cuda/include")"/*; do ln -s "$f" "$sh/include/"; done
    ln -sf "$n/lib/libnccl.so.2" "$sh/lib64/libnccl.so.2"
    ln -sf "$n/lib/libnccl.so.2" "$sh/lib64/libnccl.so"
    for f in "$n"/include/*; do ln -sf "$f" "$sh/include/"; done
    echo "NCCL from $n through the shadow toolkit $sh"; echo "$sh" > /tmp/gpumix_cuda_path
    echo "$n/lib" > /tmp/gpumix_nccl_lib
  }
  export -f find_nccl; export NVCC
  rm -f /tmp/gpumix_cuda_path /tmp/gpumix_nccl_lib
  stage nccl env.log bash -c find_nccl
  [ -f /tmp/gpumix_cuda_path ] && export CUDA_PATH=$(cat /tmp/gpumix_cuda_path)
  [ -f /tmp/gpumix_nccl_lib ] && export LD_LIBRARY_PATH="$(cat /tmp/gpumix_nccl_lib):$LD_LIBRARY_PATH"
fi

# ---- the shapes of the runs ----------------------------------------------------------------------
# End to end: gpt2 124M (V 50257, as the gpumix preset), T 1024, bf16, the same for all three.
E2E=(--L 12 --NH 12 --C 768 --T 1024 --V 50257 --B 16 --steps 10 --warmup 3)
E2E_WHAT="L 12, NH 12, C 768, T 1024, V 50257, B 16, 3 warm-up + 10 timed steps"
# The heterogeneous cluster: three emulated devices on GPU 0, the gpt2 shape (L 12, C 768)
# with a 4096-token BPE vocabulary of the fortunes corpus, T 1024, global batch 24. Speeds
# 1 : 1/2 : 1/3, so an even split waits ~3x for the slowest device (the simulator, from
# datasheet profiles: GPUMix ~1.9x even). Memory caps 6 / 4 / 3 GiB: every plan fits by the
# memory model (an even rank ~2-3 GiB even with GPT-2's 50257-token head), so all three
# are measured, and the planner gives the larger devices more of the state.
HETERO_DEVICES="cuda:0:mem=6GiB,cuda:0:mem=4GiB:slow=2,cuda:0:mem=3GiB:slow=3"
HETERO_STEPS=8
HETERO_MODEL=(--model gpt2 --seq 1024 --batch 24)
HETERO_VOCAB=4096
HETERO_WHAT="the gpt2 shape (L 12, C 768) with a 4096-token BPE vocabulary of the fortunes corpus, global batch 24 x 1024 tokens"
# The start-up profile of the three devices: gpumix train's full one (micro-batches up to
# 32, 5 repeats) on a GPU, where it takes seconds.
HETERO_PROFILE=()
BENCH_ARGS=(--benchmark_min_time=0.2)
# Attention at the gpt2 shape of issue 28: B 16, T 1024, NH 12, HS 64 (C 768), causal.
ATTN=(--B 16 --T 1024 --NH 12 --C 768)
ATTN_BENCH_ARGS=(--benchmark_min_time=0.2 "--benchmark_filter=^BM_attention/1024/[01]/16/")
# compute-sanitizer: every kernel test but the gpt2-shape cases (named *Gpt2* or *T1024*).
SAN_FILTER=${GPUMIX_CHECK_SAN_FILTER:-*-*Gpt2*:*T1024*:*/1024*}
# gpumix bench (issue 21): every kernel of one gpt2 training step by role against the GPU's
# measured roofs and its datasheet, the table a user compares GPUs with.
GPUMIX_BENCH=(--model gpt2 --seq 1024 --batch 8 --dtype bf16 --repeat 5)
TEST_MULT=0.2  # meson's timeouts (600 s for the GPU tests) cut to a fifth on a GPU
if [ "$EMULATED" = 1 ]; then
  # The emulator runs every thread of a kernel on the CPU: shapes a few thousand times
  # smaller, so that each stage ends in minutes. These numbers are never a speed.
  E2E=(--L 2 --NH 2 --C 64 --T 64 --V 512 --B 2 --steps 2 --warmup 1)
  E2E_WHAT="EMULATED, reduced: L 2, NH 2, C 64, T 64, V 512, B 2, 1 warm-up + 2 timed steps"
  HETERO_DEVICES="cuda:0:mem=256MiB,cuda:0:mem=192MiB:slow=2,cuda:0:mem=128MiB:slow=3"
  HETERO_STEPS=3  # summarize.py's medians: the steps after the first two
  # Validation on 0.1 % of the corpus (41 windows): the last step measures all of them,
  # ~2 min on the emulator at the default 5 % (2083 windows).
  HETERO_MODEL=(--model gpt-nano --layers 1 --seq 32 --batch 6 --val-fraction 0.001)
  HETERO_VOCAB=512
  # The start-up profile bounded (micro-batches 1 and 2, one timed run after the warm-up:
  # 3.4 s for the compute measurements at load ~6) instead of the full one (1 to 32, five
  # runs: 4 min 35 s at load 11-14, 2026-12-02; it did not finish in the stage's limit in
  # the rehearsal of 2026-12-01). Cached apart from a full profile (gpumix train --help).
  HETERO_PROFILE=(--profile-repeats 1 --profile-max-micro-batch 2)
  HETERO_WHAT="EMULATED, reduced: gpt-nano with 1 layer, a 512-token BPE vocabulary of the fortunes corpus, global batch 6 x 32 tokens, validation on 0.1 % of it; the start-up profile bounded to micro-batches <= 2, 1 repeat"
  # bench_cuda's shapes are gpt2's (B 8, T 1024): only a few small kernels, one iteration
  # each, unless GPUMIX_CHECK_BENCH_FILTER names others.
  BENCH_ARGS=(--benchmark_min_time=0.001 "--benchmark_filter=${GPUMIX_CHECK_BENCH_FILTER:-^BM_(copy|layernorm_forward/768|add_bf16)/}")
  ATTN=(--B 1 --T 64 --NH 12 --C 768)
  ATTN_BENCH_ARGS=(--benchmark_min_time=0.001 "--benchmark_filter=^BM_attention/64/[01]/1/")
  GPUMIX_BENCH=(--model gpt-nano --seq 32 --batch 2 --dtype bf16 --repeat 2)
  TEST_MULT=1
fi
echo "$E2E_WHAT" > "$LOGS/e2e.txt"
CORPUS="$CARRIED/fortunes"
[ "$USE_CARRIED" = 1 ] && [ -d "$CORPUS" ] || CORPUS="$DEPS_ROOT/usr/share/games/fortunes"
[ -d "$CORPUS" ] || CORPUS=/usr/share/games/fortunes

# ---- build here: only when the carried build cannot be used --------------------------------------
if [ "$USE_CARRIED" = 0 ]; then
  [ "${GPUMIX_CHECK_KEEP_BUILD:-0}" = 1 ] || rm -rf "$BUILD"
  [ -f "$BUILD/build.ninja" ] && CONF=(--reconfigure) || CONF=()
  stage configure build.log meson setup "${CONF[@]}" "$BUILD" -Dgpu_archs="$CC" -Dmpi=disabled \
    -Dcuda=enabled -Dfortran=disabled -Dbuildtype=release
  mapfile -t TEST_TARGETS < <(pyrun "$ROOT/bench/gpu/gpu_tests.py" targets "$BUILD" 2>> "$LOGS/build.log")
  # torch.compile's caches (inductor, Triton) are warmed meanwhile: the build leaves cores
  # idle in its serial stretches, and the compile stage at the end then starts warm.
  if [ "$NO_GPU" = 0 ]; then
    timeout -k 5 $(( 200 * SCALE )) env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 nice -n 5 \
      python3 "$ROOT/bench/gpu/torch_compare.py" --e2e compile "${E2E[@]}" --steps 1 --warmup 1 \
      > "$LOGS/compile_warmup.txt" 2>&1 &
    WARM_PID=$!  # timeout's: a kill reaches python through it
  fi
  stage build build.log ninja -C "$BUILD" -j"$(nproc)" tools/gpumix bench/nn/bench_train \
    bench/cuda/bench_cuda "${TEST_TARGETS[@]}"
fi
echo "GPU tests: $(pyrun "$ROOT/bench/gpu/gpu_tests.py" names "$BUILD" 2>&1 | tr '\n' ' ')" >> "$LOGS/build.log"
GPUMIX="$BUILD/tools/gpumix"

# ---- 1. tests ----------------------------------------------------------------------------------------
# One at a time (they share the GPU), their whole output in tests.log.
mapfile -t TEST_NAMES < <(pyrun "$ROOT/bench/gpu/gpu_tests.py" names "$BUILD" 2>/dev/null)
# GPUMIX_CHECK_TESTS="cuda engine_cuda": only those (a rerun of the failed ones).
[ -n "${GPUMIX_CHECK_TESTS:-}" ] && read -r -a TEST_NAMES <<< "$GPUMIX_CHECK_TESTS"
if [ "$USE_CARRIED" = 1 ]; then
  stage tests-gpu tests.log python3 "$ROOT/bench/gpu/carried.py" test --timeout-multiplier "$TEST_MULT" \
    "$CARRIED" "${TEST_NAMES[@]}"
else
  stage tests-gpu tests.log meson test -C "$BUILD" --no-rebuild --num-processes 1 \
    --timeout-multiplier "$TEST_MULT" --verbose "${TEST_NAMES[@]}"
fi

# The warm-up (building here only) must not share the GPU with anything timed.
if [ -n "${WARM_PID:-}" ]; then
  kill -0 "$WARM_PID" 2>/dev/null && echo "compile warm-up still running at $(elapsed) s: stopped" >> "$LOGS/compile_warmup.txt"
  kill "$WARM_PID" 2>/dev/null; wait "$WARM_PID" 2>/dev/null
fi

# ---- 2. attention forward + backward beside PyTorch's SDPA (flash) ---------------------------------
stage attention-gpumix attention_gpumix.txt "$BUILD/bench/cuda/bench_cuda" "${ATTN_BENCH_ARGS[@]}" \
  --benchmark_out="$LOGS/attention.json" --benchmark_out_format=json
stage attention-torch attention_torch.txt env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 \
  python3 "$ROOT/bench/gpu/torch_compare.py" --attention "${ATTN[@]}"

# ---- 3. end to end: gpt2 124M beside PyTorch eager and torch.compile --------------------------------
stage e2e-gpumix e2e_gpumix.txt "$BUILD/bench/nn/bench_train" "${E2E[@]}" --device cuda:0 --dtype bf16
stage e2e-torch-eager e2e_eager.txt env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 \
  python3 "$ROOT/bench/gpu/torch_compare.py" --e2e eager "${E2E[@]}"
stage e2e-torch-compile e2e_compile.txt env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 \
  python3 "$ROOT/bench/gpu/torch_compare.py" --e2e compile "${E2E[@]}"

# ---- 4. compute-sanitizer on the kernel tests' small shapes -----------------------------------------
# memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards) and
# synccheck (barriers in divergent code), each on the CUDA kernel tests minus the gpt2-shape
# cases (SAN_FILTER), each with a third of the stage's time. The emulator checks the same
# three things its own way; these are the GPU's word on them.
sanitize() {
  local cs rc=0 tool
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) ||
    { echo "no compute-sanitizer on this machine"; return 3; }
  for tool in memcheck racecheck synccheck; do
    echo "---- compute-sanitizer --tool $tool"
    timeout -k 2 "$SAN_EACH" "$cs" --tool "$tool" --error-exitcode 9 "$BUILD/tests/cuda/test_cuda" \
      --gtest_filter="$SAN_FILTER" --gtest_brief=1
    local r=$?
    echo "SANITIZE $tool rc $r"
    [ $r -ne 0 ] && rc=1
  done
  return $rc
}
SAN_EACH=$(( LIMIT[sanitize] * SCALE / 3 ))
export -f sanitize; export BUILD SAN_FILTER SAN_EACH
stage sanitize sanitize.txt bash -c sanitize

# ---- 5. kernels (part 2) --------------------------------------------------------------------------------
stage bench-cuda bench.txt "$BUILD/bench/cuda/bench_cuda" "${BENCH_ARGS[@]}" \
  --benchmark_out="$LOGS/bench.json" --benchmark_out_format=json
stage torch-kernels torch_kernels.txt env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 \
  python3 "$ROOT/bench/gpu/torch_compare.py"
stage gpumix-bench gpumix_bench.txt "$GPUMIX" bench --devices cuda:0 "${GPUMIX_BENCH[@]}" --quiet \
  --json "$LOGS/gpumix_bench.json" --svg "$LOGS/gpumix_bench.svg"

# ---- 6. the heterogeneous run (part 2) ------------------------------------------------------------------
# bench/hetero's layout, so that its summarize.py reads it: <cluster>-<planner>.txt, .rc,
# <cluster>-<planner>/log.jsonl. The planners share one profile cache, so the device
# profiles are measured once (in the first run) and every plan is made from the same ones.
if in_part hetero-gpumix; then
  HW="$LOGS/hetero"
  mkdir -p "$HW"
  { echo "name=gpu3"; echo "devices=$HETERO_DEVICES"; echo "steps=$HETERO_STEPS"; echo "model=${HETERO_MODEL[*]:1}"
    echo "what=$HETERO_WHAT"
    echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"; } > "$LOGS/hetero.txt"
  stage hetero-tokenizer hetero/tokenizer.txt "$GPUMIX" tokenizer train --data "$CORPUS" --vocab "$HETERO_VOCAB" \
    --out "$HW/tokenizer.bpe"
  for p in gpumix even proportional; do
    stage "hetero-$p" "hetero/gpu3-$p.txt" env GPUMIX_CACHE="$HW/profiles" "$GPUMIX" train \
      --data "$CORPUS" --tokenizer "$HW/tokenizer.bpe" "${HETERO_MODEL[@]}" \
      --steps "$HETERO_STEPS" --lr 3e-4 --eval-interval 0 --eval-windows 2 --ckpt-interval 0 \
      --devices "$HETERO_DEVICES" --plan "$p" "${HETERO_PROFILE[@]}" --drift-threshold 0 --quiet --out "$HW/gpu3-$p"
    echo $? > "$HW/gpu3-$p.rc"
    touch "$HW/gpu3-$p.txt"  # a skipped stage wrote none
    rm -rf "$HW/gpu3-$p"/ckpt-*  # the final checkpoint (~1 GB): nothing reads it
  done
  echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOGS/hetero.txt"
fi

echo "total $(elapsed) s" >> "$LOGS/env.log"
report
cat "$RES/results.md"
