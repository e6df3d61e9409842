"""wallfacer.torch.attention: exact distributed attention as a differentiable PyTorch function.

    from wallfacer.torch import attention, local_positions
    kw = dict(strategy="wallfacer", teams=2, causal=True)
    pos = local_positions(seq, **kw)            # this rank's rows of the sequence
    o = attention(q, k, v, **kw)

q (batch, local_seq, heads, head_dim), k and v (batch, local_seq, kv_heads, head_dim): this rank's
rows (local_positions order, with the attention's keywords) as CPU tensors, float32 or bfloat16.
Returns this rank's rows of the output; gradients flow to q, k and v. Every rank of `comm` (default MPI.COMM_WORLD)
calls it with the same arguments, and runs the backward in the same order. One
wallfacer.Attention per communicator and configuration is kept and reused (docs/python.md).
"""

import numpy as np

from . import Attention, _docs, _int, _need, _str
from . import local_positions as _local_positions

torch = _need("torch", "PyTorch", "python3-torch", "torch")

__all__ = ["attention", "local_positions"]

_TORCH_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16"}
_attentions = {}


def _numpy(t):
    """The tensor's memory as a NumPy array (float32, or uint16 bits for bfloat16), no copy when
    it is contiguous."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _tensor(a, dtype):
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _world(comm):
    if comm is None:
        comm = _need("mpi4py.MPI", "mpi4py", "python3-mpi4py", "mpi4py").COMM_WORLD
    return comm


def _attention_for(comm, strategy, teams, ulysses, causal, dtype, docs, layout):
    comm = _world(comm)
    key = (id(comm), strategy, teams, ulysses, causal, dtype, layout)
    attn = _attentions.get(key)
    # The balanced layout's documents decide where the rows go: new documents, a new Attention
    # (the previous one lives on in the autograd graphs that still need it).
    if attn is None or (layout == "balanced" and attn._layout.docs != (tuple(docs) if docs
                                                                        else None)):
        attn = Attention(comm, strategy=strategy, teams=teams, ulysses=ulysses, causal=causal,
                         dtype=dtype, docs=docs if layout == "balanced" else None, layout=layout)
        # The communicator's id is the key only while it lives: keep it with the Attention.
        _attentions[key] = attn
        attn._comm = comm
    return attn


def local_positions(seq, *, comm=None, strategy, teams=1, ulysses=1, causal=False, docs=None,
                    layout="strategy"):
    """The global positions of the rows this rank of `comm` holds of `seq` tokens in the layout of
    attention() with the same keywords: the rows attention() takes from this rank."""
    comm = _world(comm)
    return _local_positions(seq, comm.Get_size(), comm.Get_rank(), strategy, teams, ulysses, docs,
                            causal=causal, layout=layout)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, attn, docs):
        attn.set_documents(docs)
        qa, ka, va = _numpy(q), _numpy(k), _numpy(v)
        o, lse = attn._impl.forward(qa, ka, va)
        ot, lset = _tensor(o, q.dtype), torch.from_numpy(lse)
        ctx.save_for_backward(q, k, v, ot, lset)
        ctx.attn, ctx.docs = attn, docs
        return ot

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o, lse = ctx.saved_tensors
        attn = ctx.attn
        attn.set_documents(ctx.docs)
        dq, dk, dv = attn._impl.backward(_numpy(q), _numpy(k), _numpy(v), _numpy(o), _numpy(lse),
                                         _numpy(dout.to(q.dtype)))
        return _tensor(dq, q.dtype), _tensor(dk, q.dtype), _tensor(dv, q.dtype), None, None


def _check(name, t, dtype):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} is on {t.device}; wallfacer runs on CPU tensors")
    if t.dtype != dtype:
        raise TypeError(f"{name} is {t.dtype} and q {dtype}; q, k and v share one dtype")
    if t.dim() != 4:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be (batch, local_seq, heads, "
                         "head_dim)")


def attention(q, k, v, *, comm=None, strategy, teams=1, ulysses=1, causal=False, docs=None,
              layout="strategy"):
    """This rank's rows of exact attention over the sequence held by the ranks of `comm`: the
    rows local_positions(seq, ...) with the same keywords gives (ValueError when this process's
    latest wallfacer.local_positions for this sequence and ranks gave another layout)."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, not {type(q).__name__}")
    if q.dtype not in _TORCH_DTYPES:
        raise TypeError(f"q is {q.dtype}; wallfacer.torch.attention takes torch.float32 or "
                        "torch.bfloat16 tensors")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check(name, t, q.dtype)
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} and v {tuple(v.shape)}; they must be equal")
    if (k.shape[0], k.shape[1], k.shape[3]) != (q.shape[0], q.shape[1], q.shape[3]):
        raise ValueError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}; they must agree "
                         "in batch, local_seq and head_dim")
    docs = _docs(docs)
    attn = _attention_for(comm, _str("strategy", strategy), _int("teams", teams),
                          _int("ulysses", ulysses), bool(causal), _TORCH_DTYPES[q.dtype], docs,
                          _str("layout", layout))
    attn._check_layout(q.shape[1], "wallfacer.torch.attention", tuple(docs) if docs else ())
    return _Function.apply(q, k, v, attn, docs)
