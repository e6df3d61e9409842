"""The Python path's time against the library's own: `mpirun -np P python3 bench/python_overhead.py
--seq N --heads H --head-dim D [--causal] --strategy S [--teams C] --iters K --api {numpy,torch}`.

Runs K forward+backward iterations (after an untimed one) of wallfacer.Attention (NumPy) or wallfacer.torch.attention on
seeded inputs, as `wallfacer attn` does (a barrier before each), and prints one JSON line on rank
0: the library's times of each call as `attn --json` reports them (time_ms: the slowest rank's median over
iterations of its forward and backward, from the library's own clocks) and the wall time
around the Python calls (wall_ms: the same statistic, argument checks, output
allocation and tensor conversions included).
"""

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import wallfacer

p = argparse.ArgumentParser()
p.add_argument("--seq", type=int, required=True)
p.add_argument("--heads", type=int, required=True)
p.add_argument("--head-dim", type=int, required=True)
p.add_argument("--causal", action="store_true")
p.add_argument("--strategy", required=True)
p.add_argument("--teams", type=int, default=1)
p.add_argument("--iters", type=int, default=3)
p.add_argument("--api", choices=["numpy", "torch"], default="numpy")
a = p.parse_args()

world = MPI.COMM_WORLD
P, rank = world.Get_size(), world.Get_rank()
n = a.seq // P
rng = np.random.default_rng(rank)
q, k, v, dout = (rng.uniform(-1, 1, (1, n, a.heads, a.head_dim)).astype(np.float32)
                 for _ in range(4))
attn = wallfacer.Attention(strategy=a.strategy, teams=a.teams, causal=a.causal)
if a.api == "torch":
    import torch

    import wallfacer.torch as wft

    torch.set_num_threads(1)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    tdout = torch.from_numpy(dout)

wall, lib = [], []
# One untimed iteration first: its forward builds the DistAttention, which `attn` builds before it
# starts its clocks.
for it in range(-1, a.iters):
    world.Barrier()
    t0 = time.perf_counter()
    if a.api == "numpy":
        attn.forward(q, k, v)
        t1 = time.perf_counter()
        attn.backward(dout)
        s = attn.stats()
    else:
        o = wft.attention(tq, tk, tv, strategy=a.strategy, teams=a.teams, causal=a.causal)
        t1 = time.perf_counter()
        o.backward(tdout)
        s = next(iter(wft._attentions.values())).stats()
    t2 = time.perf_counter()
    if it < 0:
        continue
    wall.append((1e3 * (t1 - t0), 1e3 * (t2 - t1)))
    lib.append((s["fwd_ms"], s["bwd_ms"]))


def slowest_median(xs):
    """Each rank's median over iterations, the slowest rank's (as `attn --json`), fwd and bwd."""
    return {"fwd": world.allreduce(float(np.median([x[0] for x in xs])), op=MPI.MAX),
            "bwd": world.allreduce(float(np.median([x[1] for x in xs])), op=MPI.MAX)}


wall_ms, time_ms = slowest_median(wall), slowest_median(lib)
if rank == 0:
    print(json.dumps({"api": a.api, "P": P, "seq": a.seq, "heads": a.heads,
                      "head_dim": a.head_dim, "causal": a.causal, "strategy": a.strategy,
                      "C": a.teams, "iters": a.iters, "time_ms": time_ms, "wall_ms": wall_ms}))
