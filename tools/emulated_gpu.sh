#!/usr/bin/env bash
# The whole GPU suite on the emulated CUDA device (kernels/cuda_emulator), as CI runs it: the
# CUDA sources built as host C++ against the emulator (-Demulated_cuda=true, g++, its own
# folder build-emu), then every GPU test of that build — the meson tests whose name has the
# word cuda, gpu or nccl (bench/gpu/gpu_tests.py: tests/cuda, cuda_backend, engine_cuda,
# comm_local_cuda, engine_nccl_2ranks, comm_nccl_2ranks, the emulator's own, train_gpu_vs_cpu)
# — and fails when one fails or skips: on the emulated device nothing may skip. The race
# detector is on throughout (kernels/cuda_emulator/launch.h). Then the attention and
# tensor-core tests again under each run-ahead schedule (GPUMIX_EMULATED_SCHEDULE=warp-ahead,
# warp-shuffle: one warp, or each warp in turn, runs to its barrier before the others):
# cuda's attention cases (9), cuda_tensor_core (6), cuda_emulator_tensor_core (14) and
# cuda_emulator_seeded_bugs (7), 36 cases per schedule; the rest of the suite has no kernel
# whose warps share tiles across a barrier.
#   tools/emulated_gpu.sh            configure (if needed), build, run; results in
#                                    build-emu/meson-logs/emu.junit.xml (and
#                                    emu-SCHEDULE*.junit.xml for the reruns)
# Environment: GPUMIX_EMU_DIR=DIR another folder; NINJA_JOBS=N the build's parallel jobs;
# GPUMIX_EMU_SCHEDULES="..." the reruns' schedules (default "warp-ahead warp-shuffle"; empty:
# none).
# The emulator is a test device: its run times say nothing of a GPU's.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${GPUMIX_EMU_DIR:-build-emu}
start=$(date +%s)
mkdir -p "$dir/meson-logs"
rm -f "$dir"/meson-logs/emu*.junit.xml  # never count a previous run's results
if [ ! -f "$dir/build.ninja" ] &&
   ! meson setup "$dir" -Demulated_cuda=true -Dbenchmarks=false -Dfortran=disabled >"$dir/emu-setup.log" 2>&1; then
  tail -n 30 "$dir/emu-setup.log"
  rm -f "$dir/build.ninja"
  echo "emulated GPU: meson setup failed (see $dir/emu-setup.log) | FAILED"
  exit 1
fi
mapfile -t names < <(python3 bench/gpu/gpu_tests.py names "$dir")
if [ ${#names[@]} -eq 0 ]; then
  echo "emulated GPU: $dir has no GPU tests | FAILED"
  exit 1
fi
# gpumix (the script tests run it); `meson test` below builds what each named test needs.
if ! nice ninja -C "$dir" ${NINJA_JOBS:+-j "$NINJA_JOBS"} tools/gpumix >"$dir/emu-build.log" 2>&1; then
  grep -m 20 -B 2 -A 8 'error' "$dir/emu-build.log" || tail -n 40 "$dir/emu-build.log"
  echo "emulated GPU: build failed (see $dir/emu-build.log) | FAILED"
  exit 1
fi
build_secs=$(( $(date +%s) - start ))
status=0
meson test -C "$dir" --print-errorlogs --num-processes 1 --logbase emu "${names[@]}" || status=1
logs=("$dir/meson-logs/emu.junit.xml")
schedules=${GPUMIX_EMU_SCHEDULES-warp-ahead warp-shuffle}
for schedule in $schedules; do
  GPUMIX_EMULATED_SCHEDULE=$schedule meson test -C "$dir" --print-errorlogs --num-processes 1 \
    --logbase "emu-$schedule" cuda_tensor_core cuda_emulator_tensor_core cuda_emulator_seeded_bugs || status=1
  GPUMIX_EMULATED_SCHEDULE=$schedule GTEST_FILTER='*Attention*' meson test -C "$dir" --print-errorlogs \
    --num-processes 1 --logbase "emu-$schedule-attention" cuda || status=1
  logs+=("$dir/meson-logs/emu-$schedule.junit.xml" "$dir/meson-logs/emu-$schedule-attention.junit.xml")
done
counts=$(python3 tools/count_tests.py "${logs[@]}" | tail -n 1)
case "$counts" in
  *", 0 skipped") ;;
  *) status=1
     echo "emulated GPU: a GPU test skipped on the emulated device, where none may:"
     grep -B1 -A3 -E '\[  SKIPPED \]|SKIP ' "$dir"/meson-logs/emu*.txt 2>/dev/null | head -n 20 ;;
esac
echo "emulated GPU: ${#names[@]} tests (${names[*]}), then the attention and tensor-core tests under ${schedules:-no other schedule} | $counts | build ${build_secs}s, total $(( $(date +%s) - start ))s | $([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
