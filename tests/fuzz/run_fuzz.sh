#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz if needed and runs each
# for a bounded time from its committed seed corpus (tests/fuzz/corpus/<target>/). Exits
# non-zero when any target crashes, hits a sanitizer report, leaks or times out on an input;
# the input that did it is saved as build-fuzz/fuzz-artifacts/<target>-crash-<sha1>. Make
# it a regression seed with: cp <that file> tests/fuzz/corpus/<target>/regress-<what>
#   tests/fuzz/run_fuzz.sh                 every target, 30 s each
#   FUZZ_SECONDS=300 tests/fuzz/run_fuzz.sh cluster plan    chosen targets, 5 minutes each
#   FUZZ_SECONDS=0 tests/fuzz/run_fuzz.sh  replay the committed corpus only
# New interesting inputs go to build-fuzz/fuzz-work/<target>/, never into the committed
# corpus (minimise and copy by hand what is worth keeping).
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${GPUMIX_FUZZ_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-30}
all=(cluster profile plan device_spec token_file tokenizer checkpoint_meta checkpoint_data)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev) | FAILED"
  exit 1
fi
mkdir -p "$dir"
if [ ! -f "$dir/build.ninja" ]; then
  if ! CC=clang CXX=clang++ meson setup "$dir" -Dfuzz=true -Db_sanitize=address,undefined \
      -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link -Dbuildtype=debugoptimized \
      -Dcuda=disabled -Dmpi=disabled -Dbenchmarks=false >"$dir/fuzz-setup.log" 2>&1; then
    tail -n 30 "$dir/fuzz-setup.log"
    echo "fuzz: meson setup failed (see $dir/fuzz-setup.log) | FAILED"
    exit 1
  fi
fi
exes=()
for t in "${targets[@]}"; do exes+=("tests/fuzz/fuzz_$t"); done
if ! ninja -C "$dir" "${exes[@]}" >"$dir/fuzz-build.log" 2>&1; then
  grep -m 20 -B 2 -A 8 'error' "$dir/fuzz-build.log" || tail -n 40 "$dir/fuzz-build.log"
  echo "fuzz: build failed (see $dir/fuzz-build.log) | FAILED"
  exit 1
fi

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=${FUZZ_DETECT_LEAKS:-1}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
mkdir -p "$dir/fuzz-artifacts" "$dir/fuzz-logs"
failed=0
for t in "${targets[@]}"; do
  seeds="tests/fuzz/corpus/$t"
  work="$dir/fuzz-work/$t"
  log="$dir/fuzz-logs/$t.log"
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
  else
    failed=1
    art=$(grep -o "Test unit written to [^ ]*" "$log" | tail -n 1 | cut -d' ' -f5)
    echo "fuzz_$t: FAILED (exit $rc) | input: ${art:-none} | log: $log"
    grep -m 1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|uncaught exception|what\(\)' "$log" | sed 's/^/    /'
  fi
done
exit $failed
