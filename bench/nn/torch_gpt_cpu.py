#!/usr/bin/python3
"""The GPUMix training step in PyTorch on the CPU, for bench/nn/compare.sh.

The same GPT-2-style model as nn/gpt.cpp (pre-norm blocks, tanh GELU MLP, LM head tied to
wte, GPT-2 initialisation), fp32, attention written out (Q K^T, causal mask, softmax, A V:
torch 1.13 has no scaled_dot_product_attention), the same step as `gpumix train`:
zero_grad, mean cross-entropy, backward, global-norm clip, AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on matrices and embeddings only) on random tokens. --dtype bf16 runs the
forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's mixed
precision on the CPU: bf16 matmuls, fp32 weights, gradients and optimizer), the backward
outside it, as PyTorch recommends.

Run it with Debian's interpreter and OpenBLAS's OpenMP build pinned (see
bench/nn/torch_peer.sh), with the thread count set both ways:

  OMP_NUM_THREADS=2 LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \
      /usr/bin/python3 bench/nn/torch_gpt_cpu.py --threads 2

It prints the BLAS library it loaded (from /proc/self/maps) and refuses to run on the
netlib reference BLAS unless --allow-reference-blas is given.
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_blas import check_blas


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x, mask, mode):
        B, T, C3 = x.shape
        C = C3 // 3
        HS = C // self.NH
        q, k, v = x.split(C, dim=2)
        q = q.view(B, T, self.NH, HS).transpose(1, 2)  # (B, NH, T, HS)
        k = k.view(B, T, self.NH, HS).transpose(1, 2)
        v = v.view(B, T, self.NH, HS).transpose(1, 2)
        if mode == "bmm":  # as nanoGPT writes it: batched matmuls over (B, NH)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))  # (B, NH, T, T)
            att = att.masked_fill(mask[:T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v  # (B, NH, T, HS)
        else:  # "mm": one torch.mm per (batch, head); torch 1.13's CPU bmm without MKL is slower
            ys = []
            for b in range(B):
                for h in range(self.NH):
                    a = (q[b, h] @ k[b, h].t()) * (1.0 / math.sqrt(HS))  # (T, T)
                    a = F.softmax(a.masked_fill(mask[:T, :T], float("-inf")), dim=-1)
                    ys.append(a @ v[b, h])  # (T, HS)
            y = torch.stack(ys).view(B, self.NH, T, HS)
        return y.transpose(1, 2).contiguous().view(B, T, C)

    def forward(self, x, mask, mode):
        x = x + self.attn_proj(self.attention(self.c_attn(self.ln_1(x)), mask, mode))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, L, NH, C, T, V, attn="bmm"):
        super().__init__()
        self.attn = attn
        self.wte = nn.Parameter(torch.empty(V, C))
        self.wpe = nn.Parameter(torch.empty(T, C))
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        # True above the diagonal: the keys a query may not see.
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
        # GPT-2 initialisation, as nn/gpt.cpp.
        std_residual = 0.02 / math.sqrt(2 * L)
        nn.init.normal_(self.wte, std=0.02)
        nn.init.normal_(self.wpe, std=0.02)
        for b in self.h:
            for lin in (b.c_attn, b.c_fc):
                nn.init.normal_(lin.weight, std=0.02)
                nn.init.zeros_(lin.bias)
            for lin in (b.attn_proj, b.mlp_proj):
                nn.init.normal_(lin.weight, std=std_residual)
                nn.init.zeros_(lin.bias)

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.wte[tokens] + self.wpe[:T]
        for b in self.h:
            x = b(x, self.mask, self.attn)
        logits = self.ln_f(x) @ self.wte.t()  # (B, T, V), tied head
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("L", 4), ("NH", 4), ("C", 256), ("T", 256), ("V", 8192), ("B", 8)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--foreach", choices=("default", "on", "off"), default="default",
                    help="AdamW's multi-tensor implementation (default: torch's choice)")
    ap.add_argument("--attn", choices=("bmm", "mm"), default="bmm",
                    help="attention products: batched (q @ k^T over (B, NH), the usual way) or one mm per head")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="fp32, or bf16 autocast (torch.autocast('cpu', dtype=torch.bfloat16))")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--allow-reference-blas", action="store_true")
    a = ap.parse_args()

    if os.environ.get("OMP_NUM_THREADS") != str(a.threads):
        print(f"warning: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} but --threads {a.threads}",
              file=sys.stderr)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    model = GPT(a.L, a.NH, a.C, a.T, a.V, a.attn)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]  # matrices, embeddings
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]  # biases, norms
    kwargs = {} if a.foreach == "default" else {"foreach": a.foreach == "on"}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **kwargs)
    g = torch.Generator().manual_seed(a.seed)
    tokens = torch.randint(0, a.V, (a.B, a.T), generator=g)
    targets = torch.randint(0, a.V, (a.B, a.T), generator=g)
    nparams = sum(p.numel() for p in model.parameters())

    # One step first, so that the BLAS library is loaded and visible in the maps.
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(tokens, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        return loss.item(), norm.item()

    t0 = time.perf_counter()
    first = step()
    first_s = time.perf_counter() - t0
    blas = check_blas(a.allow_reference_blas)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, BLAS loaded: {', '.join(blas) or 'none'}")
    print("torch config: " + "; ".join(l.strip() for l in torch.__config__.show().splitlines()
                                       if "BLAS" in l or "CPU capability" in l)[:300])
    print(f"torch_gpt_cpu: L={a.L} NH={a.NH} C={a.C} T={a.T} V={a.V} B={a.B}, {nparams / 1e6:.2f}M parameters, "
          f"{a.warmup} warmup + {a.steps} timed steps, attention {a.attn}, AdamW foreach={a.foreach}, "
          f"dtype {a.dtype}{' (autocast)' if a.dtype == 'bf16' else ''}")
    ntok = a.B * a.T
    ms, rates = [], []
    for s in range(1, a.warmup + a.steps + 1):
        if s == 1:
            loss, norm = first
            dt = first_s
        else:
            t0 = time.perf_counter()
            loss, norm = step()
            dt = time.perf_counter() - t0
        if s > a.warmup:
            ms.append(dt * 1e3)
            rates.append(ntok / dt)
        if not a.quiet:
            print(f"step {s}{' (warmup)' if s <= a.warmup else ''} | loss {loss:.4f} | norm {norm:.3f} | "
                  f"{dt * 1e3:.1f} ms | {ntok / dt:.0f} tok/s")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"peak RSS {rss:.1f} MiB (whole process, including the interpreter and libraries)")
    print(f"RESULT torch-{a.attn}-{a.dtype} ms_per_step {statistics.median(ms):.2f} tokens_per_s {statistics.median(rates):.1f} "
          f"peak_rss_mib {rss:.1f} threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
