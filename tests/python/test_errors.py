"""Bad arguments to wallfacer.Attention and wallfacer.torch.attention: ValueError or TypeError on
every rank, with the CLI's message where the CLI has the same check, and the ranks still in step
afterwards (a good call works). Ranks that pass different shapes all raise ValueError.

    mpirun -np 2 python3 tests/python/test_errors.py WALLFACER_CLI
    mpirun -np 2 python3 tests/python/test_errors.py WALLFACER_CLI one-rank   (see below)

`one-rank`: only rank 1 passes a float64 array (TypeError there, before any communication); rank 0
waits in the attention for it, and the watchdog (wallfacer.set_timeout(2)) ends the job with its
message instead of a hang.
"""

import os
import subprocess
import sys

import numpy as np
import torch
from mpi4py import MPI

import wallfacer
import wallfacer.torch as wft

cli = sys.argv[1]
world = MPI.COMM_WORLD
P, rank = world.Get_size(), world.Get_rank()
failures = []
checked = 0


def q_k_v(n=8, heads=2, kv_heads=2, d=8, dtype=np.float32):
    rng = np.random.default_rng(rank)
    q = rng.standard_normal((1, n, heads, d)).astype(dtype)
    k = rng.standard_normal((1, n, kv_heads, d)).astype(dtype)
    return q, k, k.copy()


if len(sys.argv) > 2 and sys.argv[2] == "one-rank":
    wallfacer.set_timeout(2)
    attn = wallfacer.Attention(strategy="ring")
    q, k, v = q_k_v(dtype=np.float64 if rank == 1 else np.float32)
    try:
        attn.forward(q, k, v)
    except TypeError as e:
        print(f"rank {rank}: TypeError: {e}", flush=True)
        world.Barrier()  # waits for rank 0, which waits in the attention: the watchdog ends it
    sys.exit(0)


def raises(kind, f, want=None):
    """Runs f; it must raise `kind` (with message `want` when given). Returns the message."""
    global checked
    checked += 1
    try:
        f()
    except kind as e:
        if want is not None and str(e) != want:
            failures.append(f"{kind.__name__} {str(e)!r}, not {want!r}")
        return str(e)
    except Exception as e:  # noqa: BLE001
        failures.append(f"{type(e).__name__} {e!r} instead of {kind.__name__}")
        return None
    failures.append(f"no {kind.__name__} (wanted {want!r})")
    return None


def cli_error(*args):
    """The CLI's message for `attn ARGS`, run as a process of its own (outside this MPI job)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "WALLFACER_LAUNCH"))}
    p = subprocess.run([cli, "attn", *args], capture_output=True, text=True, env=env)
    return p.stderr.strip().splitlines()[-1].split("error: ", 1)[-1] if p.stderr.strip() else ""


shape = ["--heads", "2", "--head-dim", "8", "--seq", "16"]
# Checked when the Attention is built (no communication yet).
# (The library's message: the CLI's option parser refuses unknown names before the library does.)
raises(ValueError, lambda: wallfacer.Attention(strategy="spiral"),
       "unknown strategy 'spiral': use one of ring, zigzag, ulysses, wallfacer, double-ring")
raises(ValueError, lambda: wallfacer.Attention(dtype="fp8"), "unknown dtype 'fp8': use fp32 or bf16")
raises(ValueError, lambda: wallfacer.Attention(strategy="ring", teams=0))
raises(TypeError, lambda: wallfacer.Attention(teams="2"))
raises(TypeError, lambda: wallfacer.Attention(comm="world"))

# Checked at the first forward, when the shapes are known, before its communication: the
# validation of the CLI's `attn` (P = 2: --seq is 2 x the local rows).
attn = wallfacer.Attention(strategy="wallfacer", teams=2)
q, k, v = q_k_v()
raises(ValueError, lambda: attn.forward(q, k, v),
       cli_error("--strategy", "wallfacer", "--teams", "2", *shape) if P == 1 else None)
attn.close()
zig = wallfacer.Attention(strategy="zigzag")
q3, k3, v3 = q_k_v(n=3)
raises(ValueError, lambda: zig.forward(q3, k3, v3))
if P > 1:  # heads not divisible by the ranks
    uly = wallfacer.Attention(strategy="ulysses")
    q1, k1, v1 = q_k_v(heads=3, kv_heads=3)
    raises(ValueError, lambda: uly.forward(q1, k1, v1))
docs = wallfacer.Attention(strategy="ring", docs=[4, -1])
raises(ValueError, lambda: docs.forward(q, k, v),
       cli_error("--strategy", "ring", "--heads", "2", "--head-dim", "8", "--seq", str(8 * P),
                 "--docs", "4,-1"))
ring = wallfacer.Attention(strategy="ring", causal=True)
raises(TypeError, lambda: ring.forward(*q_k_v(dtype=np.float64)))
raises(TypeError, lambda: ring.forward(q.tolist(), k, v))
raises(ValueError, lambda: ring.forward(q[0], k[0], v[0]))
raises(ValueError, lambda: ring.forward(q, k, v[:, :4]))
raises(ValueError, lambda: ring.forward(*q_k_v(heads=3, kv_heads=2)))
raises(ValueError, lambda: ring.backward(q))  # no forward yet
bf = wallfacer.Attention(strategy="ring", dtype="bf16")
raises(TypeError, lambda: bf.forward(q, k, v))
# Different shapes on different ranks: every rank raises.
if P > 1:
    qd, kd, vd = q_k_v(n=8 if rank == 0 else 16)
    raises(ValueError, lambda: ring.forward(qd, kd, vd))
# Still in step: a good call works on every rank (non-contiguous input is copied, not refused).
o = ring.forward(q, np.asfortranarray(k), v)
dq, dk, dv = ring.backward(np.ones_like(o))
checked += 1
if not (np.isfinite(o).all() and o.shape == q.shape and dk.shape == k.shape):
    failures.append("the good call after the errors")

# PyTorch.
tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
raises(TypeError, lambda: wft.attention(tq.double(), tk.double(), tv.double(), strategy="ring"))
raises(TypeError, lambda: wft.attention(tq, tk.bfloat16(), tv, strategy="ring"))
raises(TypeError, lambda: wft.attention(tq, tk, tv))  # strategy is required
raises(ValueError, lambda: wft.attention(tq, tk, tv, strategy="spiral"),
       "unknown strategy 'spiral': use one of ring, zigzag, ulysses, wallfacer, double-ring")
raises(ValueError, lambda: wft.attention(tq[0], tk[0], tv[0], strategy="ring"))
out = wft.attention(tq, tk, tv, strategy="zigzag", causal=True)
checked += 1
if not torch.isfinite(out).all():
    failures.append("the good torch call after the errors")

failed = world.allreduce(len(failures), op=MPI.SUM)
for f in failures:
    print(f"rank {rank}: FAIL: {f}", flush=True)
world.Barrier()
if rank == 0:
    print(f"errors: {failed} failures" if failed else f"errors: all {checked} checks ok on {P} ranks",
          flush=True)
sys.exit(1 if failed else 0)
