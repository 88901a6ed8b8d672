#!/usr/bin/env python3
"""Writes tests/nn/golden_gpt.json: a tiny GPT run in PyTorch, the oracle of GPUMix's
golden test (tests/nn/test_golden.cpp).

Run by hand with Debian's PyTorch (apt-get install python3-torch), not in CI:
    /usr/bin/python3 tests/nn/make_golden.py

The model mirrors nn/gpt.cpp exactly: pre-norm blocks, fused qkv projection laid out
[q | k | v], causal attention with 1/sqrt(head size) scaling, tanh GELU, LayerNorm eps 1e-5,
final LayerNorm, LM head tied to the token embedding. Parameters are drawn here and stored
in GPUMix's flat order (nn/gpt.cpp gpt_param_layout), so both sides start from the same
numbers. The file holds: the config, tokens and targets, the flat parameters, the logits,
the mean loss, the flat gradient of that loss, and the losses of a few AdamW steps (decay on
matrices and embeddings only, as nn/optim.cpp)."""
import json
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
torch.set_default_dtype(torch.float32)

L, NH, C, V, T, B = 2, 2, 16, 37, 8, 2
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


# Random (not GPT-2-initialised) values, so that every path, biases and norms included,
# carries signal into the gradients.
params = {}
for name, shape, _ in layout():
    if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
        params[name] = (1.0 + 0.1 * torch.randn(shape)).requires_grad_()
    else:
        params[name] = (0.1 * torch.randn(shape)).requires_grad_()


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
    # fp32 values need at most 9 significant digits to round-trip.
    return [float("%.9g" % v) for t in tensors for v in t.detach().reshape(-1).tolist()]


tokens = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))
targets[1, 3] = -1  # one ignored position

names = [n for n, _, _ in layout()]
flat_params = flat(params[n] for n in names)
logits = forward(params, tokens)
loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
loss.backward()
flat_grads = flat(params[n].grad for n in names)

decay = [params[n] for n, _, d in layout() if d]
no_decay = [params[n] for n, _, d in layout() if not d]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                         {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
losses = []
for step in range(STEPS):
    opt.zero_grad()
    loss_s = F.cross_entropy(forward(params, tokens).view(-1, V), targets.view(-1), ignore_index=-1)
    losses.append(loss_s.item())
    loss_s.backward()
    opt.step()

golden = {
    "source": "tests/nn/make_golden.py, torch " + torch.__version__,
    "config": {"L": L, "NH": NH, "C": C, "V": V, "T": T, "B": B},
    "adamw": {"lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD},
    "tokens": tokens.reshape(-1).tolist(),
    "targets": targets.reshape(-1).tolist(),
    "params": flat_params,
    "logits": flat([logits]),
    "loss": loss.item(),
    "grads": flat_grads,
    "step_losses": losses,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_gpt.json")
with open(path, "w") as f:
    json.dump(golden, f, separators=(",", ":"))
print(f"wrote {path}: {len(flat_params)} parameters, loss {loss.item():.6f}, "
      f"step losses {[round(x, 5) for x in losses]}")
