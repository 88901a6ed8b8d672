#!/usr/bin/env python3
"""Writes tests/nn/golden_gpt.json: a small GPT run in PyTorch, the oracle of GPUMix's
golden test (tests/nn/test_golden.cpp), in fp32 and under PyTorch's bf16 mixed precision
(torch.autocast("cpu", dtype=torch.bfloat16): fp32 parameters, bf16 matmuls).

Run by hand with Debian's PyTorch (apt-get install python3-torch), not in CI:
    /usr/bin/python3 tests/nn/make_golden.py

The model mirrors nn/gpt.cpp exactly: pre-norm blocks, fused qkv projection laid out
[q | k | v], causal attention with 1/sqrt(head size) scaling, tanh GELU, LayerNorm eps 1e-5,
final LayerNorm, LM head tied to the token embedding. Parameters are a pure function of
their index in GPUMix's flat order (nn/gpt.cpp gpt_param_layout), computed bit for bit the
same by the test (golden_param below), so both sides start from the same numbers. The file
holds: the config, tokens and targets, a check of the parameters (their sum and a few of
them), and per mode ("fp32", "bf16_autocast") the logits, the mean loss, the flat gradient
of that loss and the losses of a few AdamW steps (decay on matrices and embeddings only, as
nn/optim.cpp). Large arrays are base64 of little-endian fp32 ("f32") or bf16 ("bf16", the
autocast logits are bf16; its gradients are rounded to bf16, one more rounding that the
test allows for)."""
import base64
import json
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
torch.set_default_dtype(torch.float32)

L, NH, C, V, T, B = 3, 3, 96, 301, 37, 3
STEPS, LR, BETAS, EPS, WD = 5, 1e-2, (0.9, 0.95), 1e-8, 0.1


def layout():
    """(name, shape, decay) in GPUMix's flat order."""
    out = [("wte", (V, C), True), ("wpe", (T, C), True)]
    for l in range(L):
        h = f"h.{l}."
        out += [
            (h + "ln_1.weight", (C,), False), (h + "ln_1.bias", (C,), False),
            (h + "attn.c_attn.weight", (3 * C, C), True), (h + "attn.c_attn.bias", (3 * C,), False),
            (h + "attn.c_proj.weight", (C, C), True), (h + "attn.c_proj.bias", (C,), False),
            (h + "ln_2.weight", (C,), False), (h + "ln_2.bias", (C,), False),
            (h + "mlp.c_fc.weight", (4 * C, C), True), (h + "mlp.c_fc.bias", (4 * C,), False),
            (h + "mlp.c_proj.weight", (C, 4 * C), True), (h + "mlp.c_proj.bias", (C,), False),
        ]
    out += [("ln_f.weight", (C,), False), ("ln_f.bias", (C,), False)]
    return out


MASK = (1 << 64) - 1


def mix64(x):
    """splitmix64's finaliser, as core/rng.cpp mix64."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def golden_param(i, center):
    """Flat element i: center + a 24-bit uniform in [-0.25, 0.25), exact in double, then
    rounded once to fp32 (here by torch.tensor, in the test by a cast)."""
    return center + ((mix64(i) >> 40) - (1 << 23)) / float(1 << 25)


# Not GPT-2-initialised: every path, biases and norms included, carries signal into the
# gradients. LayerNorm weights around 1, everything else around 0.
params = {}
offset = 0
for name, shape, _ in layout():
    n = math.prod(shape)
    center = 1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight" else 0.0
    values = [golden_param(offset + i, center) for i in range(n)]
    params[name] = torch.tensor(values, dtype=torch.float32).view(shape).requires_grad_()
    offset += n


def forward(p, idx):
    b, t = idx.shape
    x = p["wte"][idx] + p["wpe"][:t]
    hs = C // NH
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for l in range(L):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"].T + p[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(b, t, NH, hs).transpose(1, 2)
        k = k.view(b, t, NH, hs).transpose(1, 2)
        v = v.view(b, t, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, C)
        x = x + y @ p[h + "attn.c_proj.weight"].T + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = F.gelu(m @ p[h + "mlp.c_fc.weight"].T + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ p[h + "mlp.c_proj.weight"].T + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return x @ p["wte"].T


def flat(tensors):
    return torch.cat([t.detach().float().reshape(-1) for t in tensors])


def encode(t, dtype):
    """base64 of a tensor's values as little-endian fp32 or bf16 (round to nearest even)."""
    if dtype == "f32":
        raw = t.float().numpy().astype("<f4").tobytes()
    else:
        raw = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    return {"dtype": dtype, "count": t.numel(), "base64": base64.b64encode(raw).decode()}


tokens = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))
targets[1, 3] = -1  # one ignored position
names = [n for n, _, _ in layout()]
all_params = flat(params[n] for n in names)


def run(autocast):
    """Logits, loss, gradient and AdamW step losses from the parameters above."""
    p = {n: params[n].detach().clone().requires_grad_() for n in names}

    def loss_of(logits):
        return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1), ignore_index=-1)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = forward(p, tokens)
        loss = loss_of(logits)
    loss.backward()
    grads = flat(p[n].grad for n in names)
    decay = [p[n] for n, _, d in layout() if d]
    no_decay = [p[n] for n, _, d in layout() if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss_s = loss_of(forward(p, tokens))
        losses.append(loss_s.item())
        loss_s.backward()
        opt.step()
    print(f"{'bf16 autocast' if autocast else 'fp32'}: logits {logits.dtype}, loss {loss.item():.6f}, "
          f"step losses {[round(x, 5) for x in losses]}")
    return {
        "logits": encode(logits.detach().reshape(-1), "bf16" if autocast else "f32"),
        "loss": loss.item(),
        "grads": encode(grads, "bf16" if autocast else "f32"),
        "step_losses": losses,
    }


check_at = [0, 1, 2, V * C - 1, V * C, all_params.numel() // 2, all_params.numel() - 1]
golden = {
    "source": "tests/nn/make_golden.py, torch " + torch.__version__,
    "config": {"L": L, "NH": NH, "C": C, "V": V, "T": T, "B": B},
    "adamw": {"lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD},
    "tokens": tokens.reshape(-1).tolist(),
    "targets": targets.reshape(-1).tolist(),
    "params_check": {"sum": all_params.double().sum().item(),
                     "at": check_at, "values": [all_params[i].item() for i in check_at]},
    "fp32": run(False),
    "bf16_autocast": run(True),
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_gpt.json")
with open(path, "w") as f:
    json.dump(golden, f, separators=(",", ":"))
print(f"wrote {path}: {all_params.numel()} parameters")
