"""PyTorch beside GPUMix on the same GPU, for bench/gpu/check.sh.

Without arguments: the CUDA kernels of bench/cuda/bench_cuda.cpp, in PyTorch, timed the
same way: CUDA events around each call, median of the repeats, the L2 flushed before each
repeat of a memory-bound op, random data. Prints one table (us, GB/s or TFLOP/s, % of copy
bandwidth). Shapes: gpt2 124M (B 8, T 1024, C 768, NH 12, V 50304 padded), bf16 activations.

--e2e eager|compile: the end-to-end training step of bench/nn/bench_train.cpp in PyTorch,
as PyTorch trains best on a GPU: the same model (bench/nn/torch_gpt_cpu.py's GPT, GPUMix's
nn/gpt.cpp: pre-norm blocks, tanh GELU, tied head, GPT-2 initialisation) with causal
scaled_dot_product_attention, forward and loss under bf16 autocast with fp32 master
weights, backward, global-norm clip (foreach), fused AdamW (betas 0.9/0.95, eps 1e-8,
weight decay on matrices and embeddings) on random tokens, the same batch every step.
`compile` runs the model through torch.compile (default mode; the optimizer is one fused
kernel already). Each step is timed on the host clock up to a torch.cuda.synchronize() at
its end; the median of the timed steps after the warm-up (which includes the compilation)
is printed as a RESULT line as bench_train prints it.

  python3 bench/gpu/torch_compare.py --e2e eager --L 12 --NH 12 --C 768 --T 1024 --V 50257 --B 16

--attention: causal scaled_dot_product_attention (flash where PyTorch picks it) at --B, --T,
--NH, --C (HS = C / NH), bf16, forward and forward + backward, CUDA events, median of 30; a
RESULT line with both times, beside bench_cuda's BM_attention at the same shape.
"""
import argparse
import os
import statistics
import sys
import time

if "-h" in sys.argv or "--help" in sys.argv:
    torch = None
else:
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        print(f"torch_compare: PyTorch unavailable ({e}); skipping")
        sys.exit(0)
    if not torch.cuda.is_available():
        print("torch_compare: no CUDA device; skipping")
        sys.exit(0)

dev = "cuda"
B, T, C, NH, V = 8, 1024, 768, 12, 50304
N = B * T
bf = torch.bfloat16 if torch else None
props = torch.cuda.get_device_properties(0) if torch else None
flush_buf = None  # several L2 sizes, zeroed before each memory-bound repeat (kernel table)
rows = []


def timed(fn, flush=True, reps=30, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if flush:
            flush_buf.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)  # us
    times.sort()
    return times[len(times) // 2]


copy_gbps = None


def report(name, us, nbytes=0.0, flops=0.0):
    gbps = nbytes / us / 1e3 if nbytes else None
    tf = flops / us / 1e6 if flops else None
    pct = 100 * gbps / copy_gbps if (gbps and copy_gbps) else None
    rows.append((name, us, gbps, tf, pct))
    print(f"{name:34s} {us:10.1f} us" + (f" {gbps:8.0f} GB/s" if gbps else "") +
          (f" {pct:5.0f}% copy" if pct else "") + (f" {tf:8.1f} TFLOP/s" if tf else ""), flush=True)


def kernels():
    global copy_gbps, flush_buf
    flush_buf = torch.empty(max(4 * props.L2_cache_size, 64 << 20), dtype=torch.uint8, device=dev)
    t0 = time.time()
    print(f"torch {torch.__version__}, device {props.name}, {props.multi_processor_count} SMs")
    a = torch.randn(1 << 28, device=dev)  # 1 GiB
    b = torch.empty_like(a)
    us = timed(lambda: b.copy_(a), flush=False)
    copy_gbps = 2 * a.numel() * 4 / us / 1e3
    report("copy D2D 1 GiB", us, 2 * a.numel() * 4)
    del a, b

    # layernorm
    x = torch.randn(N, C, device=dev, dtype=bf, requires_grad=True)
    w = torch.randn(C, device=dev, dtype=bf, requires_grad=True)
    bias = torch.randn(C, device=dev, dtype=bf, requires_grad=True)
    report("layernorm fwd 8192x768", timed(lambda: F.layer_norm(x, (C,), w, bias)), 2 * 2 * N * C)
    y = F.layer_norm(x, (C,), w, bias)
    g = torch.randn_like(y)
    report("layernorm bwd 8192x768",
           timed(lambda: torch.autograd.grad(y, (x, w, bias), g, retain_graph=True)), 2 * 3 * N * C)
    del x, y, g

    # gelu (tanh)
    x = torch.randn(N, 4 * C, device=dev, dtype=bf, requires_grad=True)
    report("gelu fwd 8192x3072", timed(lambda: F.gelu(x, approximate="tanh")), 2 * 2 * x.numel())
    y = F.gelu(x, approximate="tanh")
    g = torch.randn_like(y)
    report("gelu bwd 8192x3072", timed(lambda: torch.autograd.grad(y, x, g, retain_graph=True)),
           2 * 3 * x.numel())
    del x, y, g

    # cross-entropy, 4096 rows as in bench_cuda
    n = 4096
    logits = (2 * torch.randn(n, V, device=dev)).to(bf).requires_grad_(True)
    tgt = torch.randint(0, V, (n,), device=dev)
    report("crossentropy fwd 4096x50304", timed(lambda: F.cross_entropy(logits, tgt)),
           2 * n * V)
    loss = F.cross_entropy(logits, tgt)
    report("crossentropy bwd 4096x50304",
           timed(lambda: torch.autograd.grad(loss, logits, retain_graph=True)), 2 * 2 * n * V)
    del logits, loss

    # AdamW, fused, on one 124M fp32 tensor (no bf16 copy: GPUMix writes 2 more bytes/param)
    p = torch.nn.Parameter(torch.randn(124 << 20, device=dev))
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    opt.step()
    report("adamw fused 124M", timed(opt.step, reps=15), 28 * p.numel())
    del p, opt

    # matmul
    xa = torch.randn(N, C, device=dev, dtype=bf)
    wa = 0.02 * torch.randn(4 * C, C, device=dev, dtype=bf)
    ba = torch.randn(4 * C, device=dev, dtype=bf)
    report("matmul fwd 8192x768x3072 +bias", timed(lambda: F.linear(xa, wa, ba), flush=False),
           0, 2 * N * C * 4 * C)
    del xa, wa, ba

    # SDPA, causal, B 8 NH 12 T 1024 HS 64
    HS = C // NH
    q, k, v = (torch.randn(B, NH, T, HS, device=dev, dtype=bf, requires_grad=True) for _ in range(3))
    fl = 2.0 * B * NH * T * T * HS
    report("sdpa causal fwd T1024", timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                          flush=False), 0, fl)
    go = torch.randn(B, NH, T, HS, device=dev, dtype=bf)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(o, (q, k, v), go)
    report("sdpa causal fwd+bwd T1024", timed(fwd_bwd, flush=False), 0, 3.5 * fl)
    print(f"torch_compare: done in {time.time() - t0:.1f} s")


