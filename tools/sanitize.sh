#!/usr/bin/env bash
# Builds the CPU test suite with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan
# and runs it; any sanitizer report fails the test that triggered it (halt_on_error=1).
# Prints a one-line summary and exits non-zero when a test fails.
#   tools/sanitize.sh              configure (if needed), build and run everything
#   tools/sanitize.sh TEST...      only the given meson tests, by name (e.g. data checkpoint;
#                                  `meson test -C build-asan --list --no-rebuild` lists them);
#                                  meson test options pass through (e.g. --suite faults)
# NINJA_JOBS=N limits the build's parallel jobs (default: ninja's, cores + 2).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${GPUMIX_ASAN_DIR:-build-asan}
start=$(date +%s)

mkdir -p "$dir"
if [ ! -f "$dir/build.ninja" ]; then
  if ! meson setup "$dir" -Db_sanitize=address,undefined -Db_lundef=false \
      -Dbuildtype=debugoptimized -Dcuda=disabled -Dbenchmarks=false >"$dir/sanitize-setup.log" 2>&1; then
    tail -n 30 "$dir/sanitize-setup.log"
    echo "sanitize: meson setup failed (see $dir/sanitize-setup.log) | FAILED"
    exit 1
  fi
fi
# Everything when no tests are named; otherwise `meson test` below builds just what they need.
if [ $# -eq 0 ] && ! ninja -C "$dir" ${NINJA_JOBS:+-j "$NINJA_JOBS"} >"$dir/sanitize-build.log" 2>&1; then
  grep -m 20 -B 2 -A 8 'error' "$dir/sanitize-build.log" || tail -n 40 "$dir/sanitize-build.log"
  echo "sanitize: build failed (see $dir/sanitize-build.log) | FAILED"
  exit 1
fi

# LeakSanitizer needs ptrace-like access to stop threads; in some containers it cannot run
# and aborts every program. Probe once with a tiny program and enable leak checks if it works.
leaks=0
probe=$(mktemp -d)
printf 'int main(){return 0;}\n' > "$probe/p.cpp"
if c++ -fsanitize=address "$probe/p.cpp" -o "$probe/p" 2>/dev/null &&
   ASAN_OPTIONS=detect_leaks=1 "$probe/p" >/dev/null 2>&1; then
  leaks=1
fi
rm -rf "$probe"

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=$leaks:print_stacktrace=1:detect_stack_use_after_return=0:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
# OpenMP's runtime keeps thread-local pools alive past exit: not our leaks.
supp="$PWD/tools/lsan.supp"
[ -f "$supp" ] && export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0"

status=0
meson test -C "$dir" --print-errorlogs --num-processes 1 -t 4 "$@" || status=$?
elapsed=$(( $(date +%s) - start ))
if [ -f "$dir/meson-logs/testlog.junit.xml" ] && [ -f tools/count_tests.py ]; then
  counts=$(python3 tools/count_tests.py "$dir/meson-logs/testlog.junit.xml" | tail -n 1)
else
  counts="(no test log)"
fi
echo "sanitize: address,undefined leaks=$leaks | $counts | ${elapsed}s | $([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
