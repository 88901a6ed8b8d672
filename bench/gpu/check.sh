#!/usr/bin/env bash
# The one GPU check: on a fresh GPU machine (python with meson, ninja and PyTorch; no apt,
# no network) builds GPUMix for the GPU found, runs the CUDA tests, the CUDA kernel
# benchmarks and the PyTorch comparison, and writes results.md plus full logs to $OUT (or
# bench/results/gpu-<date>/ when $OUT is unset). Every stage has a time limit; a failed
# stage is recorded and the script goes on. Whole budget: 8 minutes.
#
# Needs .gpudeps/deps.tar.xz from bench/gpu/prepare.sh (carry `.gpudeps` in the device
# tool). Device tool call, for instance:
#   run(command="bash bench/gpu/check.sh", carry=[".gpudeps"], timeout_s=560)
# Here (no GPU) it rehearses everything up to the point where a GPU is needed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
RES=${OUT:-$ROOT/bench/results/gpu-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RES"
BUILD=${GPUMIX_BUILD:-/tmp/gpumix-build-gpu}
# Rehearsal knobs (defaults are for the GPU machine): GPUMIX_CHECK_SCALE multiplies every
# time limit (a 2-core machine builds far slower); GPUMIX_CHECK_KEEP_BUILD=1 reuses $BUILD.
SCALE=${GPUMIX_CHECK_SCALE:-1}
T0=$(date +%s)
TABLE="$RES/stages.tmp"
: > "$TABLE"
elapsed() { echo $(( $(date +%s) - T0 )); }

# stage NAME LIMIT_S LOGFILE CMD...: runs CMD under timeout, appends to LOGFILE, records.
stage() {
  local name=$1 limit=$2 log=$3; shift 3
  local left=$(( 470 * SCALE - $(elapsed) ))  # keep ~10 s for the table
  limit=$(( limit * SCALE ))
  if [ "$left" -lt 15 ]; then
    echo "| $name | skipped (out of time) | 0 |" >> "$TABLE"; return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local s=$(date +%s)
  echo "==== $name (limit ${limit}s) $(date -u +%H:%M:%S)" >> "$log"
  if declare -F "$1" >/dev/null; then
    "$@" >> "$log" 2>&1  # a function of this script (quick, cannot hang): no timeout
  else
    timeout -k 5 "$limit" "$@" >> "$log" 2>&1
  fi
  local rc=$?
  local d=$(( $(date +%s) - s ))
  local what="ok"
  [ $rc -ne 0 ] && what="FAILED rc=$rc"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && what="TIMED OUT after ${limit}s"
  echo "| $name | $what | $d |" >> "$TABLE"
  echo "[$(elapsed)s] $name: $what (${d}s)"
  return $rc
}

# ---- environment ---------------------------------------------------------------------------
ENVLOG="$RES/env.log"
{
  echo "date: $(date -u)"; uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  command -v nvcc && nvcc --version | tail -2
  g++ --version | head -1; python3 --version; meson --version; ninja --version
  command -v pkg-config pkgconf cmake
  nproc; free -g | head -2; df -h /tmp | tail -1
} > "$ENVLOG" 2>&1
export PATH="/usr/local/cuda/bin:$PATH"
NVCC=$(command -v nvcc || true)

# ---- dependencies from .gpudeps ----------------------------------------------------------------
# Unpacked outside the working tree, so that .gpudeps (what travels) stays the tarball.
DEPS_ROOT=${GPUMIX_DEPS_ROOT:-/tmp/gpumix-gpudeps/root}
setup_deps() {
  if [ ! -f "$ROOT/.gpudeps/deps.tar.xz" ]; then
    echo "missing .gpudeps/deps.tar.xz: run bench/gpu/prepare.sh here and carry .gpudeps"; return 1
  fi
  rm -rf "$DEPS_ROOT" && mkdir -p "$(dirname "$DEPS_ROOT")" &&
    { tar -C "$(dirname "$DEPS_ROOT")" -xJf "$ROOT/.gpudeps/deps.tar.xz" ||
      python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
        "$ROOT/.gpudeps/deps.tar.xz" "$(dirname "$DEPS_ROOT")"; } || return 1
  # make the .pc files point into the unpacked tree
  find "$DEPS_ROOT" -name '*.pc' -print0 | xargs -0 sed -i "s|/usr/|$DEPS_ROOT/usr/|g"
  echo "unpacked $(du -sh "$DEPS_ROOT" | cut -f1) into $DEPS_ROOT"
}
stage deps 60 "$ENVLOG" setup_deps
L="$DEPS_ROOT/usr/lib/x86_64-linux-gnu"
export PKG_CONFIG="$DEPS_ROOT/usr/bin/pkgconf"
export PKG_CONFIG_LIBDIR="$L/pkgconfig:$DEPS_ROOT/usr/share/pkgconfig:$L/openblas-openmp/pkgconfig"
unset PKG_CONFIG_PATH
export CPATH="$DEPS_ROOT/usr/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$L:$L/openblas-openmp${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$L:$L/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

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
stage nccl 30 "$ENVLOG" find_nccl
[ -f /tmp/gpumix_cuda_path ] && export CUDA_PATH=$(cat /tmp/gpumix_cuda_path)
[ -f /tmp/gpumix_nccl_lib ] && export LD_LIBRARY_PATH="$(cat /tmp/gpumix_nccl_lib):$LD_LIBRARY_PATH"

# ---- build ---------------------------------------------------------------------------------------
# The GPU's compute capability (e.g. 90); 90 when no GPU answers (the rehearsal).
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -z "$CC" ] && CC=90
BLOG="$RES/build.log"
[ "${GPUMIX_CHECK_KEEP_BUILD:-0}" = 1 ] || rm -rf "$BUILD"
[ -f "$BUILD/build.ninja" ] && CONF=(--reconfigure) || CONF=()
stage configure 90 "$BLOG" meson setup "${CONF[@]}" "$BUILD" -Dgpu_archs="$CC" -Dmpi=disabled -Dcuda=enabled \
  -Dbuildtype=release
