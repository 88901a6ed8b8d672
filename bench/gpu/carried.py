#!/usr/bin/env python3
"""A GPUMix build made here and carried to the GPU machine, for bench/gpu/check.sh (issue 20).

The GPU machine has python (meson, ninja, PyTorch) and the CUDA toolkit, but none of
Debian's libraries and maybe another absolute path for the working tree and another meson
(a build folder's meson-private data is tied to the meson that made it). So the build is
not run through `meson test` there: its GPU tests are saved here from `meson introspect
--tests` and run by `test` below, with the build and source paths rewritten.

  carried.py pack BUILD TARBALL [--limit-mib N] [--tree-bytes N]
      (here) the executables check.sh runs (tools/gpumix, bench/nn/bench_train,
      bench/cuda/bench_cuda and every GPU test's program, stripped), the shared libraries
      they need that the GPU machine may lack (from ldd; not the C library, not the CUDA
      toolkit's cudart / cuBLASLt / NCCL / the driver: the toolkit and PyTorch's wheels have
      those), libstdc++ / libgcc_s apart (used only where the machine's are too old), the
      fortunes corpus, the GPU tests and a manifest (source and build paths, gpu_archs,
      emulated or not, commit) into TARBALL (tar.xz). Refuses if TARBALL plus the rest of
      what travels (--tree-bytes) exceeds --limit-mib (the device tool's 64 MiB).
  carried.py setup TARBALL DEST ROOT
      (there) unpacks into DEST (DEST/build, DEST/lib, ...), points the compiled-in source
      paths at ROOT (a symbolic link at the old source root when that path is free), finds
      the CUDA libraries, checks that every executable loads, and writes DEST/env.sh
      (LD_LIBRARY_PATH). Exit 1 with the reason when the build cannot run here.
  carried.py manifest DEST KEY   one manifest field (gpu_archs as "90 80", emulated 0/1, ...)
  carried.py test [--timeout-multiplier X] DEST NAME...
      runs the named tests one at a time as meson would (cwd the build folder, the test's
      env, MALLOC_PERTURB_, its timeout), their whole output to stdout, and writes
      DEST/build/meson-logs/testlog.json in meson's format (gpu_tests.py table reads it).
      Exit 0 when every test passed or skipped.
"""
import argparse
import datetime
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_tests  # noqa: E402

TESTS_FILE = "gpumix-carried-tests.json"   # in the unpacked build folder; gpu_tests.py reads it
MANIFEST = "manifest.json"
# What check.sh runs besides the tests.
PROGRAMS = ["tools/gpumix", "bench/nn/bench_train", "bench/cuda/bench_cuda"]
# Never carried: the C library (tied to the kernel and the loader), and what the GPU machine's
# CUDA toolkit, driver and PyTorch wheels provide, matching its driver.
SYSTEM = re.compile(r"^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv)\.so")
FROM_CUDA = re.compile(r"^lib(cudart|cublas|cublasLt|nccl|cuda|nvidia-ml|nvrtc|nvJitLink)\.so")
# Carried apart: used only where the GPU machine's own are too old (GLIBCXX / GCC_ versions).
FALLBACK = re.compile(r"^(libstdc\+\+|libgcc_s)\.so")
CORPUS = "/usr/share/games/fortunes"


def die(msg):
    sys.exit(f"carried.py: {msg}")


