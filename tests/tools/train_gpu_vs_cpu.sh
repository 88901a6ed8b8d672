#!/usr/bin/env bash
# The main job's model on three ranks sharing one GPU (a real one, or the emulated CUDA
# device of a -Demulated_cuda=true build), against the same plan on three CPU ranks in bf16:
#   train_gpu_vs_cpu.sh GPUMIX CORPUS BUILD      (BUILD: nvcc, or emulated)
# First `gpumix selfcheck` must list cuda:0 and pass its bf16 gradient check. Then the main
# job's model (gpt-nano, lr 2e-3; BATCH x SEQ sequences, by default 8 x 64, a quarter of the
# main job's 16 x 128 tokens, so that the emulated device's run fits in CI: 16 x 128 took 13
# minutes there on two loaded cores) trains 10 steps under one given plan (rank batches
# 1/2, 1/4, 1/4 of the batch as two micro-batches each, shares .5/.25/.25) on
#   cuda:0:mem=2GiB, cuda:0:mem=1GiB:slow=2, cuda:0:mem=512MiB:slow=1.5   and
#   cpu:mem=2GiB,    cpu:mem=1GiB:slow=2,    cpu:mem=512MiB:slow=1.5.
# Allowance, per step: |loss_gpu - loss_cpu| <= 2 x 2^-8 x loss_cpu. Both backends compute
# in bf16 with fp32 accumulation and round at the same points (core/precision.h's contract);
# they differ only in the order of their fp32 sums (cuBLASLt's k-loop against oneDNN's, the
# attention and reduction kernels'), so an activation lands at most one bf16 ulp (2^-8
# relative) away where the two sums straddle a rounding boundary. A bf16 run against an fp32
# one is held to 2^-8 (tests/dist_engine); two bf16 backends, each that far from fp32, to
# twice that (tests/dist_engine/test_engine_cuda.cpp uses the same). It is meaningful: the
# loss falls by ~12x the allowance over the 10 steps at 8 x 64 (0.757 on the CPU; the emulated
# GPU's worst step was 2.1e-5 off), and the script prints the factor of the run. 10 steps, not
# 20: the emulated device's run is nearly all of this test's time, and 10 took 121 s against
# 20's 187 s on an idle machine; the second 10 steps checked nothing the first 10 do not.
# --val-fraction 0.01: the last step's full validation (the losses compared are the steps')
# took half of the emulated GPU's run over the default 10 %'s 660 windows.
set -euo pipefail
gpumix=$1 corpus=$2 build=$3  # build: nvcc or emulated (the CUDA backend gpumix was built with)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$gpumix" selfcheck > "$dir/selfcheck.txt" 2>&1 || { cat "$dir/selfcheck.txt"; echo "FAIL: gpumix selfcheck"; exit 1; }
# A CUDA build on a machine without a GPU: skipped (meson's 77), with the runtime's reason.
if grep -q "(no CUDA GPU:" "$dir/selfcheck.txt"; then grep "(no CUDA GPU:" "$dir/selfcheck.txt"; exit 77; fi
grep -q "cuda:0 .*gradient check in bf16 passed" "$dir/selfcheck.txt" ||
  { cat "$dir/selfcheck.txt"; echo "FAIL: selfcheck did not check cuda:0 in bf16"; exit 1; }
"$gpumix" tokenizer train --data "$corpus" --vocab 4096 --out "$dir/tok.bpe" > "$dir/tok.txt" 2>&1 ||
  { cat "$dir/tok.txt"; exit 1; }
B=${BATCH:-8} T=${SEQ:-64} STEPS=10
common=(--data "$corpus" --tokenizer "$dir/tok.bpe" --model gpt-nano --steps "$STEPS" --batch "$B" --seq "$T" --lr 2e-3
        --eval-interval 0 --eval-windows 2 --val-fraction 0.01 --ckpt-interval 0 --dtype bf16 --quiet
        --batches $((B / 2)),$((B / 4)),$((B / 4)) --micro-batches $((B / 4)),$((B / 8)),$((B / 8))
        --shares 0.5,0.25,0.25)
for kind in cuda:0 cpu; do
  name=${kind%%:*}
  devices="$kind:mem=2GiB,$kind:mem=1GiB:slow=2,$kind:mem=512MiB:slow=1.5"
  "$gpumix" train "${common[@]}" --devices "$devices" --out "$dir/$name" > "$dir/$name.txt" 2>&1 ||
    { tail -n 30 "$dir/$name.txt"; echo "FAIL: gpumix train --devices $devices"; exit 1; }
done
python3 - "$dir/cuda/log.jsonl" "$dir/cpu/log.jsonl" "$build" "$STEPS" <<'PY'
import json, sys
# MFU: against a peak on a real GPU (its datasheet's where the catalog has it), n/a on the
# emulated one (it has an H200's name only).
steps = [l for l in map(json.loads, open(sys.argv[1])) if "loss" in l and not l.get("final")]
if sys.argv[3] == "emulated":
    assert steps[0]["peak_flops"] is None and "emulated GPU" in steps[0]["peak"], steps[0]
    assert not any("mfu" in l for l in steps), [l for l in steps if "mfu" in l][0]
else:
    assert steps[0]["peak_flops"] > 0, steps[0]
    assert all(l["mfu"] > 0 for l in steps), steps
def losses(path):
    return {l["step"]: l["loss"] for l in map(json.loads, open(path)) if "loss" in l and not l.get("final")}
gpu, cpu = losses(sys.argv[1]), losses(sys.argv[2])
last = int(sys.argv[4])
assert sorted(gpu) == sorted(cpu) == list(range(1, last + 1)), (sorted(gpu), sorted(cpu))
allow = 2 * 2 ** -8
worst = max(abs(gpu[s] - cpu[s]) / cpu[s] for s in cpu)
for s in sorted(cpu):
    print(f"step {s:2d}: cuda {gpu[s]:.5f} cpu {cpu[s]:.5f} rel {abs(gpu[s] - cpu[s]) / cpu[s]:.2e}")
fall = cpu[1] - cpu[last]
print(f"worst relative difference {worst:.2e} (allowance {allow:.2e}); loss fell {fall:.3f} = "
      f"{fall / (allow * cpu[1]):.0f}x the allowance")
sys.exit(0 if worst <= allow else 1)
PY
