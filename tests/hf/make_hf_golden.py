#!/usr/bin/env python3
"""The oracle of GPUMix's Hugging Face GPT-2 import and export (tests/hf/test_hf.cpp).

Run by hand with Debian's Python (apt-get install python3-torch python3-regex), not in CI;
no transformers or safetensors package is needed (neither is in Debian 12):

    /usr/bin/python3 tests/hf/make_hf_golden.py
        writes tests/hf/golden/: a small GPT-2 as a Hugging Face folder (model.safetensors,
        config.json, vocab.json, merges.txt) and golden.json, its logits on a fixed batch and
        the GPT-2 tokenisation of a few tricky strings.

    /usr/bin/python3 tests/hf/make_hf_golden.py --check DIR LOGITS.json
        loads an exported folder (`gpumix export`) in plain PyTorch and prints the largest
        |logit difference| against GPUMix's logits for the same tokens (LOGITS.json from
        `gpumix generate --dump-logits`).

The model is GPT2LMHeadModel written out in PyTorch: HF's parameter names, Conv1D weights
stored (in, out) and applied as x @ W + b, c_attn's output split [q | k | v] with heads
contiguous, attention scaled by 1/sqrt(head size), gelu_new (the tanh approximation),
LayerNorm eps 1e-5, the LM head tied to wte. The tokenizer is GPT-2's byte-level BPE:
bytes_to_unicode, the pre-tokenizer regex over Unicode (the `regex` module, as GPT-2's
encoder.py) and merges applied by rank (encoder.py's bpe()); <|endoftext|> is split out
first, as GPT2Tokenizer does with its special token. Merges are learned here on a small
corpus, and ids follow GPT-2's order (the bytes in bytes_to_unicode order first), which is
not GPUMix's byte order: the import must keep the file's ids."""
import json
import math
import os
import struct
import sys
from collections import Counter

import regex
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
EOT = "<|endoftext|>"
PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

L, NH, C, T = 2, 4, 32, 16
MERGES = 160

CORPUS = (
    "Don't panic. I'm sure we'll find it; they've said you're right and he'd agree, it's fine.\n"
    "The year 2024 had 365 days, and 12345 is not 3.14159 - nor is it 1,000,000!\n"
    "  Two spaces,\tone tab,   three spaces.\n\n\nNew lines.\n"
    "Héllo wörld! Naïve café, Zoë and Ünïcödé; déjà vu. Straße, ﬁne, Ελληνικά, русский текст.\n"
    "東京は大きい。 😀🎉 emoji 👍🏽 and symbols ©®™ — dashes – and “quotes” «guillemets».\n"
    "don't DON'T I'M we'll WE'LL they've 'quoted' rock'n'roll o'clock\n"
) * 3

TRICKY = [
    "  two spaces",
    "don't",
    "I'm",
    "12345",
    "héllo wörld",
    "emoji 😀🎉!",
    "trailing spaces   ",
    "newlines\n\n\nend\n",
    "tab\tand\u00a0nbsp\u3000ideographic space",
    "DON'T we'll WE'LL",
    "x<|endoftext|>y <|endoftext|>",
    "mixed123abc 3.14 1,000",
    "Ελληνικά русский 東京",
    "   ",
    "\n",
    "",
    CORPUS[:400],
]


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_ENCODER = bytes_to_unicode()


def to_token(piece):
    return "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))


def train_merges(text, count):
    """Plain BPE on the regex's pre-tokens: the most frequent adjacent pair first (ties:
    the smallest pair), never making a token that exists already."""
    words = Counter(tuple(to_token(p)) for part in text.split(EOT) for p in PAT.findall(part))
    known = set(BYTE_ENCODER.values())
    merges = []
    while len(merges) < count:
        pairs = Counter()
        for w, f in words.items():
            for a, b in zip(w, w[1:]):
                if a + b not in known:
                    pairs[(a, b)] += f
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        known.add(best[0] + best[1])
        merged = Counter()
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += f
        words = merged
    return merges


