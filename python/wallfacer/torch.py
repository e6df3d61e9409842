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

wallfacer.torch.decode_attention(q, k_shard, v_shard) is a decode step against a KV cache sharded
by position over the ranks: every rank gives the same new query rows and its own shard, attends
them to it (a partial output and its LSE) and the P partials are merged exactly, in rank order, the
same on every rank.
"""

import numpy as np

from . import Attention, _docs, _int, _need, _str
from . import local_positions as _local_positions

torch = _need("torch", "PyTorch", "python3-torch", "torch")

__all__ = ["attention", "local_positions", "decode_attention"]

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


def _attention_for(comm, strategy, teams, ulysses, causal, dtype, docs, layout, inner):
    comm = _world(comm)
    key = (id(comm), strategy, teams, ulysses, causal, dtype, layout, inner)
    attn = _attentions.get(key)
    # The balanced layout's documents decide where the rows go: new documents, a new Attention
    # (the previous one lives on in the autograd graphs that still need it).
    if attn is None or (layout == "balanced" and attn._layout.docs != (tuple(docs) if docs
                                                                        else None)):
        attn = Attention(comm, strategy=strategy, teams=teams, ulysses=ulysses, causal=causal,
                         dtype=dtype, docs=docs if layout == "balanced" else None, layout=layout,
                         inner=inner)
        # The communicator's id is the key only while it lives: keep it with the Attention.
        _attentions[key] = attn
        attn._comm = comm
    return attn


def local_positions(seq, *, comm=None, strategy, teams=1, ulysses=1, causal=False, docs=None,
                    layout="strategy", inner=0):
    """The global positions of the rows this rank of `comm` holds of `seq` tokens in the layout of
    attention() with the same keywords: the rows attention() takes from this rank."""
    comm = _world(comm)
    return _local_positions(seq, comm.Get_size(), comm.Get_rank(), strategy, teams, ulysses, docs,
                            causal=causal, layout=layout, inner=inner)


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


def _check_qkv(fn, q, k, v):
    """q, and the (name, tensor) pairs k and v: CPU tensors of one dtype (float32 or bfloat16),
    4-D, k and v of one shape."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, not {type(q).__name__}")
    if q.dtype not in _TORCH_DTYPES:
        raise TypeError(f"q is {q.dtype}; wallfacer.torch.{fn} takes torch.float32 or "
                        "torch.bfloat16 tensors")
    for name, t in (("q", q), k, v):
        _check(name, t, q.dtype)
    if k[1].shape != v[1].shape:
        raise ValueError(f"{k[0]} has shape {tuple(k[1].shape)} and {v[0]} {tuple(v[1].shape)}; "
                         "they must be equal")


def attention(q, k, v, *, comm=None, strategy, teams=1, ulysses=1, causal=False, docs=None,
              layout="strategy", inner=0):
    """This rank's rows of exact attention over the sequence held by the ranks of `comm`: the
    rows local_positions(seq, ...) with the same keywords gives (ValueError when this process's
    latest wallfacer.local_positions for this sequence and ranks gave another layout)."""
    _check_qkv("attention", q, ("k", k), ("v", v))
    if (k.shape[0], k.shape[1], k.shape[3]) != (q.shape[0], q.shape[1], q.shape[3]):
        raise ValueError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}; they must agree "
                         "in batch, local_seq and head_dim")
    docs = _docs(docs)
    attn = _attention_for(comm, _str("strategy", strategy), _int("teams", teams),
                          _int("ulysses", ulysses), bool(causal), _TORCH_DTYPES[q.dtype], docs,
                          _str("layout", layout), _int("inner", inner))
    attn._check_layout(q.shape[1], "wallfacer.torch.attention", tuple(docs) if docs else ())
    return _Function.apply(q, k, v, attn, docs)


