#!/usr/bin/env python3
"""The GPU tests of a meson build, for bench/gpu/check.sh.

A GPU test is a meson test whose name has the word "cuda", "gpu" or "nccl" (case-insensitive,
between non-letters: engine_cuda, comm_nccl_2ranks, not ..._gpumix):
tests/cuda's, and those that the engines register for their GPU cases. Whatever exists
in the build is run; nothing is listed here by hand.

  gpu_tests.py names BUILD     the test names, one per line
  gpu_tests.py targets BUILD   the ninja targets (build-relative paths) they run
  gpu_tests.py table BUILD     markdown rows per test from BUILD/meson-logs/testlog.json:
                               result, seconds, gtest's passed / failed / skipped counts, the
                               first skip reason and the failed cases
"""
import json
import os
import re
import subprocess
import sys

# the word, not "gpumix": engine_cuda, cuda_backend, comm_nccl_2ranks
GPU_TEST = re.compile(r"(?<![a-z])(cuda|gpu|nccl)(?![a-z])", re.IGNORECASE)


def gpu_tests(build):
    # A carried build (bench/gpu/carried.py) holds its tests, paths rewritten; meson there may
    # not read a build folder that another meson made.
    carried = os.path.join(build, "gpumix-carried-tests.json")
    if os.path.isfile(carried):
        return [t for t in json.load(open(carried)) if GPU_TEST.search(t["name"])]
    out = subprocess.run(["meson", "introspect", "--tests", build], check=True,
                         capture_output=True, text=True).stdout
    return [t for t in json.loads(out) if GPU_TEST.search(t["name"])]


def targets(build):
    root = os.path.realpath(build)
    paths = set()
    for t in gpu_tests(build):
        for arg in t["cmd"]:  # the test program, or mpirun and the program
            p = os.path.realpath(arg) if os.path.isabs(arg) else ""
            if p.startswith(root + os.sep):
                paths.add(os.path.relpath(p, root))
    return sorted(paths)


def gtest_counts(stdout):
    """(passed, failed, skipped, first skip reason, failed case names) from gtest output."""
    def count(label):
        m = re.search(r"^\[  %s *\] (\d+) tests?" % label, stdout, re.MULTILINE)
        return int(m.group(1)) if m else 0
    reason = ""
    m = re.search(r"Skipped\n(.+)", stdout)
    if m:
        reason = m.group(1).strip()
    failed = sorted(set(re.findall(r"^\[  FAILED  \] ([A-Za-z_][\w/.]*)", stdout, re.MULTILINE)))
    return count("PASSED"), count("FAILED"), count("SKIPPED"), reason, failed


def table(build):
    log = os.path.join(build, "meson-logs", "testlog.json")
    rows = []
    if not os.path.exists(log):
        return ["| (no test log: the tests did not run) | | | | | | |"]
    for line in open(log):
        t = json.loads(line)
        passed, failed, skipped, reason, names = gtest_counts(t.get("stdout", "") or "")
        rows.append(f"| {t['name']} | {t['result']} | {t.get('duration', 0):.1f} | {passed} | {failed} | "
                    f"{skipped} | {(reason[:120] + ' ') if reason else ''}{', '.join(names)[:300]} |")
    return rows


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("names", "targets", "table"):
        sys.exit(__doc__)
    what, build = sys.argv[1], sys.argv[2]
    if what == "names":
        lines = [t["name"] for t in gpu_tests(build)]
    elif what == "targets":
        lines = targets(build)
    else:
        lines = table(build)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
