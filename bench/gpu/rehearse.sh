#!/usr/bin/env bash
# The GPU check rehearsed HERE as the GPU machine will run it: a fresh copy of what the
# device tool sends (the tracked files, the untracked ones git does not ignore, and the
# carried .gpudeps) in another folder, check.sh run there, with the build's source root
# hidden (a private mount namespace with an empty /work/wt-style parent, where unshare is
# allowed), so the carried build must find its test data through the link carried.py
# setup makes, as on a machine where the tree lies elsewhere. Without a GPU every GPU stage
# stops at the GPU point and says why; with GPUMIX_CHECK_EMULATED=1 (after
# `GPUMIX_CHECK_EMULATED=1 bench/gpu/prepare.sh`) the GPU stages run on the emulated device.
#
#   bench/gpu/rehearse.sh                              # results in /tmp/gpucheck-rehearsal
#   GPUMIX_CHECK_EMULATED=1 bench/gpu/rehearse.sh      # /tmp/gpucheck-rehearsal-emu
# GPUMIX_CHECK_SCALE (default 4; 20 emulated) stretches every time limit for 2 loaded cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
EMU=${GPUMIX_CHECK_EMULATED:-0}
SUFFIX=$([ "$EMU" = 1 ] && echo -emu || true)
FRESH=${GPUMIX_REHEARSAL_TREE:-/tmp/gpucheck-fresh$SUFFIX}
export OUT=${OUT:-/tmp/gpucheck-rehearsal$SUFFIX}
export GPUMIX_CHECK_SCALE=${GPUMIX_CHECK_SCALE:-$([ "$EMU" = 1 ] && echo 20 || echo 4)}
export GPUMIX_CARRIED_DIR=${GPUMIX_CARRIED_DIR:-/tmp/gpumix-carried$SUFFIX} GPUMIX_CHECK_LOGS=${GPUMIX_CHECK_LOGS:-/tmp/gpucheck-logs$SUFFIX}
DEPS=.gpudeps; [ "$EMU" = 1 ] && DEPS=.gpudeps-emu
[ -f $DEPS/build.tar.xz ] || { echo "rehearse.sh: no $DEPS/build.tar.xz: run $([ "$EMU" = 1 ] && echo "GPUMIX_CHECK_EMULATED=1 ")bench/gpu/prepare.sh first" >&2; exit 1; }
rm -rf "$FRESH" "$OUT" && mkdir -p "$FRESH/repo"
{ git ls-files -z; git ls-files -z --others --exclude-standard; } | \
  rsync -a --from0 --files-from=- ./ "$FRESH/repo/" 2>/dev/null ||
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | tar -c --null -T - -f - | tar -C "$FRESH/repo" -x
cp -r $DEPS "$FRESH/repo/"
echo "rehearse.sh: $(du -sh "$FRESH/repo" | cut -f1) in $FRESH/repo (what the device tool sends); OUT=$OUT"
# The GPU machine's python3 has PyTorch. Here Debian's python3-torch may be in /usr/bin's
# python3 only (a pyenv python3 ahead of it on the PATH lacks it): then /usr/bin goes first,
# so that the PyTorch stages import it and stop at the GPU point (no CUDA here) as they would
# on a machine without a GPU, instead of at the import.
if ! python3 -c "import torch" 2>/dev/null && /usr/bin/python3 -c "import torch" 2>/dev/null; then
  export PATH="/usr/bin:$PATH"
  echo "rehearse.sh: python3 is /usr/bin/python3 (it has PyTorch, the PATH's first python3 has not)"
fi
HIDE=$(dirname "$SRC")
RUN="bash '$FRESH/repo/bench/gpu/check.sh'"
if unshare -m --propagation private true 2>/dev/null; then
  echo "rehearse.sh: $HIDE hidden (empty) while check.sh runs: the build's source root $SRC is not there"
  unshare -m --propagation private bash -c "mount -t tmpfs gpucheck-hidden '$HIDE' && $RUN"
else
  echo "rehearse.sh: unshare not allowed here: $SRC stays visible (the source-root link is not exercised)"
  bash -c "$RUN"
fi
