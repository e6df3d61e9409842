"""wallfacer.Attention (NumPy) and wallfacer.torch.attention (autograd) on every rank of
MPI.COMM_WORLD against naive float64 attention on the whole sequence (PyTorch, computed on every
rank): ring, zigzag, Ulysses and WallFacer (C = 2 on 4 ranks), causal and full, grouped-query,
packed documents, fp32 and bf16. Tolerances of docs/numerics.md, relative to the largest
reference magnitude. Prints one line per case on rank 0 and "all N cases ok" when every rank
passed every case; exits 1 otherwise.

    mpirun -np P python3 tests/python/test_attention.py      (P = 1, 2 or 4)
    mpirun -np 8 python3 tests/python/test_attention.py ulysses-wallfacer
                                  (only Ulysses 2 x WallFacer-2, full and causal, documents, bf16)
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
wallfacer.set_timeout(120)  # a hang ends the job instead of the test's timeout

EPS, U = 1.1920929e-7, 1.0 / 256
TOL = {"fp32": {"o": 32 * EPS, "lse": 8 * EPS, "grad": 32 * EPS},
       "bf16": {"o": 3 * U, "lse": U / 2, "grad": 3 * U}}

B, S, H, HKV, D = 1, 64, 8, 4, 16
DOCS = [20, 12, 32]


def reference(q, k, v, dout, causal, docs):
    """o, lse, dq, dk, dv of float64 attention on whole-sequence tensors (B, S, H|Hkv, D)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    n, h, g = q.shape[1], q.shape[2], q.shape[2] // k.shape[2]
    k2, v2 = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k2) / math.sqrt(q.shape[3])
    keep = torch.ones(n, n, dtype=torch.bool)
    if causal:
        keep = torch.tril(keep)
    if docs:
        doc = torch.repeat_interleave(torch.arange(len(docs)), torch.tensor(docs))
        keep = keep & (doc[:, None] == doc[None, :])
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    o = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), v2)
    (o * dout.double()).sum().backward()
    del h
    return {"o": o.detach(), "lse": lse.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def rel_err(got, ref):
    got, ref = torch.as_tensor(got).double(), torch.as_tensor(ref).double()
    if not torch.isfinite(got).all():
        return math.inf
    return float((got - ref).abs().max() / ref.abs().max())


def to_bf16(x):
    """float32 tensor -> bfloat16 (round to nearest even, as wallfacer::to_bf16)."""
    return x.to(torch.bfloat16)


def bf16_bits(x):
    return x.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)


def bits_float(a):
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).float()


gen = torch.Generator().manual_seed(1234)


def inputs(heads, kv_heads, batch=B):
    """The whole sequence's q, k, v, dout in float32, the same on every rank."""
    def rand(h):
        return torch.rand(batch, S, h, D, generator=gen, dtype=torch.float64).float() * 2 - 1
    return rand(heads), rand(kv_heads), rand(kv_heads), rand(heads)


results = []  # (label, {name: err}, ok)


def record(label, errs, dtype):
    tol = TOL[dtype]
    ok = all(e <= (tol["lse"] if n == "lse" else tol["o"] if n == "o" else tol["grad"])
             for n, e in errs.items())
    results.append((label, errs, ok))


def case_torch(strategy, teams, ulysses, causal, docs, heads=H, kv_heads=HKV, dtype="fp32",
               batch=B, inner=0):
    q, k, v, dout = inputs(heads, kv_heads, batch)
    if dtype == "bf16":  # the reference sees the rounded values
        q, k, v, dout = (to_bf16(t).float() for t in (q, k, v, dout))
    ref = reference(q, k, v, dout, causal, docs)
    pos = torch.from_numpy(wallfacer.local_positions(S, P, rank, strategy, teams, ulysses, docs,
                                                     causal=causal, inner=inner))
    tdtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    ql, kl, vl = (t[:, pos].to(tdtype).clone().requires_grad_() for t in (q, k, v))
    o = wft.attention(ql, kl, vl, strategy=strategy, teams=teams, ulysses=ulysses, causal=causal,
                      docs=docs, inner=inner)
    assert o.dtype == tdtype and o.shape == ql.shape
    (o.float() * dout[:, pos]).sum().backward()
    errs = {"o": rel_err(o.float(), ref["o"][:, pos]), "dq": rel_err(ql.grad.float(), ref["dq"][:, pos]),
            "dk": rel_err(kl.grad.float(), ref["dk"][:, pos]),
            "dv": rel_err(vl.grad.float(), ref["dv"][:, pos])}
    label = (f"torch {strategy}{f' C={teams}' if teams > 1 else ''}"
             f"{f' ulysses={ulysses}' if ulysses > 1 else ''}{f' W={inner}' if inner else ''}"
             f" {'causal' if causal else 'full'}"
             f"{' docs' if docs else ''} H={heads}/{kv_heads} B={batch} {dtype}")
    record(label, errs, dtype)