def sdpa_gpt(L, NH, C, T, V):
    """torch_gpt_cpu.py's GPT (the same parameters and initialisation as GPUMix's), its
    blocks' attention through causal scaled_dot_product_attention."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nn"))
    from torch_gpt_cpu import GPT, Block

    class SdpaBlock(Block):
        def attention(self, x, mask, mode):
            Bx, Tx, C3 = x.shape
            Cx = C3 // 3
            q, k, v = (t.view(Bx, Tx, self.NH, Cx // self.NH).transpose(1, 2)  # (B, NH, T, HS)
                       for t in x.split(Cx, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return y.transpose(1, 2).contiguous().view(Bx, Tx, Cx)

    model = GPT(L, NH, C, T, V)
    for b in model.h:
        b.__class__ = SdpaBlock  # same module, same parameters: only attention() differs
    return model


def e2e(a):
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers outside autocast
    model = sdpa_gpt(a.L, a.NH, a.C, a.T, a.V).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices, embeddings
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases, norms
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    run = torch.compile(model) if a.e2e == "compile" else model
    g = torch.Generator().manual_seed(a.seed)
    tokens = torch.randint(0, a.V, (a.B, a.T), generator=g).to(dev)
    targets = torch.randint(0, a.V, (a.B, a.T), generator=g).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, device {props.name}; torch-{a.e2e}: L={a.L} NH={a.NH} C={a.C} "
          f"T={a.T} V={a.V} B={a.B}, {nparams / 1e6:.2f}M parameters, {a.warmup} warmup + {a.steps} "
          f"timed steps, bf16 autocast, SDPA, fused AdamW", flush=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(tokens, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip, foreach=True)
        opt.step()
        return loss, norm

    ntok = a.B * a.T
    ms, rates = [], []
    t_start = time.perf_counter()
    for s in range(1, a.warmup + a.steps + 1):
        if s == a.warmup + 1:
            torch.cuda.reset_peak_memory_stats()
            print(f"warm-up (compilation included) took {time.perf_counter() - t_start:.1f} s", flush=True)
        t0 = time.perf_counter()
        loss, norm = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if s > a.warmup:
            ms.append(dt * 1e3)
            rates.append(ntok / dt)
        print(f"step {s}{' (warmup)' if s <= a.warmup else ''} | loss {loss.item():.4f} | "
              f"norm {norm.item():.3f} | {dt * 1e3:.1f} ms | {ntok / dt:.0f} tok/s", flush=True)
    peak = torch.cuda.max_memory_allocated() / (1 << 20)
    print(f"RESULT torch-{a.e2e} ms_per_step {statistics.median(ms):.2f} tokens_per_s "
          f"{statistics.median(rates):.1f} peak_mib {peak:.1f}")


def attention(a):
    HS = a.C // a.NH
    q, k, v = (torch.randn(a.B, a.NH, a.T, HS, device=dev, dtype=bf, requires_grad=True) for _ in range(3))
    go = torch.randn(a.B, a.NH, a.T, HS, device=dev, dtype=bf)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(o, (q, k, v), go)
    fwd_us = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), flush=False)
    fwd_bwd_us = timed(fwd_bwd, flush=False)
    print(f"torch {torch.__version__}, device {props.name}; sdpa causal B={a.B} T={a.T} NH={a.NH} HS={HS}")
    print(f"RESULT torch-sdpa fwd_ms {fwd_us / 1e3:.4f} fwd_bwd_ms {fwd_bwd_us / 1e3:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--e2e", choices=("eager", "compile"),
                    help="the end-to-end training step instead of the kernel table")
    ap.add_argument("--attention", action="store_true",
                    help="causal SDPA forward and forward + backward at --B --T --NH --C")
    for name, default in (("L", 12), ("NH", 12), ("C", 768), ("T", 1024), ("V", 50257), ("B", 16)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        sys.exit("torch_compare: --steps must be >= 1 and --warmup >= 0")
    if a.attention:
        attention(a)
    elif a.e2e:
        e2e(a)
    else:
        kernels()


if __name__ == "__main__":
    main()
