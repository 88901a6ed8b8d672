#!/usr/bin/env python3
"""The layers inside core/ (docs/architecture.md), checked on the includes of the source tree.

    base  <-  runtime  <-  tensors and ops

A file may include core headers of its own layer or below, never above; every file in core/
has a layer here, so a new one is placed on purpose. Above core, only the NCCL backend
(dist/comm/comm_nccl.cpp) and `gpumix selfcheck`'s GPU summary reach the CUDA runtime or
kernels/cuda themselves: everything else goes through core (core/runtime.h, core/ops.h).

Usage: include_layers.py SOURCE_ROOT
"""
import pathlib
import re
import sys

LAYERS = {
    "base": ["error.h", "error.cpp", "log.h", "log.cpp", "dtype.h", "dtype.cpp", "device.h",
             "rng.h", "rng.cpp"],
    # What a device kind offers below the ops, and what is built on it alone.
    "runtime": ["runtime.h", "runtime_cpu.cpp", "cuda/runtime_cuda.cpp", "cuda/logical.h",
                "device.cpp", "allocator.h", "allocator.cpp", "stream.h", "stream.cpp",
                "precision.h", "precision.cpp", "slowdown.h", "slowdown.cpp"],
    "tensors and ops": ["tensor.h", "tensor.cpp", "ops.h", "ops.cpp", "op_table.h",
                        "backend_cpu.cpp", "cuda/backend_cuda.cpp"],
}
ORDER = list(LAYERS)
# Files above core that may call the CUDA runtime or kernels/cuda directly.
CUDA_ALLOWED = {"dist/comm/comm_nccl.cpp", "tools/cmd_selfcheck.cpp"}
CUDA_RE = re.compile(r'#include\s+[<"](cuda_runtime[^>"]*|nccl\.h|kernels/cuda/[^>"]*)[>"]')


def main(root):
    root = pathlib.Path(root)
    layer_of = {name: i for i, layer in enumerate(ORDER) for name in LAYERS[layer]}
    problems = []
    for path in sorted((root / "core").rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        name = path.relative_to(root / "core").as_posix()
        if name not in layer_of:
            problems.append(f"core/{name} has no layer in {__file__}: add it to LAYERS")
            continue
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r'#include "core/([^"]+)"', line)
            if m and m.group(1) in layer_of and layer_of[m.group(1)] > layer_of[name]:
                problems.append(f"core/{name}:{line_no} ({ORDER[layer_of[name]]}) includes "
                                f"core/{m.group(1)} ({ORDER[layer_of[m.group(1)]]}), a layer above")
    for folder in ("autograd", "nn", "dist", "tools"):
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.suffix not in (".h", ".cpp") or rel in CUDA_ALLOWED:
                continue
            for line_no, line in enumerate(path.read_text().splitlines(), 1):
                if CUDA_RE.match(line.strip()):
                    problems.append(f"{rel}:{line_no} includes {line.strip()[9:]}: reach device "
                                    "memory, copies and kernels through core (core/runtime.h, "
                                    "core/ops.h)")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