def case_numpy(strategy, teams, causal, docs, dtype):
    q, k, v, dout = inputs(H, HKV)
    if dtype == "bf16":
        q, k, v, dout = (to_bf16(t).float() for t in (q, k, v, dout))
    ref = reference(q, k, v, dout, causal, docs)
    pos = wallfacer.local_positions(S, P, rank, strategy, teams, 1, docs, causal=causal)
    if dtype == "bf16":
        ql, kl, vl, dl = (bf16_bits(t[:, pos]) for t in (q, k, v, dout))
    else:
        ql, kl, vl, dl = (np.ascontiguousarray(t[:, pos].numpy()) for t in (q, k, v, dout))
    with wallfacer.Attention(strategy=strategy, teams=teams, causal=causal, docs=docs,
                             dtype=dtype) as attn:
        o = attn.forward(ql, kl, vl)
        # No copies: o is a fresh array, q is read where it lies.
        assert o.dtype == ql.dtype and o.shape == ql.shape
        lse = attn.lse
        dq, dk, dv = attn.backward(dl)
    conv = bits_float if dtype == "bf16" else torch.from_numpy
    errs = {"o": rel_err(conv(o), ref["o"][:, pos]), "lse": rel_err(lse, ref["lse"][:, :, pos]),
            "dq": rel_err(conv(dq), ref["dq"][:, pos]), "dk": rel_err(conv(dk), ref["dk"][:, pos]),
            "dv": rel_err(conv(dv), ref["dv"][:, pos])}
    label = (f"numpy {strategy}{f' C={teams}' if teams > 1 else ''} "
             f"{'causal' if causal else 'full'}{' docs' if docs else ''} {dtype}")
    record(label, errs, dtype)


C = 2 if P % 4 == 0 else 1
strategies = [("ring", 1), ("zigzag", 1), ("ulysses", 1), ("wallfacer", C)]
if "ulysses-wallfacer" in sys.argv:
    # Only Ulysses 2 x WallFacer-2 (8 ranks): grouped-query heads, documents, fp32 and bf16.
    for causal in (False, True):
        for docs in (None, DOCS):
            case_torch("wallfacer", 2, 2, causal, docs)
    case_torch("wallfacer", 2, 2, True, DOCS, kv_heads=2, dtype="bf16")
else:
    for strategy, teams in strategies:
        for causal in (False, True):
            for docs in (None, DOCS):
                case_torch(strategy, teams, 1, causal, docs)
    # Multi-head (no grouping), two sequences, bf16 tensors, a Ulysses x ring hybrid.
    case_torch("wallfacer", C, 1, True, None, heads=4, kv_heads=4, batch=2)
    case_torch("wallfacer", C, 1, True, DOCS, dtype="bf16")
    case_torch("zigzag", 1, 1, True, None, dtype="bf16")
    if P >= 2:
        case_torch("zigzag", 1, 2, True, DOCS)
    # Double ring with inner rings of P/2 ranks (two groups; one rank: W = 1).
    for causal, docs, dtype in ((False, None, "fp32"), (True, DOCS, "fp32"), (True, None, "bf16")):
        case_torch("double-ring", 1, 1, causal, docs, dtype=dtype, inner=max(1, P // 2))
    for strategy, teams in strategies:
        case_numpy(strategy, teams, True, DOCS, "fp32")
    case_numpy("wallfacer", C, False, None, "fp32")
    case_numpy("wallfacer", C, True, None, "bf16")
    case_numpy("ring", 1, False, DOCS, "bf16")

failed = world.allreduce(sum(not ok for _, _, ok in results), op=MPI.SUM)
worst = world.gather(results, root=0)
if rank == 0:
    for i, (label, _, _) in enumerate(results):
        errs = {n: max(r[i][1][n] for r in worst) for n in results[i][1]}
        ok = all(r[i][2] for r in worst)
        print(f"{'ok  ' if ok else 'FAIL'} P={P} {label}: "
              + " ".join(f"{n} {e:.2e}" for n, e in errs.items()))
    if failed:
        print(f"{failed} failures")
    else:
        print(f"all {len(results)} cases ok on {P} ranks")
    sys.stdout.flush()
sys.exit(1 if failed else 0)
