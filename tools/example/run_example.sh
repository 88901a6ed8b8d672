#!/usr/bin/env bash
# Installs the built library into a temporary root, builds an example against it through
# pkg-config, as a user of the installed library would, runs it, and checks what it did
# against the installed gpumix program on the same tokens (`gpumix tokenizer encode
# --bytes`: the example trains on a text file's bytes):
#   c        tools/example/train.c (cc, gpumix.pc): trains on 2 emulated thread ranks and
#            uses the model; the ids it samples must be `gpumix generate --prompt-ids`'s on
#            its checkpoint.
#   mpi      tools/example/train_mpi.c (mpicc) under mpirun -np 3, as a 2-rank and a 1-rank
#            model on sub-communicators, then as one 3-rank model on an uneven plan file;
#            each model's losses must be those of `gpumix train` (under mpirun with as many
#            ranks) on the same tokens and plan, and every rank's sampled ids gpumix
#            generate's.
#   fortran  tools/example/train.f90 (mpifort, gpumix-fortran.pc) under mpirun -np 2: the
#            same checks for the Fortran module's MPI form.
# Losses agree within the fp32 allowance of tests/dist_engine (relative 1e-5); ids exactly.
# Usage: run_example.sh BUILD_DIR [c|mpi|fortran]
set -euo pipefail
build=$(realpath "$1")
mode=${2:-c}
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --destdir "$work/root" --no-rebuild --quiet
pc=$(dirname "$(find "$work/root" -name gpumix.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$work/root"
libdir=$(dirname "$(find "$work/root" -name 'libgpumix.so*' | head -n 1)")
gpumix=$(find "$work/root" -type f -name gpumix -perm -u+x | head -n 1)
text=/usr/share/common-licenses/GPL-3
export LD_LIBRARY_PATH="$libdir" GPUMIX_CACHE="$work/cache"
cd "$work"
"$gpumix" tokenizer encode --bytes --data "$text" --out bytes.tok >/dev/null
# The settings of the examples, for the gpumix program.
cli=(train --data bytes.tok --model gpt-nano --seq 64 --batch 8 --steps 6 --lr 3e-3 --seed 1337 --threads 1 --quiet)

# The ids after the prompt that `gpumix generate` samples from a checkpoint, as the examples do.
generate() {  # CHECKPOINT PROMPT_IDS
  "$gpumix" generate --ckpt "$1" --prompt-ids "$2" --tokens 16 --temperature 0.8 --top-k 20 --seed 7 \
    --threads 1 | cut -d' ' -f"$(( $(tr -cd , <<<"$2" | wc -c) + 2 ))"-
}

# Every line "<prefix> ID ..." of FILE must list EXPECTED (and there must be COUNT of them).
expect_ids() {  # FILE PREFIX EXPECTED COUNT
  local n
  n=$(grep -c -- "$2 " "$1" || true)
  [ "$n" -eq "$4" ] || { echo "expected $4 lines '$2', got $n"; cat "$1"; exit 1; }
  if grep -- "$2 " "$1" | sed "s/.*$2 //" | grep -vxF -- "$3"; then
    echo "'$2' differs from gpumix generate's: $3"
    exit 1
  fi
  echo "$2 $3 (= gpumix generate)"
}

# The losses of two runs' logs, step by step.
same_losses() {  # RUN REFERENCE_RUN
  python3 - "$1" "$2" <<'EOF'
import json, sys
def losses(run):
    return [json.loads(l)["loss"] for l in open(run + "/log.jsonl") if '"final"' not in l]
got, ref = losses(sys.argv[1]), losses(sys.argv[2])
rtol = 1e-5  # fp32: tests/dist_engine/engine_test_util.h, kLossRtol
bad = [i for i, (a, b) in enumerate(zip(got, ref)) if abs(a - b) > rtol * abs(b)]
if len(got) != len(ref) or not got or bad:
    sys.exit(f"{sys.argv[1]}: losses {got}\n  differ from {sys.argv[2]}'s {ref}")
print(f"{sys.argv[1]}: {len(got)} losses = gpumix train's within {rtol:g} relative (last {got[-1]:.6f})")
EOF
}

licenses=76,105,99,101,110,115,101,115  # the bytes of "Licenses", the MPI examples' prompt
case "$mode" in
  c)
    cc -std=c11 -Wall -Wextra -Werror "$here/train.c" $(pkg-config --cflags --libs gpumix) -lm -o train
    OMP_NUM_THREADS=2 ./train "$text" run | tee c.out
    grep -q "expected error: run folder run is in use by another run (pid " c.out ||
      { echo "the second session on the folder was not refused"; exit 1; }
    prompt=$(head -c 8 "$text" | od -An -tu1 | tr -s ' ' ',' | sed 's/^,//; s/,$//')
    expect_ids c.out "generated:" "$(generate run "$prompt")" 1
    ;;
  mpi)
    mpicc -std=c11 -Wall -Wextra -Werror "$here/train_mpi.c" $(pkg-config --cflags --libs gpumix) -o train_mpi
    mpirun -np 3 ./train_mpi "$text" groups 2 | tee groups.out
    # Without the communicator, two of the three plain sessions on one folder were refused.
    [ "$(grep -c 'expected error: run folder groups/shared-without-comm is in use by another run (pid' groups.out)" -eq 2 ] ||
      { echo "plain sessions of the ranks on one folder were not refused"; exit 1; }
    grep -q "model 0 expected error: .*gpumix_train.*steps must be >= 1" groups.out
    mpirun -np 2 "$gpumix" "${cli[@]}" --out cli2 >/dev/null
    "$gpumix" "${cli[@]}" --out cli1 >/dev/null
    same_losses groups/model-0 cli2
    same_losses groups/model-1 cli1
    expect_ids groups.out "model 0 rank [0-9] generated:" "$(generate groups/model-0 "$licenses")" 2
    expect_ids groups.out "model 1 rank [0-9] generated:" "$(generate groups/model-1 "$licenses")" 1
    # 3 ranks, uneven: batches 1, 2, 5 as micro-batches of 1, 1, 2; shares 0, 0.3, 0.7.
    cat >plan.json <<'EOF'
{"format": "gpumix-plan", "version": 1, "planner": "given",
 "model": {"name": "gpt-nano", "L": 4, "NH": 4, "C": 128, "V": 256, "T": 64},
 "seq_len": 64, "global_batch": 8,
 "ranks": [{"device": "cpu", "batch": 1, "micro_batch": 1, "share": 0},
           {"device": "cpu", "batch": 2, "micro_batch": 1, "share": 0.3},
           {"device": "cpu", "batch": 5, "micro_batch": 2, "share": 0.7}]}
