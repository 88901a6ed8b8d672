#!/usr/bin/env bash
# Runs each libFuzzer target (clang, ASan + UBSan) for a bounded time from its committed
# seed corpus (tests/fuzz/corpus/<target>/), in the sanitizer build folder build-san
# (configured by tools/sanitize.sh --configure; only the targets are built here). Exits
# non-zero when any target crashes, hits a sanitizer report, leaks or times out on an
# input; the input that did it is saved as build-san/fuzz-artifacts/<target>-crash-<sha1>.
# Make it a regression seed with: cp <that file> tests/fuzz/corpus/<target>/regress-<what>
#   tests/fuzz/run_fuzz.sh                 every target, FUZZ_SECONDS (15) s each
#   FUZZ_SECONDS=300 tests/fuzz/run_fuzz.sh cluster plan    chosen targets, 5 minutes each
#   FUZZ_SECONDS=0 tests/fuzz/run_fuzz.sh  replay the committed corpus only
# One JUnit test case per target goes to build-san/fuzz-logs/fuzz.junit.xml (counted by
# tools/count_tests.py in CI's closing line). New interesting inputs go to
# build-san/fuzz-work/<target>/, never into the committed corpus (minimise and copy by hand
# what is worth keeping). GPUMIX_SAN_DIR=DIR uses another build folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${GPUMIX_SAN_DIR:-build-san}
seconds=${FUZZ_SECONDS:-15}
all=(cluster profile plan device_spec token_file tokenizer text_corpus checkpoint_meta checkpoint_data safetensors run_log choices)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
logs="$dir/fuzz-logs"
mkdir -p "$logs" "$dir/fuzz-artifacts"
results="$logs/results.tsv"  # target, ok|FAILED, seconds, message
: >"$results"
rm -f "$logs/fuzz.junit.xml"

# The JUnit file: one case per target, a failure with its message.
write_junit() {
  python3 - "$results" "$logs/fuzz.junit.xml" <<'EOF'
import sys
from xml.sax.saxutils import escape, quoteattr
rows = [l.rstrip("\n").split("\t", 3) for l in open(sys.argv[1]) if l.strip()]
failed = sum(1 for r in rows if r[1] != "ok")
out = ['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>",
       f'<testsuite name="fuzz" tests="{len(rows)}" failures="{failed}" errors="0">']
for name, status, secs, msg in rows:
    out.append(f'<testcase classname="fuzz" name={quoteattr(name)} time="{secs}">')
    if status != "ok":
        out.append(f"<failure message={quoteattr(msg)}>{escape(msg)}</failure>")
    out.append("</testcase>")
out += ["</testsuite>", "</testsuites>"]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF
}
fail_all() {  # the targets could not be built: each one is a failure
  for t in "${targets[@]}"; do printf 'fuzz_%s\tFAILED\t0\t%s\n' "$t" "$1" >>"$results"; done
  write_junit
  echo "fuzz: $1 | FAILED"
  exit 1
}

bash tools/sanitize.sh --configure || fail_all "cannot configure $dir"
exes=()
for t in "${targets[@]}"; do exes+=("tests/fuzz/fuzz_$t"); done
if ! nice ninja -C "$dir" ${NINJA_JOBS:+-j "$NINJA_JOBS"} "${exes[@]}" >"$logs/fuzz-build.log" 2>&1; then
  grep -m 20 -B 2 -A 8 'error' "$logs/fuzz-build.log" || tail -n 40 "$logs/fuzz-build.log"
  fail_all "build failed (see $logs/fuzz-build.log)"
fi

# Leak checks where LeakSanitizer can run (tools/leak_check_works.sh); FUZZ_DETECT_LEAKS=0|1
# decides instead.
leaks=${FUZZ_DETECT_LEAKS:-$(bash tools/leak_check_works.sh)}
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=$leaks"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
symbolizer=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
failed=0
for t in "${targets[@]}"; do
  seeds="tests/fuzz/corpus/$t"
  work="$dir/fuzz-work/$t"
  log="$logs/$t.log"
  mkdir -p "$work"
  start=$(date +%s)
  if [ "$seconds" -gt 0 ]; then
    "$dir/tests/fuzz/fuzz_$t" "$work" "$seeds" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=16384 -print_final_stats=1 \
      -artifact_prefix="$dir/fuzz-artifacts/$t-" >"$log" 2>&1
  else
    "$dir/tests/fuzz/fuzz_$t" -runs=0 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -artifact_prefix="$dir/fuzz-artifacts/$t-" "$seeds" >"$log" 2>&1
  fi
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "fuzz_$t: ok | ${runs:-?} runs | cov ${cov:-?} | ${secs}s"
    printf 'fuzz_%s\tok\t%s\t\n' "$t" "$secs" >>"$results"
  else
    failed=1
    art=$(grep -o "Test unit written to [^ ]*" "$log" | tail -n 1 | cut -d' ' -f5)
    why=$(grep -m 1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|uncaught exception|what\(\)' "$log" | tr '\t' ' ')
    echo "fuzz_$t: FAILED (exit $rc) | input: ${art:-none} | log: $log"
    [ -n "$why" ] && echo "    $why"
    printf 'fuzz_%s\tFAILED\t%s\texit %s; input %s; %s\n' "$t" "$secs" "$rc" "${art:-none}" "$why" >>"$results"
  fi
done
write_junit
exit $failed
