#!/usr/bin/env python3
"""A roofline PREDICTION of one gpt2 training step on an H200, kernel by kernel, before and
after issue 28. Nothing here was measured on a GPU.

  static_report.py         writes the tables into bench/results/gpu-static.md (report_lines),
                           the SIMT attention's instruction mix taken from its own sm_90 PTX

The kernels of a step, their counts, FLOPs and bytes follow tools/bench.cpp step_cases (the
list `gpumix bench` times on a GPU: the same roles, so that a measurement lines up with each
row), with the passes the code makes that bench.cpp folds into another row split out: the bias
gradients' and LayerNorm's parameter-gradient column reductions (kernels/cuda/common.cuh
colreduce, a second read of dout). Glossary: B batch, T sequence, C channels, L layers,
NH heads, V vocabulary, N = B*T rows, e = 2 bytes (bf16), f4 = 4 bytes (fp32).
"""
import math

GPT2 = {"L": 12, "C": 768, "NH": 12, "V": 50257, "B": 16, "T": 1024, "Vpad": 50304}
# NVIDIA's H200 SXM datasheet (dense peaks).
H200 = {"tc_bf16": 989e12, "fp32": 67e12, "hbm": 4.8e12}
# Per-SM issue rates for cc 9.0 (CUDA C++ Programming Guide, "Arithmetic Instructions"
# throughput table: 128 fp32 fma results per clock per SM; shared memory: 32 banks of 32 bits,
# one conflict-free 32-bit warp access (a "wavefront") per clock per SM; 4 schedulers issuing
# one warp instruction per clock each). SM-clocks per second follow from the fp32 peak:
# 67e12 / (2 * 128) = 132 SMs x 1.98 GHz.
FMA_WARP_PER_CLK = 128 / 32
LDS_WAVEFRONTS_PER_CLK = 1
ISSUE_PER_CLK = 4
SM_CLOCKS = H200["fp32"] / (2 * 128)