stage build-cuda 240 "$BLOG" ninja -C "$BUILD" tests/cuda/test_cuda bench/cuda/bench_cuda
grep -E "warning|error" "$BLOG" | grep -v "^====" | head -20 > "$RES/warnings.tmp"

# ---- tests -----------------------------------------------------------------------------------------
TLOG="$RES/test.log"
if [ -x "$BUILD/tests/cuda/test_cuda" ]; then
  stage test-cuda 120 "$TLOG" "$BUILD/tests/cuda/test_cuda" --gtest_color=no
else
  echo "| test-cuda | not built |  |" >> "$TABLE"
fi

# ---- benchmarks ---------------------------------------------------------------------------------------
BLOG2="$RES/bench.txt"
if [ -x "$BUILD/bench/cuda/bench_cuda" ]; then
  stage bench-cuda 120 "$BLOG2" "$BUILD/bench/cuda/bench_cuda" --benchmark_min_time=0.2 \
    --benchmark_out="$RES/bench.json" --benchmark_out_format=json
else
  echo "| bench-cuda | not built |  |" >> "$TABLE"
fi

# ---- PyTorch comparison --------------------------------------------------------------------------------
stage torch 90 "$RES/torch.txt" env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/gpu/torch_compare.py"

# ---- the rest of the library (after the results above, so that it cannot starve them) -------------
stage build-all 100 "$BLOG" ninja -C "$BUILD"

# ---- results.md -----------------------------------------------------------------------------------------
{
  echo "# GPU check $(date -u +%Y-%m-%d\ %H:%M) UTC"
  echo
  echo "Device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'none (nvidia-smi failed)')"
  echo "Build: gpu_archs=$CC, $(nvcc --version 2>/dev/null | grep -o "release [0-9.]*")"
  echo
  echo "| stage | result | seconds |"
  echo "|---|---|---|"
  cat "$TABLE"
  echo "| e2e gpt2-124M training tokens/s | not yet implemented (needs the GPT model on CUDA) | |"
  echo
  echo "## CUDA tests"
  echo '```'
  grep -E "tests? from .* test suites? ran|^\[  PASSED  \] [0-9]|^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [0-9]" "$TLOG" 2>/dev/null
  grep -m1 -E "no CUDA device" "$TLOG" 2>/dev/null
  grep -E "^\[  FAILED  \] [A-Za-z]" "$TLOG" 2>/dev/null | sort -u | head -30
  grep -E ": Failure$|out of tolerance|what\(\)|terminate called" "$TLOG" 2>/dev/null | head -30
  echo '```'
  echo
  echo "## CUDA kernels (events, L2 flushed for memory-bound kernels)"
  echo '```'
  grep -E "^(device|BM_|bench_cuda)" "$BLOG2" 2>/dev/null | sed -E 's/ +/ /g' | head -60
  echo '```'
  echo
  echo "## PyTorch, same kernels, same timing"
  echo '```'
  grep -vE "^====" "$RES/torch.txt" 2>/dev/null | tail -30
  echo '```'
  if [ -s "$RES/warnings.tmp" ]; then
    echo; echo "## Build warnings/errors (first 20)"; echo '```'; cat "$RES/warnings.tmp"; echo '```'
  fi
  echo
  echo "Total: $(elapsed) s. Logs: env.log, build.log, test.log, bench.txt, bench.json, torch.txt."
} > "$RES/results.md"
rm -f "$TABLE" "$RES/warnings.tmp"
cat "$RES/results.md"