EOF
    mpirun -np 3 ./train_mpi "$text" uneven 3 plan.json | tee uneven.out
    mpirun -np 3 "$gpumix" "${cli[@]}" --plan plan.json --out cli3 >/dev/null
    same_losses uneven/model-0 cli3
    expect_ids uneven.out "model 0 rank [0-9] generated:" "$(generate uneven/model-0 "$licenses")" 3
    ;;
  fortran)
    # (-Wno-missing-include-dirs: the system folders that pkg-config prefixes with the sysroot)
    mpifort -Wall -Wno-missing-include-dirs -Werror "$here/train.f90" $(pkg-config --cflags --libs gpumix-fortran) -o train_f
    mpirun -np 2 ./train_f "$text" run | tee f.out
    grep -q "expected error: gpumix_forward: logits must be (vocab, seq, batch)" f.out
    # The log went to run.log (rank 0's lines: the table and the steps), not to the console.
    grep -q '^| model ' run.log && grep -q '^step 1/' run.log || { echo "run.log lacks the log"; cat run.log; exit 1; }
    if grep -q '^step 1/\|^| model ' f.out; then echo "the library printed on the console"; exit 1; fi
    grep -q "expected error: gpumix_generate_batch: offsets(1), lengths(2)" f.out
    grep -q "generate_batch: as gpumix_generate, independent of the other prompt, stops" f.out
    mpirun -np 2 "$gpumix" "${cli[@]}" --out cli2 >/dev/null
    same_losses run cli2
    expect_ids f.out "rank [0-9] generated:" "$(generate run "$licenses")" 2
    ;;
  *)
    echo "run_example.sh: unknown mode '$mode' (c, mpi or fortran)"
    exit 2
    ;;
esac