# Each kernel class's assumed fraction of its peak, and why (the argument is in the report).
FRACTION = {
    "gemm": 0.70,      # cuBLASLt bf16, every dim a multiple of 128 or 768
    "gemm_odd": 0.45,  # the LM head at V = 50257: leading dims odd (2-byte aligned only)
    "mem": 0.80,       # streaming kernels: of HBM bandwidth
    "simt": 0.70,      # the SIMT attention: of its binding issue bound (PTX mix)
    "fa2_fwd": 0.30,   # FlashAttention-2 on mma.sync, head size 64: of TC peak
    "fa2_bwd": 0.25,
}
def params(m):
    L, C, V, T = m["L"], m["C"], m["V"], m["T"]
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def attention_pairs(m):
    """(row, key) pairs the SIMT kernels compute per (b, h): forward and dQ run key tiles of 32
    up to the end of their 64-row query tile, dK/dV query tiles from the key tile's start to T;
    the causal mask costs nothing in arithmetic. Both sums are 64 * sum over tiles."""
    T, R = m["T"], 64
    tiles = -(-T // R)
    fwd = sum(min(R, T - i * R) * min(T, (i + 1) * R) for i in range(tiles))
    dkv = sum(min(R, T - i * R) * (T - i * R) for i in range(tiles))
    return fwd, dkv


def simt_attention_seconds(m, mix):
    """Per call: the three SIMT kernels' time at the binding issue bound of their PTX mix.
    Executed fma = pairs * per-pair products * D; the shared loads scale with the PTX's
    static ratio to fma (the inner loops are fully unrolled, so the ratio is the loop's)."""
    B, NH, D = m["B"], m["NH"], m["C"] // m["NH"]
    fwd_pairs, dkv_pairs = attention_pairs(m)
    products = {"flash_forward_kernel": (2, fwd_pairs), "flash_backward_dq_kernel": (3, fwd_pairs),
                "flash_backward_dkv_kernel": (4, dkv_pairs)}
    out = {}
    for name, (prods, pairs) in products.items():
        k = mix[name]
        fma_warps = B * NH * pairs * prods * D / 32
        ratio = lambda x: x / k["fma"]
        # Issue: the unrolled loops are fma and ld.shared with a few shuffles and exp2 between, so
        # (fma + lds) / 4 per clock stays under the shared-load bound while lds / fma > 1/3. The
        # whole kernel's static instruction count is no guide (the backward loops are unrolled
        # only twice, so prologue and epilogue code outweighs them in the text).
        bounds = {"fp32 fma": fma_warps / FMA_WARP_PER_CLK,
                  "shared loads": fma_warps * ratio(k["lds_wavefronts"]) / LDS_WAVEFRONTS_PER_CLK,
                  "issue": fma_warps * (1 + ratio(k["lds"])) / ISSUE_PER_CLK}
        binding = max(bounds, key=bounds.get)
        out[name] = {"seconds": bounds[binding] / SM_CLOCKS / FRACTION["simt"], "bound": binding,
                     "flops": 2 * fma_warps * 32, "lds_per_fma": ratio(k["lds"]),
                     "bounds_ms": {b: 1e3 * v / SM_CLOCKS for b, v in bounds.items()}}
    return out


def kernels(m, after, mix, epilogues=None):
    """[(role, per_step, flops, bytes, class)] per call; class picks the roof and fraction.
    epilogues: item 4's changes (fused epilogues, first writes with beta 0), as `after` unless
    given; mix None: the SIMT attention rows without FLOPs (for byte counts only)."""
    epi = after if epilogues is None else epilogues
    L, C, NH, B, T = m["L"], m["C"], m["NH"], m["B"], m["T"]
    V = m["Vpad"] if after else m["V"]
    N, e, f4 = B * T, 2.0, 4.0
    P = params(m)
    rows = []

    def add(role, per_block, outside, flops, nbytes, cls):
        rows.append((role, per_block * L + outside, flops, nbytes, cls))

    def linear(name, K, OC, bias, per_block, outside, cls="gemm", gelu_out=False, dgelu_in=False):
        mm = 2.0 * N * K * OC
        fwd = e * (N * K + OC * K + (OC if bias else 0) + N * OC)
        if gelu_out:  # GELU_AUX_BIAS: the pre-activation (aux) written beside the output
            fwd += e * N * OC
        add(name + ".fwd", per_block, outside, mm + (N * OC if bias else 0), fwd, cls)
        bwd_in = e * (N * OC + OC * K + (1 if epi else 2) * N * K)  # epi: beta 0, no read of dx
        if dgelu_in:  # DGELU: reads the aux of the GELU before it
            bwd_in += e * N * K
        add(name + ".bwd_in", per_block, outside, mm, bwd_in, cls)
        bwd_w = e * (N * OC + N * K) + f4 * 2 * OC * K
        if bias and epi:  # BGRADB: the bias gradient into an OC scratch, added to dbias (micro-batches accumulate)
            bwd_w += f4 * 4 * OC
        add(name + ".bwd_w", per_block, outside, mm, bwd_w, cls)
        if bias and not epi:  # colreduce: dout read again; the partials (N/64 x OC fp32) twice
            add(name + ".bias_grad", per_block, outside, 1.0 * N * OC, e * N * OC + f4 * 2 * (N / 64) * OC, "mem")

    add("embed.fwd", 0, 1, 1.0 * N * C, e * 3 * N * C + f4 * N, "mem")
    add("ln.fwd", 2, 1, 8.0 * N * C, e * (2 * N * C + 2 * C) + f4 * 2 * N, "mem")
    add("ln.bwd", 2, 1, 14.0 * N * C, e * (4 * N * C + C) + f4 * (2 * N + 4 * C), "mem")
    add("ln.bwd_params", 2, 1, 6.0 * N * C, e * 2 * N * C + f4 * 4 * (N / 64) * C, "mem")  # colreduce<2>
    linear("qkv", C, 3 * C, True, 1, 0)
    attn_mm = 2.0 * B * T * T * C  # QK^T and PV, causal: half of the square
    if after:
        add("attn.fwd", 1, 0, attn_mm, e * 4 * N * C + f4 * B * NH * T, "fa2_fwd")
        # attention.cu's tensor-core backward: 7 products in two kernels (dQ: S, dP, dQ; dK/dV: S, dP,
        # dV, dK), no atomics; bytes as the SIMT pair below (q, dO, out, K, V read and dq updated;
        # k, v, q, dO read and dk, dv updated; lse read twice, Delta written and read).
        add("attn.bwd", 1, 0, 3.5 * attn_mm, e * 15 * N * C + f4 * 4 * B * NH * T, "fa2_bwd")
    elif mix is None:  # bytes only
        for role, nbytes in (("attn.fwd", e * 4 * N * C + f4 * B * NH * T), ("attn.bwd_dq", e * 7 * N * C + f4 * 2 * B * NH * T),
                             ("attn.bwd_dkv", e * 8 * N * C + f4 * 2 * B * NH * T)):
            add(role, 1, 0, 0.0, nbytes, ("simt", 0.0))
    else:
        simt = simt_attention_seconds(m, mix)
        add("attn.fwd", 1, 0, simt["flash_forward_kernel"]["flops"], e * 4 * N * C + f4 * B * NH * T,
            ("simt", simt["flash_forward_kernel"]["seconds"]))
        add("attn.bwd_dq", 1, 0, simt["flash_backward_dq_kernel"]["flops"], e * 7 * N * C + f4 * 2 * B * NH * T,
            ("simt", simt["flash_backward_dq_kernel"]["seconds"]))
        add("attn.bwd_dkv", 1, 0, simt["flash_backward_dkv_kernel"]["flops"], e * 8 * N * C + f4 * 2 * B * NH * T,
            ("simt", simt["flash_backward_dkv_kernel"]["seconds"]))
    linear("attn_proj", C, C, True, 1, 0)
    linear("mlp_up", C, 4 * C, True, 1, 0, gelu_out=epi)
    if not epi:  # epi: fused into mlp_up.fwd (GELU_AUX_BIAS) and mlp_down.bwd_in (DGELU)
        add("gelu.fwd", 1, 0, 12.0 * N * 4 * C, e * 2 * N * 4 * C, "mem")
        add("gelu.bwd", 1, 0, 20.0 * N * 4 * C, e * 4 * N * 4 * C, "mem")
    linear("mlp_down", 4 * C, C, True, 1, 0, dgelu_in=epi)
    add("residual.fwd", 2, 0, 1.0 * N * C, e * 3 * N * C, "mem")
    # add_grad: each of the 4 per block is its gradient's first contribution; epi: a copy
    # (read g, write), else zero-fill (counted below) and axpy (read g, read and write)
    add("residual.bwd", 4, 0, (0.0 if epi else 2.0) * N * C, e * (2 if epi else 3) * N * C, "mem")
    # Zero-fills of activation gradients per block: ln1 out, dqkv (3), attn out, proj out, x1,
    # ln2 out, mlp_up out (4), gelu out (4), mlp out, x = 18 N C. epi: first writes with beta 0
    # (linear, mlp) and copies (add_grad); attention_backward still accumulates into a zeroed
    # dqkv (3 N C).
    add("grad_zero.act", 1, 0, 0, e * (3.0 if epi else 18.0) * N * C, "mem")
    linear("lm_head", C, V, False, 0, 1, cls="gemm" if after else "gemm_odd")
    if after:  # fused classifier: logits read once, dlogits written in their place, in chunks
        add("classifier", 0, 1, 8.0 * N * V, e * 2 * N * V + f4 * 4 * N, "mem")
    else:
        add("xent.fwd", 0, 1, 4.0 * N * V, e * N * V + f4 * 4 * N, "mem")
        add("xent.bwd", 0, 1, 4.0 * N * V, e * 3 * N * V + f4 * 2 * N, "mem")
        # dlogits, ln_f's output (epi: the head's first write, beta 0) and the last block's output
        add("grad_zero.head", 0, 1, 0, e * (N * V + (1.0 if epi else 2.0) * N * C), "mem")
    add("embed.bwd", 0, 1, 2.0 * N * C, e * N * C + f4 * (2 * N * C + 2 * T * C + N), "mem")
    add("grad_zero.params", 0, 1, 0, f4 * P, "mem")
    add("grad_norm", 0, 1, 2.0 * P, f4 * P, "mem")
    add("adamw", 0, 1, 15.0 * P, f4 * 7 * P + e * P, "mem")
    return rows


def seconds(flops, nbytes, cls):
    mem = nbytes / (FRACTION["mem"] * H200["hbm"])
    if isinstance(cls, tuple):  # ("simt", seconds from the PTX mix)
        return max(cls[1], mem)
    if cls == "mem":
        return max(mem, flops / (FRACTION["mem"] * H200["fp32"]))
    return max(flops / (FRACTION[cls] * H200["tc_bf16"]), mem)


def model_flops(m):
    """llm.c's (and nanoGPT's, after PaLM's appendix B) count per step: 6 * parameters per
    token plus 12 * L * C * T per token for attention (the whole T x T square, as they count it)."""
    return m["B"] * m["T"] * (6.0 * params(m) + 12.0 * m["L"] * m["C"] * m["T"])


def step(m, after, mix):
    rows = []
    for role, n, flops, nbytes, cls in kernels(m, after, mix):
        t = seconds(flops, nbytes, cls)
        rows.append({"role": role, "n": n, "flops": flops, "bytes": nbytes, "cls": cls if isinstance(cls, str) else cls[0],
                     "ms": 1e3 * t, "total_ms": 1e3 * t * n})
    total = sum(r["total_ms"] for r in rows)
    return rows, total, model_flops(m) / (total / 1e3) / H200["tc_bf16"]


def class_of(role):
    if role.startswith("attn"):
        return "attention"
    if role.endswith((".fwd", ".bwd_in", ".bwd_w")) and role.split(".")[0] in ("qkv", "attn_proj", "mlp_up", "mlp_down", "lm_head"):
        return "GEMMs"
    return "memory-bound"


SIMT_KERNELS = ("flash_forward_kernel", "flash_backward_dq_kernel", "flash_backward_dkv_kernel")


def report_lines(mix):
    """The markdown of the prediction. mix: per SIMT attention kernel at gpt2's head size, its
    static PTX counts (fma, lds, lds_wavefronts, instr), from static_report.py."""
    m = GPT2
    missing = [k for k in SIMT_KERNELS if k not in mix]
    if missing:
        raise SystemExit(f"step_model: no PTX mix for {', '.join(missing)} at head size {m['C'] // m['NH']}: "
                         "the SIMT attention kernels were renamed? (static_report.py attention_mix)")
    before, t_before, mfu_before = step(m, False, mix)
    after, t_after, mfu_after = step(m, True, mix)
    simt = simt_attention_seconds(m, mix)
    L = []
    L.append("## The gpt2 step on an H200: a roofline PREDICTION (no GPU measured anything here)")
    L.append("")
    L.append(f"Shape: L{m['L']} C{m['C']} NH{m['NH']} V{m['V']}, B{m['B']} T{m['T']}, bf16 (fp32 master weights, "
             f"gradients, AdamW moments); {params(m) / 1e6:.2f} M parameters. Peaks (NVIDIA's "
             f"H200 SXM datasheet): {H200['tc_bf16'] / 1e12:.0f} TFLOP/s dense bf16 tensor core, "
             f"{H200['fp32'] / 1e12:.0f} TFLOP/s fp32, {H200['hbm'] / 1e12:.1f} TB/s HBM3e. Regenerated by "
             "`bench/gpu/step_model.py` (called by static_report.py).")
    L.append("")
    L.append("Per kernel call: time = max(FLOPs / (fraction x compute peak), bytes / (fraction x bandwidth)); "
             "kernels, counts, FLOPs and bytes as tools/bench.cpp `step_cases` (what `gpumix bench` times), with "
             "the column reductions the code runs for bias and LayerNorm parameter gradients split out. Host "
             "overhead (launches, cuBLASLt descriptors built per call) is not modelled in either column.")
    L.append("")
    L.append("### Assumed fractions of peak, and why")
    L.append("")
    L.append(f"- **GEMMs (cuBLASLt), {FRACTION['gemm']:.0%} of tensor-core peak**: M = N rows = {m['B'] * m['T']}, "
             "N and K in {768, 2304, 3072}: large, 128-aligned, so cuBLASLt's Hopper kernels run at full tiles; "
             "70 % is the usual figure for bf16 GEMMs of this size on H100-class parts (below the 75-80 % of "
             "square 8k GEMMs: K = 768 is short, so each tile's prologue/epilogue weighs more). An assumption to "
             "check on the first GPU (`gpumix bench` prints each GEMM against the measured roof).")
    L.append(f"- **The LM head before padding, {FRACTION['gemm_odd']:.0%}**: V = 50,257 is odd, so the logits' "
             "and dlogits' leading dimension is 2-byte aligned only: cuBLASLt cannot use its 16-byte (TMA / "
             "vectorised) kernels and falls back to slower ones. llm.c pads V to 50,304 for this reason. "
             "45 % is an assumption (not a measurement), the largest uncertainty of the GEMM class.")
    L.append(f"- **Memory-bound kernels, {FRACTION['mem']:.0%} of HBM bandwidth**: coalesced 16-byte streams "
             "(map_vec, adamw_vec, layernorm, the cross-entropy's vector path) reach 80-90 % of the datasheet "
             "bandwidth on HBM parts; 80 % taken for all, though the scalar paths (V odd: the cross-entropy's "
             "non-vector kernels) and the column reductions will do worse.")
    fwd_pairs, dkv_pairs = attention_pairs(m)
    L.append("- **Today's SIMT attention** (the PTX mix of this build): "
             "one thread group per row, fp32 FMAs on K/V (or Q/dO) tiles staged in shared memory. Executed FMAs = "
             f"(row, key) pairs x products x D: {fwd_pairs:,} pairs per (b, h) in forward and dQ, {dkv_pairs:,} in "
             "dK/dV (tiles of 64 rows run to the end of their tile; the mask costs no arithmetic); 2 products in "
             "forward (S, PV), 3 in dQ (S, dP, dQ), 4 in dK/dV (S, dP, dV, dK): 9 products of T x T x D where "
             "FlashAttention-2 does 7 (2 + 5). From the static PTX of the D = 64 kernels, the ratios of shared "
             "loads to FMAs gives three bounds per kernel (SM-clocks: FMAs / 4 warp instructions per clock, "
             "shared wavefronts / 1 per clock, FMAs + shared loads / 4 issued per clock: the unrolled loops hold "
             "little else); the "
             f"largest binds, and the kernel is assumed to reach {FRACTION['simt']:.0%} of it (occupancy 12-25 % "
             "at 128-242 registers, 2-4 warps per scheduler, each with unrolled runs of independent loads: latency "
             "mostly hidden, the barriers of each 32-row tile not). The PTX is what ptxas receives: ptxas may keep "
             "a re-read shared value in a register (the backward kernels' 166-255 registers suggest it keeps some), "
             "so the shared-load bound is an upper bound and the fp32-FMA bound the floor; a SASS count on the "
             "first GPU machine (cuobjdump there) settles it.")
    L.append("")
    L.append("| SIMT kernel (D = 64) | PTX lds / fma | fp32-FMA bound ms | shared-load bound ms | "
             "issue bound ms | binds | predicted ms per call |")
    L.append("|---|---|---|---|---|---|---|")
    for name, s in simt.items():
        b = s["bounds_ms"]
        L.append(f"| {name} | {s['lds_per_fma']:.2f} | {b['fp32 fma']:.2f} | "
                 f"{b['shared loads']:.2f} | {b['issue']:.2f} | {s['bound']} | {1e3 * s['seconds']:.2f} |")
    L.append("")
    L.append(f"- **After: FlashAttention-2 on tensor cores, {FRACTION['fa2_fwd']:.0%} of TC peak forward, "
             f"{FRACTION['fa2_bwd']:.0%} backward**: FA2 (mma.sync, not Hopper's wgmma) is reported at about 35 % "
             "of H100's peak in forward at large head sizes (the FlashAttention-3 paper's motivation); at head size "
             "64 and T = 1,024 the softmax and the causal tiles weigh more, hence less; its backward runs below its "
             "forward. FLOPs counted as executed causal products (2 T^2 C B forward, 3.5x that backward: "
             "attention.cu recomputes S and dP in a separate dQ kernel, 7 products instead of FlashAttention-2's 5, "
             "so that dQ needs no fp32 atomics and the gradient is bitwise reproducible).")
    L.append("- **After: the other changes of issue 28, as built** (items 3-4), each modelled as removed or added bytes: "
             f"the vocabulary padded to {m['Vpad']} (the LM head at the aligned GEMMs' {FRACTION['gemm']:.0%}); the "
             "fused classifier (logits read once, dlogits written in place: 2 N Vp bf16, replacing the cross-entropy "
             "forward, backward and the (N, V) zero-fill); GELU in mlp_up's epilogue (GELU_AUX_BIAS: the "
             "pre-activation written as aux) and its backward in mlp_down's activation-gradient GEMM (DGELU: "
             "the aux read); the bias gradients in the weight-gradient GEMMs' epilogue (BGRADB, fp32, into an OC "
             "scratch then added: no column reduction; DGELU_BGRAD is not used, its bias gradient would be bf16); "
             "first gradient writes with beta 0 (no read of dx in the GEMMs) and first residual contributions "
             "copied, not added to zeros (only attention's dqkv is still zero-filled). The LayerNorm passes are "
             "kept as they are. Item 4's bytes alone: `python3 bench/gpu/step_model.py` "
             "(bench/results/epilogue-bytes.md).")
    L.append("")
    L.append("### Per kernel (ms per step = ms per call x calls)")
    L.append("")
    L.append("| kernel | calls | GFLOP/call | MB/call | class | before ms/call | before ms/step | after ms/step |")
    L.append("|---|---|---|---|---|---|---|---|")
    after_by = {r["role"]: r for r in after}
    for r in before:
        a = after_by.get(r["role"])
        L.append(f"| {r['role']} | {r['n']} | {r['flops'] / 1e9:.2f} | {r['bytes'] / 1e6:.1f} | {r['cls']} | "
                 f"{r['ms']:.3f} | {r['total_ms']:.2f} | {a['total_ms'] if a else 0:.2f}" + ("" if a else " (fused away)") + " |")
    before_roles = {r["role"] for r in before}
    for a in after:
        if a["role"] not in before_roles:
            L.append(f"| {a['role']} (after) | {a['n']} | {a['flops'] / 1e9:.2f} | {a['bytes'] / 1e6:.1f} | {a['cls']} | "
                     f"- | - | {a['total_ms']:.2f} |")
    L.append("")
    L.append("### By class, and the step")
    L.append("")
    L.append("| class | before ms | after ms (PREDICTION: built, never run on a GPU) |")
    L.append("|---|---|---|")
    for c in ("GEMMs", "attention", "memory-bound"):
        tb = sum(r["total_ms"] for r in before if class_of(r["role"]) == c)
        ta = sum(r["total_ms"] for r in after if class_of(r["role"]) == c)
        L.append(f"| {c} | {tb:.1f} | {ta:.1f} |")
    mf = model_flops(m)
    L.append(f"| **step** | **{t_before:.1f}** | **{t_after:.1f}** |")
    L.append(f"| **MFU** | **{100 * mfu_before:.1f} %** | **{100 * mfu_after:.1f} %** |")
    L.append(f"| tokens/s | {m['B'] * m['T'] / t_before * 1e3:,.0f} | {m['B'] * m['T'] / t_after * 1e3:,.0f} |")
    L.append("")
    L.append(f"MFU = model FLOPs per step / (step time x {H200['tc_bf16'] / 1e12:.0f} TFLOP/s), with llm.c's count "
             f"(nanoGPT's `estimate_mfu`, from PaLM appendix B): tokens x (6 x {params(m) / 1e6:.2f} M parameters + "
             f"12 x L x C x T) = {mf / 1e12:.2f} TFLOP per step (the attention term counts the full T x T square, "
             "as they do). The comparison: llm.c trains this model at about 50 % MFU on A100/H100, as issue 28 "
             "quotes it (not re-derived here). Both columns are predictions; the \"after\" column is of the code as "
             "it stands (issue 28 items 2-4 built and tested on the emulated GPU, none of it run on a GPU), under "
             "the assumptions above.")
    return L


def bytes_per_step(m, epilogues):
    """{role: bytes per step} with the code as before issue 28, item 4's changes on or off."""
    out = {}
    for role, n, _flops, nbytes, _cls in kernels(m, False, None, epilogues=epilogues):
        out[role] = out.get(role, 0.0) + n * nbytes
    return out


def epilogue_bytes_lines(m=GPT2):
    """Markdown: the bytes a gpt2 step moves with and without item 4 (fused GEMM epilogues and
    first writes with beta 0), per kernel role, from this model's per-call byte counts."""
    before, after = bytes_per_step(m, False), bytes_per_step(m, True)
    L = [f"## Bytes per gpt2 step, issue 28 item 4 off and on (a byte model, not a measurement)", "",
         f"Shape L{m['L']} C{m['C']} V{m['V']} B{m['B']} T{m['T']}, bf16; everything else as before issue 28. "
         "Per call bytes as bench/gpu/step_model.py `kernels` counts them (each operand read once, each "
         "result written once), times the calls per step.", "",
         "| kernel | before GB | after GB | saved GB |", "|---|---|---|---|"]
    for role in before:
        b, a = before[role], after.get(role, 0.0)
        if abs(b - a) > 0.5e6:
            L.append(f"| {role} | {b / 1e9:.2f} | {a / 1e9:.2f}{'' if role in after else ' (fused away)'} | {(b - a) / 1e9:.2f} |")
    tb, ta = sum(before.values()), sum(after.values())
    L.append(f"| **step** | **{tb / 1e9:.2f}** | **{ta / 1e9:.2f}** | **{(tb - ta) / 1e9:.2f}** |")
    L.append("")
    L.append("Rows whose bytes do not change are left out (the step total counts them). At the H200's "
             f"{H200['hbm'] / 1e12:.1f} TB/s and {FRACTION['mem']:.0%} of it, the saving is about "
             f"{(tb - ta) / (FRACTION['mem'] * H200['hbm']) * 1e3:.1f} ms per step (predicted).")
    return L


if __name__ == "__main__":
    print("\n".join(epilogue_bytes_lines()))
