"""wallfacer.torch.decode_attention: new query rows against a KV cache sharded by position over the
ranks, against float64 PyTorch attention over the whole cache in one process. Shards of uneven
lengths, in scattered positions (one rank's shard empty on 3+ ranks), grouped-query (8 heads, 4
key/value heads) and multi-head; a one-row decode step after the token's key and value joined one
shard; three new rows with positions (causal among them); bfloat16 inputs; bad arguments.
Prints "decode: all N checks ok on P ranks" when every rank passed.

    mpirun -np 4 python3 tests/python/test_decode.py
"""

import math
import sys

import torch
from mpi4py import MPI

import wallfacer
import wallfacer.torch as wft

world = MPI.COMM_WORLD
P, rank = world.Get_size(), world.Get_rank()
wallfacer.set_timeout(60)
TOL = 32 * 1.1920929e-7  # fp32 output, relative to the largest reference magnitude (numerics.md)
failures, checked = [], 0


def expect(ok, what):
    global checked
    checked += 1
    if not ok:
        failures.append(what)


def reference(q, k, v, qp, kp):
    """float64 attention of q over all of k, v, a row seeing the keys at or before it."""
    group = q.shape[2] // k.shape[2]
    kk, vv = (t.double().repeat_interleave(group, dim=2) for t in (k, v))
    s = torch.einsum("brhd,bshd->bhrs", q.double(), kk) / math.sqrt(q.shape[3])
    s = s.masked_fill(~(kp[None, :] <= qp[:, None]), -math.inf)
    return torch.einsum("bhrs,bshd->brhd", torch.softmax(s, -1), vv)


def owners(n):
    """The rank each of n cached positions lives on: scattered, uneven, and rank 1 empty when
    P > 2."""
    gen = torch.Generator().manual_seed(3)
    ranks = [r for r in range(P) if not (P > 2 and r == 1)]
    return torch.tensor(ranks)[torch.randint(len(ranks), (n,), generator=gen)]


for H, Hkv in ((8, 4), (4, 4)):
    B, D, N = 2, 16, 53
    gen = torch.Generator().manual_seed(11 + H)
    k, v = (torch.rand(B, N + 3, Hkv, D, generator=gen, dtype=torch.float64) * 2 - 1
            for _ in range(2))
    q = torch.rand(B, 3, H, D, generator=gen, dtype=torch.float64) * 2 - 1
    own = torch.cat([owners(N), torch.tensor([0, P - 1, P // 2])])  # new rows: balance-like
    # A decode step: position N's query over positions 0..N (its key already in a shard).
    mine = (own[:N + 1] == rank).nonzero().flatten()
    o = wft.decode_attention(q[:, :1].float(), k[:, mine].float(), v[:, mine].float())
    ref = reference(q[:, :1], k[:, :N + 1], v[:, :N + 1], torch.tensor([N]), torch.arange(N + 1))
    err = (o.double() - ref).abs().max().item() / ref.abs().max().item()
    expect(err <= TOL, f"H={H}/{Hkv}: one row, relative error {err:.3g}")
    # Three new rows at N..N+2, their keys on three ranks: causal among them by position.
    mine = (own == rank).nonzero().flatten()
    pos = torch.arange(N + 3)
    o, lse = wft.decode_attention(q.float(), k[:, mine].float(), v[:, mine].float(),
                                  q_positions=pos[N:], k_positions=pos[mine], return_lse=True)
    ref = reference(q, k, v, pos[N:], pos)
    err = (o.double() - ref).abs().max().item() / ref.abs().max().item()
    expect(err <= TOL, f"H={H}/{Hkv}: three rows with positions, relative error {err:.3g}")
    expect(lse.shape == (B, H, 3) and bool(torch.isfinite(lse).all()), "lse shape or values")
    # bfloat16 inputs: the result in bfloat16, within its rounding of the fp32 result.
    ob = wft.decode_attention(q.bfloat16(), k[:, mine].bfloat16(), v[:, mine].bfloat16(),
                              q_positions=pos[N:], k_positions=pos[mine])
    err = (ob.double() - ref).abs().max().item() / ref.abs().max().item()
    expect(ob.dtype == torch.bfloat16 and err <= 3e-2, f"H={H}/{Hkv}: bf16 error {err:.3g}")
    # Every rank holds the same result.
    same = world.allgather(o.numpy().tobytes())
    expect(all(s == same[0] for s in same), f"H={H}/{Hkv}: results differ between ranks")


def raises(kind, f, part):
    global checked
    checked += 1
    try:
        f()
    except kind as e:
        if part not in str(e):
            failures.append(f"message '{e}' lacks '{part}'")
        return
    failures.append(f"no {kind.__name__} ({part})")


q = torch.zeros(1, 1, 4, 8)
kv = torch.zeros(1, 5, 4, 8)
raises(ValueError, lambda: wft.decode_attention(q, kv, torch.zeros(1, 4, 4, 8)), "must be equal")
raises(ValueError, lambda: wft.decode_attention(q, torch.zeros(1, 5, 3, 8),
                                                torch.zeros(1, 5, 3, 8)), "must divide heads")
raises(TypeError, lambda: wft.decode_attention(q, kv.double(), kv.double()), "share one dtype")
raises(ValueError, lambda: wft.decode_attention(q, kv, kv, q_positions=[5]), "or neither")
raises(ValueError, lambda: wft.decode_attention(q, kv, kv, q_positions=[5], k_positions=[1, 2]),
       "one per row")

bad = world.allgather(failures)
if rank == 0:
    for r, f in enumerate(bad):
        for line in f:
            print(f"rank {r}: {line}")
    if not any(bad):
        print(f"decode: all {checked} checks ok on {P} ranks")
sys.exit(1 if failures else 0)
