#!/usr/bin/env python3
"""What a CPU can say about the sm_90 build of kernels/cuda, and the CI check built on it.

  static_report.py [--out bench/results/gpu-static.md]   compile, then write the report
  static_report.py --check                               compile, then fail (exit 1) if any
                                                         kernel spills or a tensor-core file's
                                                         PTX holds no mma

Each .cu of kernels/cuda/meson.build is compiled for sm_90 only, as the meson build compiles
it (the nvcc flags of the top-level meson.build's cuda_flags, with -O3 -DNDEBUG of its release
buildtype), in two steps: nvcc -ptx (the PTX, counted here), then ptxas -v on that PTX (the
registers, spills, stack and shared memory that `-Xptxas -v` prints; the same ptxas nvcc runs
for -gencode=arch=compute_90,code=sm_90). No GPU is needed; the toolkit has no cuobjdump, so
there is no SASS view.

The report adds, per kernel, the theoretical occupancy on an H200 (the SM limits below) from
the block sizes of the launch sites (LAUNCHES: listed by hand, each checked against its
GPUMIX_LAUNCH line, so that a changed launch fails here until the table follows), and the
instruction mix of its PTX; then the roofline prediction of the gpt2 step (step_model.py).

The check's rules and why:
- no kernel spills (ptxas "spill stores" / "spill loads" both 0): a spill is local memory
  traffic in the inner loop, which nothing but a look at ptxas shows.
- a .cu that includes kernels/cuda/tensor_core.cuh must hold `mma` in its PTX: a tensor-core
  primitive that silently compiles to nothing (a wrong arch guard, a fallback path) drops the
  mma from every kernel of the file that uses it, and that file then still builds and, on the
  SIMT fallback, still passes every test. The include is the declaration: no list to keep.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
KDIR = os.path.join(ROOT, "kernels", "cuda")
sys.path.insert(0, HERE)
import step_model  # noqa: E402

ARCH = "sm_90"
TC_HEADER = "kernels/cuda/tensor_core.cuh"

# The H200 (GH100, compute capability 9.0) per-SM limits used for occupancy. Sources: the
# Hopper Tuning Guide, section "Occupancy" (https://docs.nvidia.com/cuda/hopper-tuning-guide/:
# 64 K 32-bit registers per SM, 255 per thread, 64 warps = 2048 threads per SM, 32 blocks per
# SM, 228 KB shared memory per SM of which 227 KB for one block) and the CUDA Occupancy
# Calculator's data for cc 9.0 (https://docs.nvidia.com/cuda/cuda-occupancy-calculator/:
# registers allocated per warp in units of 256, register-limited warps rounded down to a
# multiple of 4, shared memory in units of 128 bytes, 1 KB of shared memory reserved by the
# CUDA runtime per block on cc >= 8.0, as cudaDevAttrReservedSharedMemoryPerBlock reports).
SM = {
    "regs": 65536,
    "regs_per_thread": 255,
    "reg_unit": 256,          # per warp
    "warp_unit": 4,           # register-limited warps per SM round down to a multiple of this
    "threads": 2048,
    "warps": 64,
    "blocks": 32,
    "smem": 228 * 1024,
    "smem_per_block": 227 * 1024,
    "smem_unit": 128,
    "smem_reserved": 1024,    # per block
}

# Every launch site of kernels/cuda: (file, the kernel as written at its GPUMIX_LAUNCH, the
# block as written there, the __global__ function it launches, its threads per block: a
# number, or a function of the first numeric template argument, D). check_launches() compares this with
# the sources, both ways, and each block's value with the constant the source defines.
def flash_threads(D):  # attention.cu Shape<D>::THREADS = kRows * G, kRows 64, G = max(1, D/32)
    return 64 * max(1, D // 32)


LAUNCHES = [
    ("adamw.cu", "adamw_vec", "256", "adamw_vec_kernel", 256),
    ("adamw.cu", "adamw", "256", "adamw_kernel", 256),
    # the tensor-core kernels: 4 warps of 16 rows, 64 query (forward, dQ) or key (dK/dV) rows per block
    ("attention.cu", "flash_forward_tc_kernel<D>", "128", "flash_forward_tc_kernel", 128),
    ("attention.cu", "flash_backward_dq_tc_kernel<D>", "128", "flash_backward_dq_tc_kernel", 128),
    ("attention.cu", "flash_backward_dkv_tc_kernel<D>", "128", "flash_backward_dkv_tc_kernel", 128),
    ("attention.cu", "flash_forward_simt", "Shape<D>::THREADS", "flash_forward_kernel", flash_threads),
    ("attention.cu", "flash_backward_dq", "Shape<D>::THREADS", "flash_backward_dq_kernel", flash_threads),
    ("attention.cu", "flash_backward_dkv", "Shape<D>::THREADS", "flash_backward_dkv_kernel", flash_threads),
    ("attention.cu", "ref_scores", "256", "ref_scores_kernel", 256),
    ("attention.cu", "ref_softmax_kernel", "128", "ref_softmax_kernel", 128),
    ("attention.cu", "ref_out", "256", "ref_out_kernel", 256),
    ("attention.cu", "ref_dp", "256", "ref_dp_kernel", 256),
    ("attention.cu", "ref_ds_kernel", "128", "ref_ds_kernel", 128),
    ("attention.cu", "ref_dqkv", "256", "ref_dqkv_kernel", 256),
    ("attention_decode.cu", "decode", "kThreads", "decode_kernel", 128),  # kThreads = 128
    ("attention_decode.cu", "decode_ref", "128", "decode_ref_kernel", 128),
    ("crossentropy.cu", "crossentropy_forward", "kThreads", "crossentropy_forward_kernel", 512),
    ("crossentropy.cu", "crossentropy_backward", "kThreads", "crossentropy_backward_kernel", 512),
    ("crossentropy.cu", "classifier", "kThreads", "classifier_kernel", 512),
    ("crossentropy.cu", "classifier_rescale", "256", "classifier_rescale_kernel", 256),
    ("elementwise.cu", "fill_i32_kernel", "256", "fill_i32_kernel", 256),
    ("embedding.cu", "check_tokens_kernel", "256", "check_tokens_kernel", 256),
    ("embedding.cu", "embedding_forward", "256", "embedding_forward_kernel", 256),
    ("embedding.cu", "dwpe_sum", "256", "dwpe_kernel", 256),
    ("embedding.cu", "iota_kernel", "256", "iota_kernel", 256),
    ("embedding.cu", "dwte_runs", "128", "dwte_kernel", 128),
    ("layernorm.cu", "layernorm_forward", "kThreads", "layernorm_forward_kernel", 256),
    ("layernorm.cu", "layernorm_backward_dinp", "kThreads", "layernorm_backward_dinp_kernel", 256),
    ("matmul.cu", "bias_add", "256", "bias_add_kernel", 256),
    ("random.cu", "generate", "256", "generate_kernel", 256),
    ("reduce.cu", "reduce_partial", "kThreads", "reduce_partial_kernel", 256),  # kThreads = 256
    ("reduce.cu", "reduce_final_kernel", "1024", "reduce_final_kernel", 1024),
    ("reduce.cu", "scale_to_f32_kernel", "1", "scale_to_f32_kernel", 1),
    ("spin.cu", "spin_kernel", "1", "spin_kernel", 1),
    ("common.cuh", "colreduce_partial", "dim3(32, 8)", "colreduce_partial_kernel", 256),
    ("common.cuh", "colreduce_final_kernel<NV>", "256", "colreduce_final_kernel", 256),
    ("map.cuh", "map_vec", "256", "map_vec_kernel", 256),
    ("map.cuh", "map_scalar", "256", "map_kernel", 256),
]
# The launch-time dynamic shared memory, at the shape stated (decode_kernel: HS + pos + 1 +
# groups * HS floats, groups = kThreads / HS; gpt2 HS 64 at the last of 1,024 positions).
# Dynamic shared memory per block: (bytes, what it holds), or a function of the first template
# argument returning that.
def tc_tiles(n, extra=0, note=""):  # attention.cu Tc<D>: n tiles of 64 rows x (D + 8) bf16
    return lambda D: (n * 64 * (D + 8) * 2 + extra, f"{n} tiles of 64 x {D + 8} bf16" + note)


DYNAMIC_SMEM = {"decode_kernel": (4 * (64 + 1024 + 2 * 64), "gpt2 decode, HS 64, pos 1023"),
                "flash_forward_tc_kernel": tc_tiles(5),
                "flash_backward_dq_tc_kernel": tc_tiles(6),
                "flash_backward_dkv_tc_kernel": tc_tiles(6, 4 * 64 * 4, " + lse and Delta of 2 x 64 rows")}


def fail(msg):
    sys.exit("static_report: " + msg)


def split_args(s):
    """The top-level comma-separated arguments of s (s starts after the opening parenthesis).
    Only brackets nest: a template kernel whose arguments hold a comma is launched through a
    pointer (launch.cuh), so no argument holds an unbracketed comma."""
    args, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return args + [cur.strip()]
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return args


def block_value(text, block):
    """Threads of a block expression as the source defines it: a number, dim3(x, y), a
    `constexpr int kName = N;` of the file, or attention.cu's Shape<D>::THREADS at D = 64;
    None when it cannot be read."""
    if re.fullmatch(r"\d+", block):
        return int(block)
    m = re.fullmatch(r"dim3\((\d+), (\d+)\)", block)
    if m:
        return int(m.group(1)) * int(m.group(2))
    m = re.search(r"constexpr int " + re.escape(block) + r" = (\d+);", text)
    if m:
        return int(m.group(1))
    if block == "Shape<D>::THREADS":
        rows = re.search(r"constexpr int kRows = (\d+);", text)
        g = re.search(r"static constexpr int G = D >= 32 \? D / 32 : 1;", text)
        t = re.search(r"static constexpr int THREADS = kRows \* G;", text)
        return int(rows.group(1)) * 2 if rows and g and t else -1  # -1: the definition changed
    return None


def check_launches():
    """The (file, kernel, block) of every GPUMIX_LAUNCH in kernels/cuda against LAUNCHES."""
    found = set()
    for name in sorted(os.listdir(KDIR)):
        if not name.endswith((".cu", ".cuh")) or name == "launch.cuh":
            continue
        text = open(os.path.join(KDIR, name)).read()
        for m in re.finditer(r"GPUMIX_LAUNCH\(", text):
            args = split_args(text[m.end():m.end() + 600])
            found.add((name, " ".join(args[0].split()), " ".join(args[2].split())))
    listed = {(f, k, b) for f, k, b, _, _ in LAUNCHES}
    problems = [f"{f}: GPUMIX_LAUNCH({k}, grid, {b}, ...) is not in LAUNCHES" for f, k, b in sorted(found - listed)]
    problems += [f"{f}: LAUNCHES lists GPUMIX_LAUNCH({k}, grid, {b}, ...), which the source no longer has"
                 for f, k, b in sorted(listed - found)]
    for f, k, b, _, threads in LAUNCHES:  # the block's value, where the source spells it out
        value = block_value(open(os.path.join(KDIR, f)).read(), b)
        want = threads(64) if callable(threads) else threads
        if value is not None and value != want:
            problems.append(f"{f}: GPUMIX_LAUNCH({k}, grid, {b}, ...) launches {value} threads; LAUNCHES says {want}")
    if problems:
        fail("the launch sites changed; update LAUNCHES in bench/gpu/static_report.py:\n  " + "\n  ".join(problems))


def meson_flags():
    """The nvcc flags of the build: the top-level meson.build's cuda_flags (less -gencode,
    replaced by sm_90 alone), and what its release buildtype and project arguments add."""
    text = open(os.path.join(ROOT, "meson.build")).read()
    m = re.search(r"cuda_flags = \[([^\]]*)\]", text)
    if not m:
        fail("meson.build has no `cuda_flags = [...]` line to take the nvcc flags from")
    flags = re.findall(r"'([^']*)'", m.group(1))
    return ["-std=c++17", "-O3", "-DNDEBUG", "-DGPUMIX_HAVE_CUDA=1"] + flags


def sources():
    text = open(os.path.join(KDIR, "meson.build")).read()
    m = re.search(r"kernels_cuda_sources = \[([^\]]*)\]", text)
    if not m:
        fail("kernels/cuda/meson.build has no kernels_cuda_sources list")
    return re.findall(r"'([^']*\.cu)'", m.group(1))


def compile_one(nvcc, ptxas, src, work):
    base = os.path.join(work, src[:-3])
    cmd = [nvcc] + meson_flags() + ["-arch=" + ARCH, "-I" + ROOT, "-ptx", os.path.join(KDIR, src), "-o", base + ".ptx"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"nvcc -ptx {src} failed:\n{r.stderr}")
    r = subprocess.run([ptxas, "-arch=" + ARCH, "-v", "--generate-line-info", base + ".ptx", "-o", base + ".cubin"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"ptxas {src} failed:\n{r.stderr}")
    return src, open(base + ".ptx").read(), r.stderr + r.stdout


def parse_ptxas(text):
    out = {}
    for m in re.finditer(r"Function properties for (\S+)\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                         r"(\d+) bytes spill loads\n.*?Used (\d+) registers(.*)", text):
        smem = re.search(r"(\d+) bytes smem", m.group(6))
        out[m.group(1)] = {"stack": int(m.group(2)), "spill_st": int(m.group(3)), "spill_ld": int(m.group(4)),
                           "regs": int(m.group(5)), "smem": int(smem.group(1)) if smem else 0}
    return out


LD_BITS = {"8": 8, "16": 16, "32": 32, "64": 64}


def load_bits(op):
    """Bits one thread loads in `ld.<space>[.nc][.vN].<type>`."""
    parts = op.split(".")
    vec = 1
    for p in parts:
        if p in ("v2", "v4", "v8"):
            vec = int(p[1:])
    t = re.search(r"(\d+)$", parts[-1])
    return vec * LD_BITS.get(t.group(1), 0) if t else 0


def parse_ptx(text):
    """Per .entry: its instruction counts and .maxntid."""
    entries = {}
    for m in re.finditer(r"\.entry (\S+?)\(", text):
        start = text.index("{", m.end())
        depth, i = 0, start
        while True:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        head, body = text[m.end():start], text[start:i]
        c = {"mma": 0, "ldmatrix": 0, "cp.async": 0, "fma.f32": 0, "shfl": 0, "ex2": 0, "instr": 0,
             "lds": {}, "ldg": {}}
        for line in body.splitlines():
            s = line.strip()
            if not s or s[0] in ".{}/" or s.endswith(":"):
                continue
            s = re.sub(r"^@!?%\w+\s+", "", s)
            op = s.split()[0].rstrip(";")
            c["instr"] += 1
            if op.startswith(("mma.", "wgmma.")):
                c["mma"] += 1
            elif op.startswith("ldmatrix"):
                c["ldmatrix"] += 1
            elif op.startswith("cp.async") and not re.match(r"cp\.async\.(commit|wait)", op):
                c["cp.async"] += 1
            elif op.startswith("fma.") and op.endswith(".f32"):
                c["fma.f32"] += 1
            elif op.startswith("shfl"):
                c["shfl"] += 1
            elif op.startswith("ex2"):
                c["ex2"] += 1
            elif op.startswith("ld.shared"):
                b = load_bits(op)
                c["lds"][b] = c["lds"].get(b, 0) + 1
            elif op.startswith("ld.global"):
                b = load_bits(op)
                c["ldg"][b] = c["ldg"].get(b, 0) + 1
        nt = re.search(r"\.maxntid (\d+), (\d+), (\d+)", head)
        c["maxntid"] = int(nt.group(1)) * int(nt.group(2)) * int(nt.group(3)) if nt else 0
        entries[m.group(1)] = c
    return entries


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, r.stdout.splitlines())) if r.returncode == 0 else {n: n for n in names}


def short_name(full):
    """`void gpumix::...::flash_forward_kernel<gpumix::bf16, 64>(...)` -> `flash_forward_kernel<bf16, 64>`."""
    s = re.sub(r"^void ", "", full)
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the argument list: the first '(' outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and not s.startswith("(anonymous", i):
            cut = i
            break
    s = s[:cut]
    for prefix in ("gpumix::kernels::cuda::", "gpumix::", "(anonymous namespace)::", "detail::", "radix_sort::"):
        s = s.replace(prefix, "")
    s = re.sub(r"CUB_\d+_SM_\d+::", "", s)
    s = s.replace("unsigned short", "bf16")
    if s.startswith("cub::"):
        s = re.sub(r"<.*>", "<...>", s)
    return s


def base_name(short):
    return re.sub(r"<.*", "", short).split("::")[-1]


def size_argument(short):
    """The first numeric template argument of a kernel's name (the head size D of
    `flash_forward_kernel<bf16, 64>`)."""
    return int(re.search(r"[<,]\s*(\d+)[,>]", short).group(1))


def threads_for(short, ptx):
    """(threads per block, where it came from) for a kernel."""
    base = base_name(short)
    rows = [r for r in LAUNCHES if r[3] == base]
    if rows:
        t = rows[0][4]
        if callable(t):
            t = t(size_argument(short))
        return t, "launch"
    if ptx.get("maxntid"):
        return ptx["maxntid"], "maxntid"  # a library kernel (CUB): its __launch_bounds__ is its block
    return 0, "unknown"


def occupancy(regs, smem, threads):
    """(resident blocks per SM, occupancy, the limiting resource), as the occupancy calculator."""
    if threads <= 0:
        return 0, 0.0, "-"
    warps = -(-threads // 32)
    regs_per_warp = -(-max(regs, 1) * 32 // SM["reg_unit"]) * SM["reg_unit"]
    smem_block = -(-(smem + SM["smem_reserved"]) // SM["smem_unit"]) * SM["smem_unit"]
    limits = {
        "blocks": SM["blocks"],
        "warps": SM["warps"] // warps,
        "registers": (SM["regs"] // regs_per_warp // SM["warp_unit"] * SM["warp_unit"]) // warps
                     if regs <= SM["regs_per_thread"] else 0,
        "shared memory": SM["smem"] // smem_block if smem <= SM["smem_per_block"] else 0,
    }
    blocks = min(limits.values())
    limiter = min(limits, key=lambda k: (limits[k], k != "warps"))
    return blocks, blocks * warps / SM["warps"], limiter


def find_tool(name, given):
    for p in [given, shutil.which(name), os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "bin", name)]:
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    fail(f"{name} not found (PATH, $CUDA_PATH/bin, /usr/local/cuda/bin); give --{name}")


def collect(nvcc, ptxas, jobs):
    """Per source: its kernels with their ptxas figures and PTX counts; whether it includes the
    tensor-core header."""
    work = tempfile.mkdtemp(prefix="gpumix-static-")
    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            done = list(ex.map(lambda s: compile_one(nvcc, ptxas, s, work), sources()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    files = []
    for src, ptx_text, ptxas_text in done:
        res, ptx = parse_ptxas(ptxas_text), parse_ptx(ptx_text)
        names = demangle(sorted(res))
        kernels = []
        for mangled, r in sorted(res.items(), key=lambda kv: short_name(names[kv[0]])):
            p = ptx.get(mangled, {})
            short = short_name(names[mangled])
            threads, origin = threads_for(short, p)
            dyn = DYNAMIC_SMEM.get(base_name(short), (0, ""))
            dyn, dyn_note = dyn(size_argument(short)) if callable(dyn) else dyn
            blocks, occ, limiter = occupancy(r["regs"], r["smem"] + dyn, threads)
            kernels.append(dict(r, name=short, ptx=p, threads=threads, origin=origin, dyn=dyn, dyn_note=dyn_note,
                                blocks=blocks, occ=occ, limiter=limiter))
        src_text = open(os.path.join(KDIR, src)).read()
        tc = re.search(r'#include\s+"' + re.escape(TC_HEADER) + '"', src_text) is not None
        files.append({"src": src, "kernels": kernels, "tensor_core": tc})
    return files


def problems_of(files):
    out = []
    for f in files:
        for k in f["kernels"]:
            if k["spill_st"] or k["spill_ld"]:
                out.append(f"{f['src']}: {k['name']} spills ({k['spill_st']} bytes stored, {k['spill_ld']} loaded; "
                           f"{k['regs']} registers): reduce its live values or its unrolling")
        if f["tensor_core"] and not any(k["ptx"].get("mma") for k in f["kernels"]):
            out.append(f"{f['src']} includes {TC_HEADER} but its PTX holds no mma: the tensor-core path "
                       "compiled to nothing (an arch guard or a fallback?)")
    return out


def fmt_loads(d):
    parts = [f"{d[b]}x{b}" for b in sorted(d) if d[b]]
    return " ".join(parts) if parts else "0"


def report(files, nvcc_version):
    flags = " ".join(meson_flags())
    L = []
    L.append("# GPU static report: the sm_90 build of kernels/cuda, and the gpt2 step predicted on an H200")
    L.append("")
    L.append("Regenerated by `python3 bench/gpu/static_report.py` (no GPU needed). The CI check `kernels_static_check` runs the same "
             "compilation with `--check`. Everything under **ptxas** and **PTX** is **measured** from the compiler; "
             "occupancy is **computed** from it; the step times are **predicted**: no GPU ran anything here.")
    L.append("")
    L.append(f"- toolkit: {nvcc_version}; each .cu of `kernels/cuda/meson.build`: `nvcc {flags} -arch={ARCH} -ptx`, "
             f"then `ptxas -arch={ARCH} -v --generate-line-info` on that PTX (what nvcc runs for "
             "`-gencode=arch=compute_90,code=sm_90`; the flags are read from the top-level meson.build).")
    L.append(f"- occupancy: H200 = GH100, cc 9.0: {SM['regs']} registers/SM (at most {SM['regs_per_thread']}/thread, "
             f"allocated per warp in units of {SM['reg_unit']}), {SM['threads']} threads = {SM['warps']} warps/SM, "
             f"register-limited warps in multiples of {SM['warp_unit']}, "
             f"{SM['blocks']} blocks/SM, {SM['smem'] // 1024} KiB shared memory/SM ({SM['smem_per_block'] // 1024} KiB "
             f"at most per block, units of {SM['smem_unit']} B, {SM['smem_reserved']} B reserved per block). Sources: "
             "NVIDIA's Hopper Tuning Guide, section Occupancy (docs.nvidia.com/cuda/hopper-tuning-guide), and the "
             "CUDA Occupancy Calculator's cc 9.0 data (docs.nvidia.com/cuda/cuda-occupancy-calculator). Occupancy is "
             "the theoretical one (resident warps / 64), assuming the shared-memory carve-out is set as large as "
             "needed (the driver's choice).")
    L.append("- block sizes: from the launch sites (`LAUNCHES` in the script, each checked against its "
             "`GPUMIX_LAUNCH` line); CUB's kernels (embedding backward's sort) from their `.maxntid` "
             "(`__launch_bounds__`, which their tuning policy launches with). decode_kernel's dynamic shared memory "
             "is taken at " + DYNAMIC_SMEM["decode_kernel"][1] + "; the tensor-core attention kernels' is what "
             "attention.cu launches them with (`DYNAMIC_SMEM` in the script).")
    L.append("- PTX counts are **static** (instructions in the kernel's text after inlining, loops unrolled as "
             "written), not executed counts. Loads by width in bits per thread: `1234x32` = 1,234 loads of 32 bits; "
             "`lds` = `ld.shared`, `ldg` = `ld.global` (incl. `.nc`). `fma` = `fma.*.f32`.")
    L.append("")
    probs = problems_of(files)
    L.append("**CI check** (`--check`): " + ("PASS: no kernel spills; no file includes `" + TC_HEADER +
                                             "` without `mma`." if not probs else "FAIL:\n  - " + "\n  - ".join(probs)))
    tc_files = [f["src"] for f in files if f["tensor_core"]]
    mma_kernels = [k["name"] for f in files for k in f["kernels"] if k["ptx"].get("mma")]
    L.append(f"Files including `{TC_HEADER}`: {', '.join(tc_files) or 'none yet'}; kernels holding `mma`: "
             f"{', '.join(mma_kernels) or 'none'}.")
    L.append("")
    L.append("## Per kernel (measured: ptxas and PTX; computed: occupancy)")
    L.append("")
    for f in files:
        if not f["kernels"]:
            continue
        L.append(f"### {f['src']}" + (" (includes tensor_core.cuh)" if f["tensor_core"] else ""))
        L.append("")
        L.append("| kernel | regs | spill st/ld B | stack B | smem B | threads | blocks/SM | occupancy (limit) | "
                 "mma | ldmatrix | cp.async | fma | lds by width | ldg by width | shfl | ex2 | PTX instr |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for k in f["kernels"]:
            p = k["ptx"]
            smem = f"{k['smem']}" + (f" + {k['dyn']} dyn" if k["dyn"] else "")
            thr = f"{k['threads']}" + (" (maxntid)" if k["origin"] == "maxntid" else "")
            occ = f"{k['blocks']} | {100 * k['occ']:.0f} % ({k['limiter']})"
            if k["origin"] == "unknown":  # a library kernel without __launch_bounds__
                thr, occ = "?", "- | n/a"
            L.append(f"| `{k['name']}` | {k['regs']} | {k['spill_st']}/{k['spill_ld']} | {k['stack']} | {smem} | {thr} | "
                     f"{occ} | {p.get('mma', 0)} | "
                     f"{p.get('ldmatrix', 0)} | {p.get('cp.async', 0)} | {p.get('fma.f32', 0)} | "
                     f"{fmt_loads(p.get('lds', {}))} | {fmt_loads(p.get('ldg', {}))} | {p.get('shfl', 0)} | "
                     f"{p.get('ex2', 0)} | {p.get('instr', 0)} |")
        L.append("")
    L += step_model.report_lines(attention_mix(files))
    return "\n".join(L) + "\n"


def attention_mix(files):
    """The gpt2 head size's bf16 SIMT attention kernels: their PTX counts and occupancy, for the model."""
    out = {}
    for f in files:
        for k in f["kernels"]:
            for name in step_model.SIMT_KERNELS:
                if k["name"] == f"{name}<bf16, {step_model.GPT2['C'] // step_model.GPT2['NH']}>":
                    out[name] = {"fma": k["ptx"]["fma.f32"], "lds": sum(k["ptx"]["lds"].values()),
                                 "lds_wavefronts": sum(n * max(1, b // 32) for b, n in k["ptx"]["lds"].items()),
                                 "instr": k["ptx"]["instr"], "regs": k["regs"], "occ": k["occ"],
                                 "threads": k["threads"]}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only the CI check: exit 1 on a problem")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gpu-static.md"))
    ap.add_argument("--nvcc")
    ap.add_argument("--ptxas")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    a = ap.parse_args()
    nvcc = find_tool("nvcc", a.nvcc)
    ptxas = find_tool("ptxas", a.ptxas or os.path.join(os.path.dirname(os.path.realpath(nvcc)), "ptxas"))
    check_launches()
    t0 = time.time()
    files = collect(nvcc, ptxas, a.jobs)
    seconds = time.time() - t0
    probs = problems_of(files)
    nk = sum(len(f["kernels"]) for f in files)
    if a.check:
        for p in probs:
            print("FAIL " + p)
        print(f"static check: {nk} kernels of {len(files)} files for {ARCH} in {seconds:.1f} s; "
              f"{len(probs)} problem(s); files including {TC_HEADER}: "
              f"{', '.join(f['src'] for f in files if f['tensor_core']) or 'none'}")
        sys.exit(1 if probs else 0)
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    text = report(files, ver)  # whole before the file is opened: a failure leaves the old report
    with open(a.out, "w") as out:
        out.write(text)
    print(f"wrote {a.out}: {nk} kernels of {len(files)} files; {len(probs)} check problem(s)")


if __name__ == "__main__":
    main()
