#!/usr/bin/python3
"""PyTorch peer of bench_generate: a GPT-2-shaped model of random weights (pre-norm blocks,
GELU tanh MLP, tied head), greedy generation of one sequence with a hand-written key/value
cache (per layer, K and V tensors of the positions seen, concatenated each step: the
past_key_values loop) or with the full recompute per token. Prints the line bench_generate
prints: RESULT mode M dtype D prompt P new N seconds S tokens_per_s R.

  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 bench/nn/torch_generate.py
      [--prompt 16] [--new 100] [--mode cache|full] [--dtype fp32|bf16] [--threads N]
      [--layers 12 --heads 12 --channels 768 --context 1024 --vocab 50257]

With OpenBLAS's OpenMP build pinned, as generate_compare.sh runs it (torch_blas.py: it prints
the BLAS it loaded and refuses the netlib reference BLAS unless --allow-reference-blas).
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

from torch_blas import check_blas


class GPT(torch.nn.Module):
    def __init__(self, L, NH, C, T, V):
        super().__init__()
        self.NH, self.T = NH, T
        self.wte = torch.nn.Parameter(torch.randn(V, C) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(T, C) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
            b.qkv, b.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
            b.fc, b.fc2 = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
            self.blocks.append(b)
        self.ln_f = torch.nn.LayerNorm(C)

    def forward(self, ids, pos0=0, cache=None):
        """ids (1, n) at positions pos0..; cache: a list of [k, v] per layer (1, NH, t, HS),
        extended in place; None: no cache (a causal mask over the n rows). Returns the last
        row's logits (V)."""
        n = ids.shape[1]
        x = self.wte[ids] + self.wpe[pos0:pos0 + n]
        for l, b in enumerate(self.blocks):
            h = b.ln1(x)
            q, k, v = b.qkv(h).split(x.shape[-1], dim=-1)
            shape = lambda t: t.view(1, n, self.NH, -1).transpose(1, 2)
            q, k, v = shape(q), shape(k), shape(v)
            if cache is not None:
                if cache[l] is not None:
                    k = torch.cat([cache[l][0], k], dim=2)
                    v = torch.cat([cache[l][1], v], dim=2)
                cache[l] = [k, v]
            # Causal within the new rows; a single new row sees every cached one.
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (1, NH, n, t)
            if n > 1:
                t = k.shape[2]
                s = s.masked_fill(torch.ones(n, t, dtype=torch.bool).triu(t - n + 1), float("-inf"))
            a = torch.softmax(s.float(), dim=-1).to(v.dtype) @ v
            x = x + b.proj(a.transpose(1, 2).reshape(1, n, -1))
            x = x + b.fc2(F.gelu(b.fc(b.ln2(x)), approximate="tanh"))
        return self.ln_f(x[:, -1]) @ self.wte.t()


def main():
    p = argparse.ArgumentParser()
    for k, d in [("layers", 12), ("heads", 12), ("channels", 768), ("context", 1024), ("vocab", 50257),
                 ("prompt", 16), ("new", 100), ("threads", 0)]:
        p.add_argument("--" + k, type=int, default=d)
    p.add_argument("--mode", choices=["cache", "full"], default="cache")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--print-ids", action="store_true", help="also print the generated ids (to compare modes)")
    p.add_argument("--allow-reference-blas", action="store_true")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT(a.layers, a.heads, a.channels, a.context, a.vocab).eval()
    if a.dtype == "bf16":
        model = model.to(torch.bfloat16)
    prompt = [(i * 40503 + 7) % a.vocab for i in range(a.prompt)]

    def generate(n_new):
        ids = list(prompt)
        T = a.context
        cache = [None] * a.layers if a.mode == "cache" else None
        for i in range(n_new):
            if cache is None:
                logits = model(torch.tensor([ids[-T:]]))
            elif i == 0 or len(ids) > T:  # the prompt; past the window: refill (bench_generate's rule)
                cache = [None] * a.layers
                w = ids[-T:]
                logits = model(torch.tensor([w]), 0, cache)
            else:
                logits = model(torch.tensor([[ids[-1]]]), len(ids) - 1, cache)
            ids.append(int(torch.argmax(logits.float())))
        return ids

    with torch.inference_mode():
        generate(2)  # warm-up
        blas = check_blas(a.allow_reference_blas)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, BLAS loaded: {', '.join(blas) or 'none'}")
        t0 = time.perf_counter()
        ids = generate(a.new)
        s = time.perf_counter() - t0
    if a.print_ids:
        print("IDS", *ids[a.prompt:])
    print(f"RESULT mode {a.mode} dtype {a.dtype} prompt {a.prompt} new {a.new} seconds {s:.3f} "
          f"tokens_per_s {a.new / s:.2f}")


if __name__ == "__main__":
    main()
