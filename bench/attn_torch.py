#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention timed on the shapes of `wallfacer bench kernel`, with
the same FLOP counts (forward 4 * B * H * Sq * Sk * D, halved for a causal mask; backward 2.5 times
the forward), so the GFLOP/s of the two tools compare directly. Usage:
  python3 bench/attn_torch.py --seq 4096 --heads 8 --head-dim 64 --threads 2 [--dtype fp32|bf16]
      [--causal] [--iters N] [--json]
Prints `torch attention DTYPE fwd X GFLOP/s bwd Y GFLOP/s`, or with --json one JSON object (the
shape, the rates, torch's version and the CPU capability its kernels use).
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    shape = (a.batch, a.heads, a.seq, a.head_dim)
    q, k, v = (torch.randn(shape, dtype=dt, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, dtype=dt)
    fwd_flops = 4.0 * a.batch * a.heads * a.seq * a.seq * a.head_dim * (0.5 if a.causal else 1.0)
    bwd_flops = 2.5 * fwd_flops

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)

    o = fwd()  # warm-up
    o.backward(dout)
    tf = tb = float("inf")
    for _ in range(a.iters):  # best of iters, as wallfacer's bench
        q.grad = k.grad = v.grad = None
        t0 = time.perf_counter()
        o = fwd()
        t1 = time.perf_counter()
        o.backward(dout)
        t2 = time.perf_counter()
        tf, tb = min(tf, t1 - t0), min(tb, t2 - t1)
    if a.json:
        print(json.dumps({"tool": "torch", "torch_version": torch.__version__,
                          "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "seq": a.seq, "heads": a.heads, "head_dim": a.head_dim,
                          "batch": a.batch, "causal": a.causal, "dtype": a.dtype,
                          "threads": a.threads, "iters": a.iters,
                          "fwd_ms": tf * 1e3, "bwd_ms": tb * 1e3,
                          "fwd_gflops": fwd_flops / tf / 1e9, "bwd_gflops": bwd_flops / tb / 1e9}))
        return
    print(f"torch {torch.__version__} attention {a.dtype} seq {a.seq} heads {a.heads} head_dim "
          f"{a.head_dim}{' causal' if a.causal else ''}: fwd {fwd_flops / tf / 1e9:.1f} GFLOP/s "
          f"bwd {bwd_flops / tb / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
