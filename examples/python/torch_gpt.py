"""A small PyTorch GPT whose attention layers run wallfacer's exact distributed attention.

Every rank holds the rows of each sequence that wallfacer.torch.local_positions gives it (its
sequence-parallel share), runs the model on them, and the attention layers see the whole sequence
through wallfacer.torch.attention. The gradients of all ranks are summed, so every rank takes the
same optimizer step as one process on whole sequences would.

    mpirun -np 4 python3 examples/python/torch_gpt.py --strategy wallfacer --teams 2
    python3 examples/python/torch_gpt.py --reference      # plain PyTorch attention, one process

Trains --steps steps on the token shards of --data (`make demo` prepares data/kjv) and prints the
loss of each step; the two commands print the same losses to 1e-4 (fp32).
"""

import argparse
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

import wallfacer
import wallfacer.torch


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim)
        self.proj = nn.Linear(dim, dim)
        self.fc, self.fc_out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, attend):
        b, n, _ = x.shape
        h, hk, d = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.qkv(self.norm1(x)).split([h * d, hk * d, hk * d], dim=-1)
        o = attend(q.reshape(b, n, h, d), k.reshape(b, n, hk, d), v.reshape(b, n, hk, d))
        x = x + self.proj(o.reshape(b, n, h * d))
        return x + self.fc_out(F.gelu(self.fc(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, dim, heads, kv_heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        for p in self.parameters():  # small weights: the first loss near log(vocab)
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, positions, attend):
        """Logits of `tokens` (batch, n) at global `positions` (n)."""
        x = self.tok(tokens) + self.pos(positions)[None]
        for block in self.blocks:
            x = block(x, attend)
        return self.norm(x) @ self.tok.weight.T  # the LM head shares the embedding


def reference_attention(q, k, v):
    """Causal attention on the whole sequence in plain PyTorch (one process)."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[3])
    n = q.shape[1]
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf)
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), v)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/kjv", help="folder with train.bin (wallfacer prepare)")
    p.add_argument("--strategy", default="wallfacer",
                   help="ring, zigzag, ulysses or wallfacer (default)")
    p.add_argument("--teams", type=int, default=1, help="C of wallfacer (C^2 divides the ranks)")
    p.add_argument("--ulysses", type=int, default=1, help="Ulysses degree of a ring hybrid")
    p.add_argument("--reference", action="store_true",
                   help="plain PyTorch attention on whole sequences (one process)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seq", type=int, default=256, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=2, help="sequences per step")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def main():
    args = parse_args()
    world = MPI.COMM_WORLD
    P, rank = world.Get_size(), world.Get_rank()
    if args.reference and P != 1:
        raise ValueError(f"--reference runs on one process, not {P}; drop mpirun or --reference")
    for name in ("steps", "seq", "batch", "layers", "dim", "heads", "kv_heads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} is {getattr(args, name)}; "
                             "it must be at least 1")
    if args.dim % args.heads or args.heads % args.kv_heads:
        raise ValueError(f"--dim {args.dim} must be a multiple of --heads {args.heads}, and "
                         f"--heads a multiple of --kv-heads {args.kv_heads}")
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    torch.set_num_threads(1)
    tokens, vocab = wallfacer.load_tokens(f"{args.data}/train.bin")
    if len(tokens) <= args.seq + 1:
        raise ValueError(f"{args.data}/train.bin holds {len(tokens)} tokens; --seq {args.seq} "
                         "needs more")
    model = GPT(vocab, args.seq, args.layers, args.dim, args.heads, args.kv_heads)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)

    if args.reference:
        positions = np.arange(args.seq)

        def attend(q, k, v):
            return reference_attention(q, k, v)
    else:
        # This rank's rows, in the layout of the attention with the same keywords: checked
        # (ValueError with the CLI's message) before any communication.
        layout = dict(strategy=args.strategy, teams=args.teams, ulysses=args.ulysses, causal=True)
        positions = wallfacer.torch.local_positions(args.seq, **layout)

        def attend(q, k, v):
            return wallfacer.torch.attention(q, k, v, **layout)
    pos = torch.from_numpy(positions)
    rng = np.random.default_rng(args.seed)  # the same windows on every rank
    tokens_per_step = args.batch * args.seq
    if rank == 0:
        mode = "reference (plain PyTorch attention)" if args.reference else (
            f"{args.strategy} teams={args.teams} ulysses={args.ulysses} on {P} ranks")
        print(f"torch_gpt: {sum(p.numel() for p in model.parameters())} parameters, "
              f"seq {args.seq}, batch {args.batch}, {mode}", flush=True)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, len(tokens) - args.seq - 1, size=args.batch)
        window = np.stack([tokens[s:s + args.seq + 1] for s in starts]).astype(np.int64)
        x = torch.from_numpy(window[:, :-1][:, positions])
        y = torch.from_numpy(window[:, 1:][:, positions])
        logits = model(x, pos, attend)
        # This rank's share of the batch's mean loss: the sum over ranks is the mean.
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1), reduction="sum")
        loss = loss / tokens_per_step
        opt.zero_grad()
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads]).double().numpy()
        world.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        offset = 0
        for g in grads:
            g.copy_(torch.from_numpy(flat[offset:offset + g.numel()]).reshape(g.shape))
            offset += g.numel()
        opt.step()
        total = world.allreduce(loss.item(), op=MPI.SUM)
        if rank == 0:
            elapsed = time.perf_counter() - start
            print(f"step {step} loss {total:.6f} tokens/s {step * tokens_per_step / elapsed:.0f}",
                  flush=True)


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TypeError) as e:
        # Bad input: every rank sees it (the checks are the same everywhere); one line, exit 2.
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"torch_gpt: error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
