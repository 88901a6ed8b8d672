#!/usr/bin/env bash
# The hardening checks for CI (docs/reliability.md), one line each and a non-zero exit on
# any failure: the ASan + UBSan build of the CPU test suite (tools/sanitize.sh, which also
# runs the fault tests of tests/faults) and every libFuzzer target for FUZZ_SECONDS (30) s
# from its committed corpus (tests/fuzz/run_fuzz.sh). Build folders: build-asan, build-fuzz.
# Bounds, for a slow machine (measured numbers in docs/reliability.md):
#   FUZZ_SECONDS=N       seconds per fuzz target (default 30; 8 targets)
#   ASAN_TESTS="..."     only these meson tests under the sanitizers, by name, and only what
#                        they need is built (default: the whole CPU suite, all built), e.g.
#                        ASAN_TESTS="data checkpoint tools faults_disk_full" (names and
#                        --suite do not mix: meson runs their intersection)
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
mkdir -p build-ci-extra  # its logs (ignored: build*/)
t0=$(date +%s)
# shellcheck disable=SC2086  # ASAN_TESTS is a word list
bash tools/sanitize.sh ${ASAN_TESTS:-} >build-ci-extra/sanitize.log 2>&1
rc=$?
line=$(tail -n 1 build-ci-extra/sanitize.log)
echo "sanitizers: $([ $rc -eq 0 ] && echo ok || echo FAILED) | $line | $(( $(date +%s) - t0 ))s"
[ $rc -eq 0 ] || { status=1; grep -E 'ERROR: |runtime error|FAIL' build-ci-extra/sanitize.log | head -n 20; }
t1=$(date +%s)
FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash tests/fuzz/run_fuzz.sh >build-ci-extra/fuzz.log 2>&1
rc=$?
cat build-ci-extra/fuzz.log | grep -E '^fuzz|^    |FAILED'
echo "fuzzing: $([ $rc -eq 0 ] && echo ok || echo FAILED) | $(( $(date +%s) - t1 ))s"
[ $rc -eq 0 ] || status=1
echo "ci_extra: $([ $status -eq 0 ] && echo ok || echo FAILED) in $(( $(date +%s) - t0 ))s"
exit $status
