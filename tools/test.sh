#!/usr/bin/env bash
# Builds GPUMix (installing what it needs) and runs every test suite, then prints the
# closing line "N passed, N failed, N skipped" counted over individual test cases.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
status=0
meson test -C build --print-errorlogs --num-processes 1 || status=$?
python3 tools/count_tests.py build/meson-logs/testlog.junit.xml
exit $status
