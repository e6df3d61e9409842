#!/usr/bin/python3
"""Golden fixture for the DiT model (src/wallfacer/model/dit.h), computed independently in PyTorch.

Builds a tiny video DiT of exactly that architecture in float64: p x p patches of a
(frames, size, size, channels) clip in frame-major token order, a linear patch embedding plus fixed
3-D sinusoidal positions, a sinusoidal timestep embedding through a SiLU MLP plus a class label
embedding, blocks with adaLN-Zero modulation (LayerNorm without affine, non-causal softmax
attention, tanh-GELU MLP, gated residuals), a final adaLN layer and a linear unpatchify. The
objective is rectified flow: x_t = (1 - t) x0 + t noise, target v = noise - x0, mean squared error.

Writes:
  dit_golden.json  config and the name/shape/offset of every array
  dit_golden.bin   the arrays as little-endian float64: parameters, x0, noise, t, labels, the
                   prediction (B, frames, size, size, channels), the loss and every gradient

Run offline with Debian's python3-torch:  /usr/bin/python3 tests/golden/gen_dit_golden.py
"""
import json
import math
import os
import struct

import torch
import torch.nn.functional as Fn

torch.manual_seed(4321)
torch.set_default_dtype(torch.float64)

CFG = dict(channels=3, patch=2, frames=3, size=4, layers=2, dim=12, heads=2, mlp_ratio=2,
           freq_dim=8, classes=3, batch=2)
CH, P, FR, S = CFG["channels"], CFG["patch"], CFG["frames"], CFG["size"]
L, C, H, F, K, B = CFG["layers"], CFG["dim"], CFG["heads"], CFG["freq_dim"], CFG["classes"], CFG["batch"]
M = CFG["mlp_ratio"] * C
G = S // P
T = FR * G * G
PD = P * P * CH
D = C // H


def param_list():
    """(name, shape) in the model's arena order."""
    out = [("patch_w", (C, PD)), ("patch_b", (C,)), ("t1_w", (C, F)), ("t1_b", (C,)),
           ("t2_w", (C, C)), ("t2_b", (C,)), ("y_emb", (K, C))]
    for l in range(L):
        p = f"layers.{l}."
        out += [(p + "ada_w", (6 * C, C)), (p + "ada_b", (6 * C,)), (p + "qkv_w", (3 * C, C)),
                (p + "qkv_b", (3 * C,)), (p + "proj_w", (C, C)), (p + "proj_b", (C,)),
                (p + "fc1_w", (M, C)), (p + "fc1_b", (M,)), (p + "fc2_w", (C, M)),
                (p + "fc2_b", (C,))]
    out += [("final_ada_w", (2 * C, C)), ("final_ada_b", (2 * C,)), ("out_w", (PD, C)),
            ("out_b", (PD,))]
    return out


def init_params():
    # Random (not zero) modulation and output layers, so that every gradient is exercised.
    params = {}
    for name, shape in param_list():
        fan_in = shape[-1] if len(shape) == 2 else 4
        params[name] = (0.5 * torch.randn(shape) / math.sqrt(fan_in)).requires_grad_(True)
    return params


def sincos(coord, half):
    w = torch.pow(torch.tensor(10000.0), -torch.arange(half, dtype=torch.float64) / half)
    a = coord[:, None].double() * w[None, :]
    return torch.cat([torch.sin(a), torch.cos(a)], dim=1)


def pos_embedding():
    half = C // 6
    n = torch.arange(T)
    f, gy, gx = n // (G * G), (n // G) % G, n % G
    pe = torch.zeros(T, C)
    pe[:, : 6 * half] = torch.cat([sincos(f, half), sincos(gy, half), sincos(gx, half)], dim=1)
    return pe


def timestep_features(t):
    half = F // 2
    w = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half)
    a = 1000.0 * t[:, None] * w[None, :]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=1)


def patchify(clip):
    # (B, FR, S, S, CH) -> (B, T, PD), patch values ordered (row, column, channel)
    x = clip.reshape(B, FR, G, P, G, P, CH).permute(0, 1, 2, 4, 3, 5, 6)
    return x.reshape(B, T, PD)


def unpatchify(x):
    x = x.reshape(B, FR, G, G, P, P, CH).permute(0, 1, 2, 4, 3, 5, 6)
    return x.reshape(B, FR, S, S, CH)


def ln(x):
    return Fn.layer_norm(x, (C,), eps=1e-5)


def model(prm, xt, t, y):
    x = patchify(xt) @ prm["patch_w"].T + prm["patch_b"] + pos_embedding()[None]
    c = Fn.silu(timestep_features(t) @ prm["t1_w"].T + prm["t1_b"]) @ prm["t2_w"].T + prm["t2_b"]
    c = c + prm["y_emb"][y]
    sc = Fn.silu(c)
    for l in range(L):
        p = f"layers.{l}."
        mod = (sc @ prm[p + "ada_w"].T + prm[p + "ada_b"])[:, None, :]
        sh1, s1, g1, sh2, s2, g2 = mod.chunk(6, dim=2)
        h = ln(x) * (1 + s1) + sh1
        qkv = h @ prm[p + "qkv_w"].T + prm[p + "qkv_b"]
        q, k, v = [z.reshape(B, T, H, D).transpose(1, 2) for z in qkv.split(C, dim=2)]
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D), dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + g1 * (o @ prm[p + "proj_w"].T + prm[p + "proj_b"])
        h = ln(x) * (1 + s2) + sh2
        m = Fn.gelu(h @ prm[p + "fc1_w"].T + prm[p + "fc1_b"], approximate="tanh")
        x = x + g2 * (m @ prm[p + "fc2_w"].T + prm[p + "fc2_b"])
    mod = (sc @ prm["final_ada_w"].T + prm["final_ada_b"])[:, None, :]
    sh, s = mod.chunk(2, dim=2)
    out = (ln(x) * (1 + s) + sh) @ prm["out_w"].T + prm["out_b"]
    return unpatchify(out)


def main():
    prm = init_params()
    x0 = torch.rand(B, FR, S, S, CH) * 2 - 1
    noise = torch.randn(B, FR, S, S, CH)
    t = torch.rand(B)
    y = torch.randint(0, K, (B,))
    tb = t[:, None, None, None, None]
    xt = (1 - tb) * x0 + tb * noise
    pred = model(prm, xt, t, y)
    loss = ((pred - (noise - x0)) ** 2).mean()
    loss.backward()

    arrays = [(n, prm[n].detach()) for n, _ in param_list()]
    arrays += [("x0", x0), ("noise", noise), ("t", t), ("labels", y.double()),
               ("pred", pred.detach()), ("loss", loss.detach().reshape(1))]
    arrays += [("grad." + n, prm[n].grad) for n, _ in param_list()]
    here = os.path.dirname(os.path.abspath(__file__))
    meta = {"config": CFG, "arrays": []}
    off = 0
    with open(os.path.join(here, "dit_golden.bin"), "wb") as f:
        for name, a in arrays:
            flat = a.reshape(-1).tolist()
            f.write(struct.pack("<%dd" % len(flat), *flat))
            meta["arrays"].append({"name": name, "shape": list(a.shape), "offset": off,
                                   "size": len(flat)})
            off += len(flat)
    with open(os.path.join(here, "dit_golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"loss {loss.item():.6f}, {off} values")


if __name__ == "__main__":
    main()
