"""Layouts that disagree: rows laid out by wallfacer.local_positions with other arguments than the
attention's raise ValueError on every rank, saying what differs, before any communication; rows
laid out with the attention's own layout (the same arguments, Attention.local_positions,
wallfacer.torch.local_positions) give the exact result. On 4 ranks: the causal WallFacer layout
(zigzag) against positions asked without causal=True (contiguous), and the balanced layout of
packed documents against the strategy's layout, for wallfacer.torch.attention and
wallfacer.Attention. Prints "layout agree: all N checks ok on 4 ranks" when every rank passed.

    mpirun -np 4 python3 tests/python/test_layout_agree.py
"""

import math
import sys

import numpy as np
import torch
from mpi4py import MPI

import wallfacer
import wallfacer.torch as wft

world = MPI.COMM_WORLD
P, rank = world.Get_size(), world.Get_rank()
wallfacer.set_timeout(60)  # a rank left waiting ends the job instead of the test's timeout
assert P == 4, "run on 4 ranks"

B, S, H, D = 1, 64, 4, 8
DOCS = [20, 12, 32]
TOL = 32 * 1.1920929e-7  # fp32 output, relative to the largest reference magnitude (numerics.md)
failures, checked = [], 0

gen = torch.Generator().manual_seed(7)
q, k, v = (torch.rand(B, S, H, D, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(3))


def reference(causal, docs):
    """float64 attention on the whole sequence."""
    keep = torch.ones(S, S, dtype=torch.bool)
    if causal:
        keep = torch.tril(keep)
    if docs:
        doc = torch.repeat_interleave(torch.arange(len(docs)), torch.tensor(docs))
        keep = keep & (doc[:, None] == doc[None, :])
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s.masked_fill(~keep, -math.inf), -1), v)


def expect(ok, what):
    global checked
    checked += 1
    if not ok:
        failures.append(what)


def expect_raise(f, parts, what):
    """f() raises ValueError whose message holds every string of `parts`."""
    try:
        f()
    except ValueError as e:
        missing = [p for p in parts if p not in str(e)]
        expect(not missing, f"{what}: the message lacks {missing}: {e}")
        return str(e)
    expect(False, f"{what}: no error")
    return ""


def rows(pos):
    return tuple(t[:, torch.from_numpy(pos)].float().contiguous() for t in (q, k, v))


def torch_err(pos, causal, docs, **kw):
    """Relative error of wallfacer.torch.attention on the rows at `pos` against the reference."""
    o = wft.attention(*rows(pos), causal=causal, docs=docs, **kw)
    ref = reference(causal, docs)
    return float((o.double() - ref[:, pos]).abs().max() / ref.abs().max())


def numpy_err(attn, pos, causal, docs):
    o = attn.forward(*(t.numpy() for t in rows(pos)))
    ref = reference(causal, docs)
    return float((torch.from_numpy(o).double() - ref[:, pos]).abs().max() / ref.abs().max())


# The example of the issue: positions asked without causal=True (contiguous), a causal WallFacer
# attention (zigzag). Every rank raises, naming causal and both layouts.
pos = wallfacer.local_positions(S, P, rank, strategy="wallfacer", teams=2)
msg = expect_raise(lambda: wft.attention(*rows(pos), strategy="wallfacer", teams=2, causal=True),
                   ["wallfacer.torch.attention(strategy='wallfacer', teams=2, causal=True)",
                    "the zigzag layout", "the contiguous layout", "causal=False",
                    "where the attention has causal=True"], "causal wallfacer on contiguous rows")
if rank == 0:
    print(msg)
# The same arguments: exact. The ranks are still in step (nobody entered the attention above).
pos = wallfacer.local_positions(S, P, rank, strategy="wallfacer", teams=2, causal=True)
err = torch_err(pos, True, None, strategy="wallfacer", teams=2)
expect(err <= TOL, f"causal wallfacer, matching layouts: error {err:.2e}")
# The attention's own positions: the keywords of the attention.
kw = dict(strategy="wallfacer", teams=2, causal=True)
expect(np.array_equal(wft.local_positions(S, **kw), pos), "wallfacer.torch.local_positions")
# Arguments that differ but lay the rows out alike (ring and Ulysses are both contiguous, full
# WallFacer too): no error, exact.
pos = wallfacer.local_positions(S, P, rank, strategy="ring")
err = torch_err(pos, True, None, strategy="ulysses")
expect(err <= TOL, f"ulysses on ring's (contiguous) rows: error {err:.2e}")
err = torch_err(pos, False, None, strategy="wallfacer", teams=2)
expect(err <= TOL, f"full wallfacer on ring's (contiguous) rows: error {err:.2e}")

# Documents: rows in their balanced layout, attention in the strategy's layout, and back.
pos = wallfacer.local_positions(S, P, rank, strategy="zigzag", docs=DOCS, causal=True,
                                layout="balanced")
expect_raise(lambda: wft.attention(*rows(pos), strategy="zigzag", causal=True, docs=DOCS),
             ["the balanced layout of the documents [20, 12, 32]", "the zigzag layout",
              "layout='balanced', where the attention has layout='strategy'"],
             "strategy layout on balanced rows")
err = torch_err(pos, True, DOCS, strategy="zigzag", layout="balanced")
expect(err <= TOL, f"torch balanced layout, matching: error {err:.2e}")
# Other documents in the balanced layout: other rows.
other = [32, 12, 20]
expect_raise(lambda: wft.attention(*rows(pos), strategy="zigzag", causal=True, docs=other,
                                   layout="balanced"),
             ["the balanced layout of the documents [32, 12, 20]",
              "the balanced layout of the documents [20, 12, 32]"], "balanced, other documents")
pos = wft.local_positions(S, strategy="zigzag", causal=True, docs=other, layout="balanced")
err = torch_err(pos, True, other, strategy="zigzag", layout="balanced")
expect(err <= TOL, f"torch balanced layout, new documents: error {err:.2e}")

# wallfacer.Attention (NumPy): a balanced attention on the strategy's rows raises; its own
# positions are exact.
pos = wallfacer.local_positions(S, P, rank, strategy="ring", docs=DOCS)
with wallfacer.Attention(strategy="ring", docs=DOCS, layout="balanced") as attn:
    expect_raise(lambda: numpy_err(attn, pos, False, DOCS),
                 ["wallfacer.Attention(strategy='ring', docs=[20, 12, 32], layout='balanced')",
                  "the contiguous layout"], "numpy balanced on contiguous rows")
    err = numpy_err(attn, attn.local_positions(S), False, DOCS)
    expect(err <= TOL, f"numpy balanced layout, its own positions: error {err:.2e}")

failed = world.allreduce(len(failures), op=MPI.SUM)
for f in failures:
    print(f"rank {rank}: FAIL {f}", flush=True)
world.Barrier()
if rank == 0:
    print(f"layout agree: {failed} failures" if failed else
          f"layout agree: all {checked} checks ok on {P} ranks", flush=True)
sys.exit(1 if failed else 0)
