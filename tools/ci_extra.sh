#!/usr/bin/env bash
# The hardening checks that CI runs after the normal suite (docs/reliability.md), one line
# each and a non-zero exit on any failure, all in one clang build folder (build-san):
#   1. tools/sanitize.sh: the CPU test suite (tests/faults and the fuzz corpora's replay
#      included) built with ASan + UBSan and run; results in
#      build-san/meson-logs/san.junit.xml and san-mpi.junit.xml;
#   2. tests/fuzz/run_fuzz.sh: every libFuzzer target for FUZZ_SECONDS (10) s from its
#      committed corpus; results in build-san/fuzz-logs/fuzz.junit.xml.
# tools/test.sh counts those files in its closing line. Bounds, for a slow machine:
#   FUZZ_SECONDS=N       seconds per fuzz target (default 10 here, 12 targets: 2 minutes of
#                        a .ci/run that must stay under 45; run_fuzz.sh's own default is 15)
#   ASAN_TESTS="..."     only these meson tests under the sanitizers, by name (default: all
#                        but SAN_EXCLUDE, see tools/sanitize.sh)
# Full logs: build-san/ci-extra/{sanitize,fuzz}.log.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${GPUMIX_SAN_DIR:-build-san}
status=0
mkdir -p "$dir/ci-extra"
t0=$(date +%s)
# shellcheck disable=SC2086  # ASAN_TESTS is a word list
bash tools/sanitize.sh ${ASAN_TESTS:-} >"$dir/ci-extra/sanitize.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  status=1
  # The failing tests and the first sanitizer / gtest reports, before the summary.
  grep -E '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT) |ERROR: |runtime error|SUMMARY: |\[  FAILED  \]|error:' \
    "$dir/ci-extra/sanitize.log" | head -n 40
fi
echo "sanitizers: $([ $rc -eq 0 ] && echo ok || echo FAILED) | $(tail -n 1 "$dir/ci-extra/sanitize.log") | $(( $(date +%s) - t0 ))s"
t1=$(date +%s)
FUZZ_SECONDS=${FUZZ_SECONDS:-10} bash tests/fuzz/run_fuzz.sh >"$dir/ci-extra/fuzz.log" 2>&1
rc=$?
grep -E '^fuzz|^    ' "$dir/ci-extra/fuzz.log"
echo "fuzzing: $([ $rc -eq 0 ] && echo ok || echo FAILED) | $(( $(date +%s) - t1 ))s"
[ $rc -eq 0 ] || status=1
echo "ci_extra: $([ $status -eq 0 ] && echo ok || echo FAILED) in $(( $(date +%s) - t0 ))s"
exit $status
