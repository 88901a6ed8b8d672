#!/usr/bin/env bash
# Builds GPUMix (installing what it needs) and runs every test suite, then prints the
# closing line "N passed, N failed, N skipped" counted over individual test cases, last.
# After the normal suite (build/) come the hardening checks (tools/ci_extra.sh: the suite
# again under ASan + UBSan in build-san, and every fuzz target for FUZZ_SECONDS each); their
# test cases, one per fuzz target, count in the closing line too. GPUMIX_HARDENING=0 skips
# them (about 10 minutes from an empty build-san on two cores). Between the two, the GPU suite
# runs on the emulated CUDA device (tools/emulated_gpu.sh, build-emu; GPUMIX_EMULATED_GPU_TESTS=0
# skips it).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! bash tools/setup.sh; then
  echo "setup or build failed"
  python3 tools/count_tests.py /nonexistent/testlog.junit.xml 2>/dev/null  # 0 passed, 1 failed
  exit 1
fi
status=0
meson test -C build --print-errorlogs --num-processes 1 || status=1
logs=(build/meson-logs/testlog.junit.xml)
# The GPU suite on the emulated CUDA device (build-emu): the CUDA code runs on every commit.
if [ "${GPUMIX_EMULATED_GPU_TESTS:-1}" != 0 ]; then
  bash tools/emulated_gpu.sh || status=1
  logs+=("${GPUMIX_EMU_DIR:-build-emu}/meson-logs/emu.junit.xml")
fi
if [ "${GPUMIX_HARDENING:-1}" != 0 ]; then
  bash tools/ci_extra.sh || status=1
  san=${GPUMIX_SAN_DIR:-build-san}
  logs+=("$san/meson-logs/san.junit.xml" "$san/meson-logs/san-mpi.junit.xml" "$san/fuzz-logs/fuzz.junit.xml")
fi
python3 tools/count_tests.py "${logs[@]}"
exit $status