def _partial(q, k, v, scale, keep):
    """float32 attention of q (B, R, H, D) over k, v (B, S, Hkv, D) with the mask `keep` (R, S) or
    None: the output (B, R, H, D) and its LSE (B, H, R); rows with no key: 0 and -inf."""
    B, R, H, D = q.shape
    group = H // k.shape[2]
    kk = k.float().repeat_interleave(group, dim=2)
    vv = v.float().repeat_interleave(group, dim=2)
    s = torch.einsum("brhd,bshd->bhrs", q.float(), kk) * scale
    if keep is not None:
        s = s.masked_fill(~keep, -float("inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf where a row sees no key
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    return torch.einsum("bhrs,bshd->brhd", p, vv), lse


def decode_attention(q, k_shard, v_shard, *, comm=None, q_positions=None, k_positions=None,
                     scale=None, return_lse=False):
    """Attention of new query rows over a KV cache sharded by position across the ranks of `comm`
    (default MPI.COMM_WORLD).

    q (batch, rows, heads, head_dim): the new rows, the same on every rank; k_shard, v_shard
    (batch, shard_len, kv_heads, head_dim): this rank's shard (any length, 0 included; kv_heads
    divides heads), its positions in any order. Without positions every cached key is before every
    new row (a decode step after the new token's key and value joined a shard); with q_positions
    (rows,) and k_positions (shard_len,) a row sees the keys at or before its position. Returns the
    output (batch, rows, heads, head_dim) in q's dtype, the same on every rank, and with
    return_lse=True also the LSE (batch, heads, rows) float32. Collective: every rank calls it.
    """
    mpi = _need("mpi4py.MPI", "mpi4py", "python3-mpi4py", "mpi4py")
    comm = _world(comm)
    _check_qkv("decode_attention", q, ("k_shard", k_shard), ("v_shard", v_shard))
    B, R, H, D = q.shape
    if k_shard.shape[0] != B or k_shard.shape[3] != D:
        raise ValueError(f"q has shape {tuple(q.shape)} and k_shard {tuple(k_shard.shape)}; they "
                         "must agree in batch and head_dim")
    Hkv = k_shard.shape[2]
    if Hkv < 1 or H % Hkv:
        raise ValueError(f"q has {H} heads and k_shard {Hkv} kv_heads; kv_heads must divide heads")
    if (q_positions is None) != (k_positions is None):
        raise ValueError("give both q_positions and k_positions, or neither")
    keep = None
    if q_positions is not None:
        qp = torch.as_tensor(q_positions, dtype=torch.int64).reshape(-1)
        kp = torch.as_tensor(k_positions, dtype=torch.int64).reshape(-1)
        if qp.numel() != R or kp.numel() != k_shard.shape[1]:
            raise ValueError(f"q_positions has {qp.numel()} entries for {R} rows and k_positions "
                             f"{kp.numel()} for {k_shard.shape[1]} keys; one per row")
        keep = kp[None, :] <= qp[:, None]
    scale = 1.0 / D ** 0.5 if scale is None else float(scale)
    # Every rank checks the shapes the merge needs: one shape of q on every rank.
    shapes = comm.allgather((B, R, H, D))
    if any(sh != (B, R, H, D) for sh in shapes):
        raise ValueError(f"q has shape {(B, R, H, D)} on rank {comm.Get_rank()} and "
                         f"{next(sh for sh in shapes if sh != (B, R, H, D))} on another rank; the "
                         "new rows must be the same on every rank")
    with torch.no_grad():
        o, lse = _partial(q, k_shard, v_shard, scale, keep)
        P = comm.Get_size()
        mine_o, mine_l = o.contiguous().numpy(), lse.contiguous().numpy()
        all_o = np.empty((P,) + mine_o.shape, np.float32)
        all_l = np.empty((P,) + mine_l.shape, np.float32)
        comm.Allgather([mine_o, mpi.FLOAT], [all_o, mpi.FLOAT])
        comm.Allgather([mine_l, mpi.FLOAT], [all_l, mpi.FLOAT])
        # The LSE merge, rank after rank: (o, lse) <- (e^(lse - new) o + e^(lse_r - new) o_r, new).
        out = torch.zeros_like(o)
        tot = torch.full_like(lse, -float("inf"))
        for r in range(P):
            o_r, l_r = torch.from_numpy(all_o[r]), torch.from_numpy(all_l[r])
            new = torch.logaddexp(tot, l_r)
            safe = torch.where(torch.isfinite(new), new, 0.0)
            a = torch.exp(tot - safe).transpose(1, 2)[..., None]
            b = torch.exp(l_r - safe).transpose(1, 2)[..., None]
            out = a * out + b * o_r
            tot = new
    out = out.to(q.dtype)
    return (out, tot) if return_lse else out
