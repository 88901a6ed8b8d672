"""The CUDA kernels of bench/cuda/bench_cuda.cpp, in PyTorch, timed the same way: CUDA
events around each call, median of the repeats, the L2 flushed before each repeat of a
memory-bound op, random data. Prints one table (us, GB/s or TFLOP/s, % of copy bandwidth).
Shapes: gpt2 124M (B 8, T 1024, C 768, NH 12, V 50304 padded), bf16 activations."""
import sys
import time

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
bf = torch.bfloat16
props = torch.cuda.get_device_properties(0)
flush_buf = torch.empty(max(4 * props.L2_cache_size, 64 << 20), dtype=torch.uint8, device=dev)
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


def main():
    global copy_gbps
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


if __name__ == "__main__":
    main()
