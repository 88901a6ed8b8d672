#!/usr/bin/env bash
# Run HERE (the development machine, with apt and the network), before a GPU call. Makes
# .gpudeps/, the one folder that travels with the tree (the device tool's `carry`, 64 MiB
# with the tree), and prints its size:
#
#   .gpudeps/build.tar.xz  the carried build (bench/gpu/carried.py pack): GPUMix built HERE
#       for sm_90 only (-Dgpu_archs=90, release, -Dmpi=disabled -Dfortran=disabled) in
#       $GPUMIX_CARRY_BUILD (default build-gpu90), then its programs (tools/gpumix,
#       bench/nn/bench_train, bench/cuda/bench_cuda, every GPU test), stripped, the shared
#       libraries ldd says they need that the GPU machine lacks (oneDNN, libgomp, PCRE2,
#       xxHash, Google Benchmark, OpenCL's loader; libstdc++ apart), the GPU tests' commands
#       and the fortunes corpus. bench/gpu/check.sh runs it there with no compilation.
#       MPI is off: the GPU machine has no Open MPI, and the only MPI GPU tests
#       (engine_nccl_2ranks, comm_nccl_2ranks) need two GPUs, which a one-H200 lease lacks.
#       cudart, cuBLASLt and NCCL are not carried: the GPU machine's toolkit (RUNPATH
#       /usr/local/cuda/lib64) or PyTorch's nvidia wheels provide them, matching its driver.
#   .gpudeps/deps.tar.xz   the Debian packages the GPU machine lacks to BUILD there (the
#       fallback when the GPU is not cc 9.0 or the carried programs do not load there):
#       GoogleTest, Google Benchmark, oneDNN, nlohmann-json, CLI11, PCRE2, xxHash, pkgconf,
#       fortunes; downloaded with apt-get download, unpacked with `dpkg -x` (never into /).
#
# GPUMIX_CHECK_EMULATED=1: packs the EMULATED build instead, into .gpudeps-emu/build.tar.xz
# (-Demulated_cuda=true in $GPUMIX_CARRY_BUILD, default build-emu-carry), for the rehearsal
# of check.sh here (bench/gpu/rehearse.sh); never carried to a GPU (check.sh refuses it).
# GPUMIX_PREPARE_DEPS=0 skips deps.tar.xz (no fallback build there); GPUMIX_JOBS (default 2)
# the ninja jobs; GPUMIX_PREPARE_NO_BUILD=1 packs the build folder as it is (a rehearsal of
# the packing; the manifest says so). The first sm_90 build takes long on 2 shared cores (nice; ccache after).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT_MIB=64   # the device tool: the working tree and every carried path together
EMULATED=${GPUMIX_CHECK_EMULATED:-0}
# The emulated build goes to its own folder (git ignores .gpudeps*/), so that .gpudeps keeps
# the one that travels to the GPU.
DEPS=.gpudeps; [ "$EMULATED" = 1 ] && DEPS=.gpudeps-emu
mkdir -p "$DEPS"

# ---- the fallback's Debian packages ----------------------------------------------------------
if [ "${GPUMIX_PREPARE_DEPS:-1}" = 1 ] && [ "$EMULATED" = 0 ]; then
  PKGS=(libgtest-dev libbenchmark-dev libbenchmark1debian libdnnl2 libdnnl-dev
        nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0 libxxhash-dev libxxhash0 zlib1g-dev
        pkgconf pkgconf-bin libpkgconf3 fortunes)
  rm -rf "$DEPS/debs" "$DEPS/root" "$DEPS/deps.tar.xz"
  mkdir -p "$DEPS/debs" "$DEPS/root"
  (cd "$DEPS/debs" && apt-get download "${PKGS[@]}")
  for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" "$DEPS/root"; done
  R="$DEPS/root"
  # Trim: docs, man pages, cmake files.
  rm -rf "$R"/usr/share/doc "$R"/usr/share/man "$R"/usr/share/lintian \
         "$R"/usr/lib/x86_64-linux-gnu/cmake "$R"/usr/share/cmake "$R"/usr/lib/cmake
  tar -C "$DEPS" -cJf "$DEPS/deps.tar.xz" root
  rm -rf "$DEPS/debs" "$DEPS/root"
  echo "prepare.sh: $(du -h "$DEPS/deps.tar.xz" | cut -f1) in $DEPS/deps.tar.xz (packages: ${PKGS[*]})"
fi

# ---- the carried build -------------------------------------------------------------------------
if [ "$EMULATED" = 1 ]; then
  B=${GPUMIX_CARRY_BUILD:-build-emu-carry}
  OPTS=(-Demulated_cuda=true -Dmpi=disabled -Dfortran=disabled -Dbuildtype=release)
else
  B=${GPUMIX_CARRY_BUILD:-build-gpu90}
  OPTS=(-Dgpu_archs=90 -Dcuda=enabled -Dmpi=disabled -Dfortran=disabled -Dbuildtype=release)
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
fi
if [ -f "$B/build.ninja" ]; then
  meson configure "$B" "${OPTS[@]}" >/dev/null  # the options above, whatever it had
else
  meson setup "$B" "${OPTS[@]}" >/dev/null
fi
mapfile -t TARGETS < <(python3 bench/gpu/gpu_tests.py targets "$B")
[ ${#TARGETS[@]} -gt 0 ] || { echo "prepare.sh: $B has no GPU tests: was it configured with ${OPTS[*]}?" >&2; exit 1; }
PACK_FLAGS=()
if [ "${GPUMIX_PREPARE_NO_BUILD:-0}" = 1 ]; then
  # A rehearsal of the packing only: the manifest's commit says "not-rebuilt-", and check.sh
  # then warns that the programs may be older than the tree.
  echo "prepare.sh: GPUMIX_PREPARE_NO_BUILD=1: packing $B as it is, NOT brought up to date"
  PACK_FLAGS=(--not-rebuilt)
else
  echo "prepare.sh: building $B (${OPTS[*]}): tools/gpumix bench/nn/bench_train bench/cuda/bench_cuda ${TARGETS[*]}"
  nice ninja -C "$B" -j"${GPUMIX_JOBS:-2}" tools/gpumix bench/nn/bench_train bench/cuda/bench_cuda "${TARGETS[@]}"
fi

# What else travels: the tracked files and the untracked ones git does not ignore, and
# the folder's other files (deps.tar.xz).
TREE=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
OTHER=$(find "$DEPS" -type f ! -name 'build.tar.xz*' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
python3 bench/gpu/carried.py pack "$B" "$DEPS/build.tar.xz" --limit-mib "$LIMIT_MIB" --tree-bytes $(( TREE + OTHER )) "${PACK_FLAGS[@]}"
TOTAL=$(( TREE + $(du -cb "$DEPS" | tail -1 | cut -f1) ))
echo "prepare.sh: $DEPS $(du -sh "$DEPS" | cut -f1) ($(ls "$DEPS" | tr '\n' ' ')); with the tree $(( TOTAL / 1048576 )) MiB of $LIMIT_MIB travel"
[ "$TOTAL" -le $(( LIMIT_MIB * 1048576 )) ] ||
  { echo "prepare.sh: REFUSED: $TOTAL bytes would travel, over $LIMIT_MIB MiB" >&2; exit 1; }
[ "$EMULATED" = 1 ] && { echo "prepare.sh: the emulated rehearsal: GPUMIX_CHECK_EMULATED=1 bench/gpu/rehearse.sh"; exit 0; }
echo "prepare.sh: device tool call: run(command=\"bash bench/gpu/check.sh\", carry=[\".gpudeps\"], timeout_s=340)"
