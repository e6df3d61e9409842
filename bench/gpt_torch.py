#!/usr/bin/python3
"""The GPT of src/wallfacer/model/gpt.h in PyTorch (CPU), timed over a few AdamW steps on random
byte tokens. Prints one line: `torch tokens/s X`. Usage:
  python3 bench/gpt_torch.py --layers 4 --dim 256 --heads 4 --seq 4096 --steps 3 --threads 2 \
      [--dtype fp32|bf16] [--attention sdpa|naive] [--compile] [--json]
--dtype bf16 runs the forward and backward under bf16 autocast (fp32 master weights and AdamW
state, as wallfacer's bf16); --attention sdpa (default) uses scaled_dot_product_attention (PyTorch's
fused CPU flash attention), naive materialises the S x S scores; --compile wraps the model in
torch.compile; --json adds a last line, a JSON object with the model, the tokens/s, torch's version
and the CPU capability its kernels use.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, H, HKV, M):
        super().__init__()
        self.H, self.HKV, self.D = H, HKV, C // H
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, (H + 2 * HKV) * self.D, bias=False)
        self.proj = torch.nn.Linear(C, C, bias=False)
        self.fc = torch.nn.Linear(C, M, bias=False)
        self.fcproj = torch.nn.Linear(M, C, bias=False)

    def forward(self, x, cos, sin, mask, sdpa):
        B, T, C = x.shape
        H, HKV, D = self.H, self.HKV, self.D
        qkv = self.qkv(self.ln1(x))
        q = qkv[..., : H * D].reshape(B, T, H, D)
        k = qkv[..., H * D : (H + HKV) * D].reshape(B, T, HKV, D)
        v = qkv[..., (H + HKV) * D :].reshape(B, T, HKV, D)

        def rope(t):
            t0, t1 = t[..., 0::2], t[..., 1::2]
            return torch.stack([t0 * cos - t1 * sin, t0 * sin + t1 * cos], -1).reshape(t.shape)

        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // HKV, 2)
        v = v.repeat_interleave(H // HKV, 2)
        if sdpa:
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            o = o.transpose(1, 2).reshape(B, T, C)
        else:
            att = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            o = torch.einsum("bhij,bjhd->bihd", att, v).reshape(B, T, C)
        x = x + self.proj(o)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, V, L, C, H, HKV, M, sdpa):
        super().__init__()
        self.sdpa = sdpa
        self.wte = torch.nn.Embedding(V, C)
        self.blocks = torch.nn.ModuleList(Block(C, H, HKV, M) for _ in range(L))
        self.lnf = torch.nn.LayerNorm(C)
        self.D = C // H
        for p in self.parameters():  # GPT-2 style, like wallfacer's initialisation
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        i = torch.arange(self.D // 2, dtype=torch.float32)
        ang = torch.arange(T, dtype=torch.float32)[:, None] * (10000.0 ** (-2.0 * i / self.D))
        cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
        mask = None if self.sdpa else torch.ones(T, T, dtype=torch.bool).triu(1)
        x = self.wte(tokens)
        for b in self.blocks:
            x = b(x, cos, sin, mask, self.sdpa)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def train_tokens_per_s(loss_of, params, vocab, batch, seq, steps, bf16, **adamw):
    """Times steps + 1 training steps (the first warms up) of loss_of(inputs, targets), a scalar
    loss, on random tokens below vocab: forward (under bf16 autocast when bf16), backward and
    torch.optim.AdamW(params, **adamw); prints each step and returns the tokens/s of the timed
    steps."""
    opt = torch.optim.AdamW(params, **adamw)
    times = []
    for s in range(steps + 1):
        tok = torch.randint(0, vocab, (batch, seq + 1))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(tok[:, :-1], tok[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        print(f"torch step {s} loss {loss.item():.4f} {times[-1]:.2f} s", flush=True)
    return batch * seq * steps / sum(times[1:])


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=4, dim=256, heads=4, kv_heads=4, seq=4096, batch=1, steps=3,
                     threads=2).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--attention", choices=["sdpa", "naive"], default="sdpa")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {a.dtype}, attention {a.attention}"
          f"{', compiled' if a.compile else ''}, cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}", flush=True)
    model = Gpt(257, a.layers, a.dim, a.heads, a.kv_heads, 4 * a.dim, a.attention == "sdpa")
    run = torch.compile(model) if a.compile else model
    tps = train_tokens_per_s(run, model.parameters(), 257, a.batch, a.seq, a.steps,
                             a.dtype == "bf16", lr=1e-3)
    print(f"torch tokens/s {tps:.1f}")
    if a.json:
        print(json.dumps({"tool": "torch", "torch_version": torch.__version__,
                          "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "layers": a.layers, "dim": a.dim, "heads": a.heads,
                          "kv_heads": a.kv_heads, "seq": a.seq, "batch": a.batch,
                          "steps": a.steps, "threads": a.threads, "dtype": a.dtype,
                          "attention": a.attention, "compile": a.compile, "tokens_per_s": tps}))


if __name__ == "__main__":
    main()
