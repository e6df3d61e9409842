#!/usr/bin/python3
"""Golden fixture for the GPT model (src/wallfacer/model/gpt.h), computed independently in PyTorch.

Builds a tiny model of exactly that architecture in float64 (token embedding, interleaved-pair
rotary embedding by position, pre-norm blocks with LayerNorm, fused QKV with grouped kv heads,
causal softmax attention, output projection, tanh-GELU MLP, final LayerNorm, LM head tied to the
embedding), and writes:
  gpt_golden.json  config, the name/shape/offset of every array, the 3 AdamW-step losses
  gpt_golden.bin   the arrays as little-endian float64: parameters, tokens, targets, logits,
                   loss, and the gradient of every parameter

Run offline with Debian's python3-torch:  /usr/bin/python3 tests/golden/gen_gpt_golden.py
"""
import json
import math
import os
import struct

import torch

torch.manual_seed(1234)
torch.set_default_dtype(torch.float64)

CFG = dict(vocab=257, layers=2, dim=16, heads=4, kv_heads=2, mlp_ratio=4, rope_theta=10000.0,
           batch=2, seq=12, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
           adam_steps=3)
V, L, C, H, HKV = CFG["vocab"], CFG["layers"], CFG["dim"], CFG["heads"], CFG["kv_heads"]
D = C // H
M = CFG["mlp_ratio"] * C
B, T = CFG["batch"], CFG["seq"]


def param_list():
    """(name, shape) in the model's arena order."""
    out = [("wte", (V, C))]
    for l in range(L):
        p = f"h{l}."
        out += [(p + "ln1_w", (C,)), (p + "ln1_b", (C,)), (p + "qkv_w", ((H + 2 * HKV) * D, C)),
                (p + "proj_w", (C, C)), (p + "ln2_w", (C,)), (p + "ln2_b", (C,)),
                (p + "fc_w", (M, C)), (p + "fcproj_w", (C, M))]
    out += [("lnf_w", (C,)), ("lnf_b", (C,))]
    return out


def init_params():
    params = {}
    for name, shape in param_list():
        if name.endswith("ln1_w") or name.endswith("ln2_w") or name == "lnf_w":
            t = 1.0 + 0.1 * torch.randn(shape)
        elif "ln" in name:
            t = 0.1 * torch.randn(shape)
        else:
            t = 0.3 * torch.randn(shape) / math.sqrt(shape[-1]) * 2.0
        params[name] = t.clone().requires_grad_(True)
    return params


def rope(x, pos):
    """x (B, T, h, D): rotate pairs (x[2i], x[2i+1]) by angle pos * theta^(-2i/D)."""
    i = torch.arange(D // 2, dtype=torch.float64)
    freq = CFG["rope_theta"] ** (-2.0 * i / D)
    ang = pos[:, None].double() * freq[None, :]  # (T, D/2)
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack([y0, y1], dim=-1).reshape(x.shape)


def forward(params, tokens, targets):
    pos = torch.arange(T)
    x = params["wte"][tokens]  # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = lambda n: params[f"h{l}.{n}"]
        h = torch.nn.functional.layer_norm(x, (C,), p("ln1_w"), p("ln1_b"), eps=1e-5)
        qkv = h @ p("qkv_w").T  # (B, T, (H + 2 HKV) D)
        q = qkv[..., : H * D].reshape(B, T, H, D)
        k = qkv[..., H * D : (H + HKV) * D].reshape(B, T, HKV, D)
        v = qkv[..., (H + HKV) * D :].reshape(B, T, HKV, D)
        q, k = rope(q, pos), rope(k, pos)
        rep = H // HKV
        k = k.repeat_interleave(rep, dim=2)  # query head h reads kv head h // rep
        v = v.repeat_interleave(rep, dim=2)
        att = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = torch.einsum("bhij,bjhd->bihd", att, v).reshape(B, T, C)
        x = x + o @ p("proj_w").T
        h = torch.nn.functional.layer_norm(x, (C,), p("ln2_w"), p("ln2_b"), eps=1e-5)
        h = torch.nn.functional.gelu(h @ p("fc_w").T, approximate="tanh")
        x = x + h @ p("fcproj_w").T
    x = torch.nn.functional.layer_norm(x, (C,), params["lnf_w"], params["lnf_b"], eps=1e-5)
    logits = x @ params["wte"].T  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    return logits, loss


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    params = init_params()
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    init = {n: t.detach().clone() for n, t in params.items()}

    logits, loss = forward(params, tokens, targets)
    loss.backward()
    grads = {n: t.grad.detach().clone() for n, t in params.items()}

    decay = [params[n] for n, _ in param_list() if "ln" not in n]
    no_decay = [params[n] for n, _ in param_list() if "ln" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": CFG["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=CFG["lr"], betas=(CFG["beta1"], CFG["beta2"]), eps=CFG["eps"])
    losses = []
    for _ in range(CFG["adam_steps"]):
        opt.zero_grad()
        _, l = forward(params, tokens, targets)
        l.backward()
        opt.step()
        losses.append(l.item())

    arrays = [(n, tuple(s), init[n]) for n, s in param_list()]
    arrays += [("tokens", (B, T), tokens.double()), ("targets", (B, T), targets.double()),
               ("logits", (B, T, V), logits.detach()), ("loss", (1,), loss.detach().reshape(1))]
    arrays += [("grad." + n, tuple(s), grads[n]) for n, s in param_list()]
    index, blob, off = [], bytearray(), 0
    for name, shape, t in arrays:
        flat = t.reshape(-1).tolist()
        index.append({"name": name, "shape": list(shape), "offset": off, "size": len(flat)})
        blob += struct.pack("<%dd" % len(flat), *flat)
        off += len(flat)
    with open(os.path.join(here, "gpt_golden.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(here, "gpt_golden.json"), "w") as f:
        json.dump({"config": CFG, "arrays": index, "adam_losses": losses}, f, indent=1)
        f.write("\n")
    print(f"loss {loss.item():.6f}, adam losses {losses}, {off} float64 values")


if __name__ == "__main__":
    main()