class Gpt2Encoder:
    """encoder.py's Encoder, with GPT2Tokenizer's split on the special token."""

    def __init__(self, encoder, merges):
        self.encoder = encoder
        self.ranks = {m: r for r, m in enumerate(merges)}

    def bpe(self, token):
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
        return word

    def encode(self, text):
        ids = []
        for k, part in enumerate(text.split(EOT)):
            if k:
                ids.append(self.encoder[EOT])
            for piece in PAT.findall(part):
                ids.extend(self.encoder[t] for t in self.bpe(to_token(piece)))
        return ids


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def forward(p, idx, n_layer, n_head):
    """GPT2LMHeadModel's forward in eval mode, on a dict of HF-named tensors."""
    b, t = idx.shape
    wte = p["transformer.wte.weight"]
    c = wte.shape[1]
    hs = c // n_head
    x = wte[idx] + p["transformer.wpe.weight"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for layer in range(n_layer):
        h = f"transformer.h.{layer}."
        a = F.layer_norm(x, (c,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # Conv1D: (in, out)
        q, k, v = (z.view(b, t, n_head, hs).transpose(1, 2) for z in qkv.split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (c,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = gelu_new(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (c,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps=1e-5)
    return x @ wte.T  # lm_head, tied


def hf_shapes(n_layer, c, v, t):
    shapes = {"transformer.wte.weight": (v, c), "transformer.wpe.weight": (t, c)}
    for layer in range(n_layer):
        h = f"transformer.h.{layer}."
        shapes.update({
            h + "ln_1.weight": (c,), h + "ln_1.bias": (c,),
            h + "attn.c_attn.weight": (c, 3 * c), h + "attn.c_attn.bias": (3 * c,),
            h + "attn.c_proj.weight": (c, c), h + "attn.c_proj.bias": (c,),
            h + "ln_2.weight": (c,), h + "ln_2.bias": (c,),
            h + "mlp.c_fc.weight": (c, 4 * c), h + "mlp.c_fc.bias": (4 * c,),
            h + "mlp.c_proj.weight": (4 * c, c), h + "mlp.c_proj.bias": (c,),
        })
    shapes.update({"transformer.ln_f.weight": (c,), "transformer.ln_f.bias": (c,)})
    return shapes


def write_safetensors(path, tensors):
    """The format by hand: u64 header length, JSON header (padded to 8 bytes), raw F32 data.
    Tensors go in name order, as the reference implementation sorts them."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        if info["dtype"] == "F32":
            t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32)
        elif info["dtype"] == "BF16":
            t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.bfloat16).to(torch.float32)
        else:
            raise SystemExit(f"{path}: tensor {name} is {info['dtype']}; this script reads F32 and BF16")
        out[name] = t.reshape(info["shape"])
    return out


def make_golden():
    torch.manual_seed(2024)
    merges = train_merges(CORPUS, MERGES)
    # GPT-2's ids: the bytes in bytes_to_unicode order, then the merges by rank, then EOT.
    encoder = {ch: i for i, ch in enumerate(BYTE_ENCODER.values())}
    for a, b in merges:
        encoder[a + b] = len(encoder)
    encoder[EOT] = len(encoder)
    V = len(encoder)
    assert V == 256 + len(merges) + 1, "a merge made an existing token"
    tok = Gpt2Encoder(encoder, merges)

    # Random values (not GPT-2's initialisation), so biases and norms carry signal too.
    params = {}
    for name, shape in hf_shapes(L, C, V, T).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            params[name] = 1.0 + 0.1 * torch.randn(shape)
        else:
            params[name] = 0.2 * torch.randn(shape)
    os.makedirs(GOLDEN, exist_ok=True)
    write_safetensors(os.path.join(GOLDEN, "model.safetensors"), params)
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
        "n_layer": L, "n_head": NH, "n_embd": C, "n_positions": T, "n_ctx": T, "vocab_size": V,
        "layer_norm_epsilon": 1e-5, "bos_token_id": encoder[EOT], "eos_token_id": encoder[EOT],
        "tie_word_embeddings": True, "torch_dtype": "float32",
    }
    with open(os.path.join(GOLDEN, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # As GPT2Tokenizer.save_vocabulary writes them.
    with open(os.path.join(GOLDEN, "vocab.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(encoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    with open(os.path.join(GOLDEN, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    # Logits of a fixed batch (computed in float64 from the fp32 weights: the reference
    # carries no rounding of its own), and the tokenisations.
    B = 3
    tokens = torch.randint(0, V, (B, T))
    tokens[2, :] = torch.tensor(tok.encode(CORPUS)[:T])
    with torch.no_grad():
        logits = forward({k: v.double() for k, v in params.items()}, tokens, L, NH)
    golden = {
        "source": "tests/hf/make_hf_golden.py, torch " + torch.__version__ + ", regex " + regex.__version__,
        "B": B, "T": T,
        "tokens": tokens.reshape(-1).tolist(),
        "logits": [float("%.9g" % x) for x in logits.reshape(-1).tolist()],
        "tokenizations": [{"text": s, "ids": tok.encode(s)} for s in TRICKY],
    }
    with open(os.path.join(GOLDEN, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {GOLDEN}: vocab {V} ({len(merges)} merges), {sum(p.numel() for p in params.values())} "
          f"parameters, {len(TRICKY)} tokenisations, logits of {B}x{T} tokens "
          f"(max |logit| {logits.abs().max().item():.3f})")


def check(folder, logits_path):
    """An exported folder in plain PyTorch against GPUMix's logits of the same tokens."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    params = read_safetensors(os.path.join(folder, "model.safetensors"))
    for name, shape in hf_shapes(config["n_layer"], config["n_embd"], config["vocab_size"], config["n_positions"]).items():
        if tuple(params[name].shape) != shape:
            raise SystemExit(f"{name}: shape {tuple(params[name].shape)}, expected {shape}")
    with open(logits_path) as f:
        got = json.load(f)
    # The folder's tokenizer, read as GPT-2 reads it, must encode the prompt as GPUMix did.
    with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split(" ")) for line in f.read().split("\n")[1:] if line]
    ids = Gpt2Encoder(encoder, merges).encode(got["prompt"])[:len(got["tokens"])] or [encoder[EOT]]
    if ids != got["tokens"]:
        raise SystemExit(f"the prompt {got['prompt']!r} encodes as {ids} here but as {got['tokens']} in GPUMix")
    tokens = torch.tensor(got["tokens"]).reshape(1, -1)
    want = torch.tensor(got["logits"], dtype=torch.float64).reshape(1, tokens.shape[1], -1)
    with torch.no_grad():
        ours = forward({k: v.double() for k, v in params.items()}, tokens, config["n_layer"], config["n_head"])
    diff = (ours - want).abs().max().item()
    print(f"{folder}: {config['n_layer']} layers, n_embd {config['n_embd']}, vocab {config['vocab_size']}, "
          f"{tokens.shape[1]} tokens (encoded alike): max |logit| {want.abs().max().item():.4f}, "
          f"max |PyTorch - GPUMix| {diff:.3e}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 1:
        make_golden()
    else:
        raise SystemExit(__doc__)