def ldd(path, env=None):
    """{soname: resolved path or None} for every library path needs (transitively)."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env=env)
    libs = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+) \(0x)", line)
        if m:
            libs[m.group(1)] = None if m.group(2) == "not found" else m.group(3)
    return libs


def build_option(build, name):
    out = subprocess.run(["meson", "introspect", "--buildoptions", build], check=True,
                         capture_output=True, text=True).stdout
    for o in json.loads(out):
        if o["name"] == name:
            return o["value"]
    return None


def git(root, *args):
    r = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "?"


# ---- pack (here) ------------------------------------------------------------------------------
def pack(a):
    build = os.path.realpath(a.build)
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        die(f"{a.build} is no configured meson build folder (no build.ninja)")
    intro = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", build], check=True,
                                      capture_output=True, text=True).stdout)
    opts = {o["name"]: o["value"] for o in intro}
    emulated = bool(opts.get("emulated_cuda", False))  # meson_options.txt
    source = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    tests = gpu_tests.gpu_tests(build)
    if not tests:
        die(f"{a.build} has no GPU tests (meson tests named cuda/gpu/nccl): was it configured with -Dcuda=enabled"
            f"{' or -Demulated_cuda=true' if not emulated else ''}?")
    programs = sorted(set(PROGRAMS) | set(gpu_tests.targets(build)))
    missing = [p for p in programs if not os.path.isfile(os.path.join(build, p))]
    if missing:
        die(f"not built in {a.build}: {', '.join(missing)}; run: nice ninja -C {a.build} -j2 {' '.join(missing)}")
    stage = tempfile.mkdtemp(prefix="gpumix-carried-")
    top = os.path.join(stage, "carried")
    libs, fallback, notes = {}, {}, []
    for p in programs:
        dst = os.path.join(top, "build", p)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(build, p), dst)
        subprocess.run(["strip", "--strip-unneeded", dst], check=True)
        for soname, path in ldd(os.path.join(build, p)).items():
            if path is None:
                if FROM_CUDA.match(soname):
                    continue  # the toolkit's, found there
                die(f"{p} needs {soname}, which ldd does not find here: the carried build would not load")
            if SYSTEM.match(soname) or FROM_CUDA.match(soname):
                continue
            (fallback if FALLBACK.match(soname) else libs)[soname] = os.path.realpath(path)
    for d, group in (("lib", libs), ("lib-fallback", fallback)):
        os.makedirs(os.path.join(top, d), exist_ok=True)
        for soname, path in sorted(group.items()):
            dst = os.path.join(top, d, soname)
            shutil.copy2(path, dst)
            subprocess.run(["strip", "--strip-unneeded", dst], check=True)
    if os.path.isdir(CORPUS):
        shutil.copytree(CORPUS, os.path.join(top, "fortunes"), symlinks=False)
    else:
        notes.append(f"no fortunes corpus at {CORPUS} (apt-get install fortunes): the heterogeneous run uses the GPU machine's, if any")
    for t in tests:
        t.pop("depends", None)
    with open(os.path.join(top, TESTS_FILE), "w") as f:
        json.dump(tests, f, indent=1)
    manifest = {
        "source_root": source, "build_root": build,
        "gpu_archs": opts.get("gpu_archs"), "emulated": emulated, "buildtype": opts.get("buildtype"),
        "mpi": opts.get("mpi"),
        # Packed without building (GPUMIX_PREPARE_NO_BUILD=1): the programs may be older than HEAD.
        "commit": ("not-rebuilt-" if a.not_rebuilt else "") + git(source, "rev-parse", "HEAD"),
        "dirty": git(source, "status", "--porcelain", "--untracked-files=no") not in ("", "?"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "glibc": os.confstr("CS_GNU_LIBC_VERSION"), "programs": programs,
        "libs": sorted(libs), "fallback_libs": sorted(fallback), "tests": [t["name"] for t in tests],
        "notes": notes,
    }
    with open(os.path.join(top, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
    raw = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(top) for n in ns)
    os.makedirs(os.path.dirname(os.path.abspath(a.tarball)), exist_ok=True)
    tmp = a.tarball + ".part"
    # xz -9 over the whole tree at once: the executables share most of their code.
    subprocess.run(["tar", "-C", stage, "-c", "-f", tmp, "-I", "xz -9 -T2", "carried"], check=True)
    shutil.rmtree(stage)
    size = os.path.getsize(tmp)
    total = size + a.tree_bytes
    limit = a.limit_mib * 1024 * 1024
    mib = lambda b: f"{b / 1048576:.1f} MiB"  # noqa: E731
    print(f"carried build: {len(programs)} programs, {len(libs)} libraries (+{len(fallback)} fallback), "
          f"{len(tests)} GPU tests; {mib(raw)} unpacked, {mib(size)} as {os.path.basename(a.tarball)}; "
          f"with the rest of what travels ({mib(a.tree_bytes)}): {mib(total)} of {a.limit_mib} MiB")
    print(f"  gpu_archs {manifest['gpu_archs']}, emulated {emulated}, commit {manifest['commit'][:12]}"
          f"{' (uncommitted changes)' if manifest['dirty'] else ''}; libraries: {', '.join(sorted(libs))}")
    for n in notes:
        print("  note:", n)
    if total > limit:
        os.remove(tmp)
        die(f"REFUSED: {mib(total)} would travel, over the device tool's {a.limit_mib} MiB "
            f"({mib(size)} carried build + {mib(a.tree_bytes)} tree and other carried files); "
            "carry fewer programs or libraries, or drop the fallback dependencies (GPUMIX_PREPARE_DEPS=0)")
    os.replace(tmp, a.tarball)


# ---- setup (there) ------------------------------------------------------------------------------
def cuda_lib_dirs():
    """Folders that may hold cudart / cuBLASLt / NCCL: the toolkit's, then PyTorch's nvidia wheels."""
    dirs = []
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    for d in (os.path.join(home, "lib64"), os.path.join(home, "targets", "x86_64-linux", "lib"), "/usr/local/cuda/lib64"):
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia")
        for base in (spec.submodule_search_locations or []) if spec else []:
            for d, _, names in os.walk(base):
                if any(re.match(r"lib(cudart|cublasLt|nccl)\.so", n) for n in names) and d not in dirs:
                    dirs.append(d)
    except (ImportError, ValueError):
        pass
    return dirs


def setup(a):
    dest, root = os.path.abspath(a.dest), os.path.realpath(a.root)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    with tarfile.open(a.tarball) as t:
        # Our own tarball; the filter argument (Python >= 3.12) only silences its warning.
        t.extractall(dest, **({"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}))
    top = os.path.join(dest, "carried")
    for n in os.listdir(top):
        os.rename(os.path.join(top, n), os.path.join(dest, n))
    os.rmdir(top)
    m = json.load(open(os.path.join(dest, MANIFEST)))
    build = os.path.join(dest, "build")
    # Compiled-in source paths (test data, golden files) point at the source root of the build.
    src = m["source_root"]
    if os.path.realpath(src) != root:
        if not os.path.lexists(src):
            os.makedirs(os.path.dirname(src), exist_ok=True)
            os.symlink(root, src)
            print(f"source root of the build {src} -> {root} (a link: the tests' compiled-in data paths)")
        else:
            print(f"warning: the build's source root {src} exists here and is not {root}: the tests' compiled-in "
                  "data paths read it")
    # The tests, their paths rewritten: the old build folder -> the unpacked one, the old source
    # root -> this tree, the corpus -> the carried one. Longest prefix first (the build folder
    # may lie inside the source root).
    subst = [(m["build_root"], build), (src, root)]
    # The corpus a test names (train_gpu_vs_cpu: /usr/share/games/fortunes) -> the carried
    # copy: the GPU machine has no fortunes package.
    if os.path.isdir(os.path.join(dest, "fortunes")):
        subst.append((CORPUS, os.path.join(dest, "fortunes")))
    subst.sort(key=lambda p: -len(p[0]))

    def fix(s):
        # meson writes a script beside the build as BUILD/../tests/x.sh: resolved first, so
        # that it maps to this tree (not to DEST/build/.., where there is no tests/).
        if os.path.isabs(s):
            s = os.path.normpath(s)
        for old, new in subst:
            if s == old or s.startswith(old + os.sep):
                return new + s[len(old):]
        return s.replace(m["build_root"] + os.sep, build + os.sep).replace(src + os.sep, root + os.sep)

    tests = json.load(open(os.path.join(dest, TESTS_FILE)))
    for t in tests:
        t["cmd"] = [fix(c) for c in t["cmd"]]
        t["env"] = {k: fix(v) for k, v in (t.get("env") or {}).items()}
        if t.get("workdir"):
            t["workdir"] = fix(t["workdir"])
    with open(os.path.join(build, TESTS_FILE), "w") as f:
        json.dump(tests, f, indent=1)
    # Libraries: the carried ones first, then CUDA's where the executables' RUNPATH does not
    # reach them, then libstdc++ / libgcc_s only if the machine's are too old for the build.
    path = [os.path.join(dest, "lib")]
    env = dict(os.environ)

    def missing(p):
        env["LD_LIBRARY_PATH"] = ":".join(path + [x for x in [os.environ.get("LD_LIBRARY_PATH")] if x])
        return sorted(s for s, r in ldd(os.path.join(build, p), env).items() if r is None)

    probe = "tests/cuda/test_cuda" if "tests/cuda/test_cuda" in m["programs"] else m["programs"][0]
    if missing(probe):
        for d in cuda_lib_dirs():
            if d not in path:
                path.append(d)
    problems = []
    for p in m["programs"]:
        if missing(p):
            problems.append(f"{p} needs {', '.join(missing(p))}, found nowhere (searched {':'.join(path)})")
    runs = subprocess.run([os.path.join(build, "tools/gpumix"), "--help"], capture_output=True, text=True, env=env)
    if runs.returncode != 0 and re.search(r"GLIBCXX_|CXXABI_|GCC_[0-9]", runs.stderr):
        path.append(os.path.join(dest, "lib-fallback"))
        print("the machine's libstdc++ / libgcc_s are older than the build's: using the carried ones")
        env["LD_LIBRARY_PATH"] = ":".join(path + [x for x in [os.environ.get("LD_LIBRARY_PATH")] if x])
        runs = subprocess.run([os.path.join(build, "tools/gpumix"), "--help"], capture_output=True, text=True, env=env)
    if runs.returncode != 0:
        problems.append(f"tools/gpumix --help exited {runs.returncode}: {(runs.stderr or runs.stdout).strip()[-300:]}")
    with open(os.path.join(dest, "env.sh"), "w") as f:
        f.write(f"export LD_LIBRARY_PATH=\"{':'.join(path)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\"\n")
    print(f"carried build of {m['date']} (commit {m['commit'][:24 if m['commit'].startswith('not-rebuilt-') else 12]}{', uncommitted changes' if m['dirty'] else ''}, "
          f"gpu_archs {' '.join(m['gpu_archs'] or [])}, {'EMULATED' if m['emulated'] else 'nvcc'}, built on "
          f"{m['glibc']}) in {dest}; LD_LIBRARY_PATH starts {':'.join(path)}")
    for soname, r in sorted(ldd(os.path.join(build, "tools/gpumix"), env).items()):
        if not SYSTEM.match(soname):
            print(f"  tools/gpumix: {soname} => {r or 'not found'}")
    if problems:
        print("the carried build cannot run here:\n  " + "\n  ".join(problems))
        sys.exit(1)


def manifest(a):
    m = json.load(open(os.path.join(a.dest, MANIFEST)))
    v = m[a.key]
    if isinstance(v, bool):
        v = int(v)
    print(" ".join(v) if isinstance(v, list) else v)


# ---- test (there) ---------------------------------------------------------------------------------
def run_tests(a):
    build = os.path.join(os.path.abspath(a.dest), "build")
    tests = {t["name"]: t for t in json.load(open(os.path.join(build, TESTS_FILE)))}
    unknown = [n for n in a.names if n not in tests]
    if unknown:
        die(f"no such carried test: {', '.join(unknown)} (carried: {', '.join(tests)})")
    os.makedirs(os.path.join(build, "meson-logs"), exist_ok=True)
    log = open(os.path.join(build, "meson-logs", "testlog.json"), "w")
    names, bad = a.names or list(tests), 0
    for i, name in enumerate(names, 1):
        t = tests[name]
        env = dict(os.environ)
        env.update(t.get("env") or {})
        env.setdefault("MALLOC_PERTURB_", str(random.randint(1, 255)))  # as meson test does
        # meson: a timeout of 0 (or below) is none; the multiplier scales the rest
        limit = max(1.0, t["timeout"] * a.timeout_multiplier) if (t.get("timeout") or 0) > 0 else None
        print(f"==================================== {i}/{len(names)} ====================================\n"
              f"test:  {name}\ncommand: {' '.join(t['cmd'])}\ntimeout: {limit} s", flush=True)
        s = time.time()
        # Streamed as it comes (tests.log shows a test that hangs or is cut off by the stage's
        # limit), and kept for testlog.json.
        p = subprocess.Popen(t["cmd"], cwd=t.get("workdir") or build, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace")
        chunks, timer = [], None
        if limit:
            timer = threading.Timer(limit, p.kill)
            timer.start()
        for line in p.stdout:
            sys.stdout.write(line)
            chunks.append(line)
        rc = p.wait()
        timed_out = timer is not None and not timer.is_alive() and rc == -9
        if timer:
            timer.cancel()
        out = "".join(chunks)
        if timed_out:
            result = "TIMEOUT"
        else:
            result = "OK" if rc == 0 else ("SKIP" if rc == 77 else "FAIL")
            if t.get("should_fail"):
                result = "OK" if rc not in (0, 77) else "UNEXPECTEDPASS"
        sys.stdout.flush()
        d = time.time() - s
        print(f"{i}/{len(names)} {name} {result} {d:.2f}s (exit status {rc})", flush=True)
        bad += result not in ("OK", "SKIP")
        log.write(json.dumps({"name": name, "result": result, "duration": d, "returncode": rc,
                              "command": t["cmd"], "stdout": out}) + "\n")
        log.flush()
    print(f"Ok: {len(names) - bad}  Fail: {bad}")
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("build")
    p.add_argument("tarball")
    p.add_argument("--limit-mib", type=float, default=64)
    p.add_argument("--tree-bytes", type=int, default=0, help="the rest of what travels")
    p.add_argument("--not-rebuilt", action="store_true", help="BUILD was not brought up to date first")
    p.set_defaults(fn=pack)
    p = sub.add_parser("setup")
    p.add_argument("tarball")
    p.add_argument("dest")
    p.add_argument("root")
    p.set_defaults(fn=setup)
    p = sub.add_parser("manifest")
    p.add_argument("dest")
    p.add_argument("key")
    p.set_defaults(fn=manifest)
    p = sub.add_parser("test")
    p.add_argument("dest")
    p.add_argument("--timeout-multiplier", type=float, default=1.0)
    p.add_argument("names", nargs="*")
    p.set_defaults(fn=run_tests)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
