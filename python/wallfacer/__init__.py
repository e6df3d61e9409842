"""wallfacer from Python: the planner, the sequence layouts and exact distributed attention.

    import wallfacer
    wallfacer.plan("configs/clusters/local.toml", "configs/models/gpt-7b.toml", 131072)
    wallfacer.local_positions(seq, world, rank, strategy="zigzag")
    attn = wallfacer.Attention(strategy="wallfacer", teams=2, causal=True)   # MPI.COMM_WORLD
    o = attn.forward(q, k, v); dq, dk, dv = attn.backward(dout)

`wallfacer.torch.attention` is the differentiable PyTorch function. docs/python.md describes the
module. Bad arguments raise ValueError (or TypeError for a wrong type) with the CLI's one-line
message on every rank, before any communication.
"""

import os
import re

import numpy as np

from . import _wallfacer

# Under tests/mpirun.sh: this rank reached the program, so a failing job is never launched again.
_launch_error = _wallfacer.mark_launched()
if _launch_error:
    raise RuntimeError(_launch_error)

__all__ = ["plan", "local_positions", "Attention", "load_tokens", "set_timeout", "timeout"]


def _int(name, value, minimum=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} is {value}; it must be at least {minimum}")
    return int(value)


def _str(name, value):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    return value


def _docs(docs):
    """Document lengths as a list of ints (None: one document)."""
    if docs is None:
        return None
    if isinstance(docs, (str, bytes)) or not hasattr(docs, "__iter__"):
        raise TypeError(f"docs must be a sequence of document lengths, not {type(docs).__name__}")
    return [_int("docs: a document length", d) for d in docs] or None


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key):
    if not isinstance(key, str):
        raise TypeError(f"a cluster or model dict has the key {key!r}; keys are strings")
    return key if _BARE_KEY.match(key) else '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(value, where):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        text = repr(float(value))
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(text, text)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, where) for v in value) + "]"
    raise TypeError(f"{where}: {type(value).__name__} is not a TOML value "
                    "(use numbers, strings, booleans, lists and dicts)")


def _toml(table, path=()):
    """A dict of the TOML files' structure (configs/) as TOML text: nested dicts are tables."""
    lines, tables = [], []
    for key, value in table.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            where = ".".join(path + (str(key),))
            lines.append(f"{_toml_key(key)} = {_toml_value(value, where)}")
    text = "\n".join(lines) + ("\n" if lines else "")
    for key, value in tables:
        sub = path + (key,)
        text += "\n[" + ".".join(_toml_key(k) for k in sub) + "]\n" + _toml(value, sub)
    return text


def _source(value, what):
    """(text or path, is_path) of a cluster or model given as a path or a dict."""
    if isinstance(value, dict):
        return _toml(value), False
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value), True
    raise TypeError(f"{what} must be a path or a dict, not {type(value).__name__}")


def plan(cluster, model, seq, gpus=None):
    """Every sequence-parallel configuration of `model` on `cluster`, best first.

    cluster, model: paths of TOML files (configs/clusters/, configs/models/) or dicts with the same
    structure ({"nodes": {"count": 2, ...}, "device": {...}}). seq: tokens per sequence (an int, or
    a string such as "128K"). gpus: devices in the sequence-parallel group (default: all of the
    cluster). Returns the list `configs` of `wallfacer plan --json`: one dict per configuration,
    with the same keys.
    """
    import json

    cluster_text, cluster_is_path = _source(cluster, "cluster")
    model_text, model_is_path = _source(model, "model")
    if isinstance(seq, str):
        seq_text = seq
    else:
        seq_text = str(_int("seq", seq))
    gpus = 0 if gpus is None else _int("gpus", gpus)
    if gpus < 1 and gpus != 0:
        raise ValueError(f"--gpus is {gpus}; give a positive number of devices (default: all)")
    text = _wallfacer.plan_json(cluster_text, cluster_is_path, model_text, model_is_path, seq_text,
                                gpus)
    return json.loads(text)["configs"]


def local_positions(seq, world, rank, strategy="zigzag", teams=1, ulysses=1, docs=None, *,
                    causal=False, layout="strategy"):
    """The global token positions (NumPy int64, in local row order) that `rank` of `world` ranks
    holds: seq // world of them, as the C++ seqpar::local_positions. `causal` matters for
    strategy "wallfacer" (zigzag layout when causal); `docs` (document lengths) for
    layout="balanced"."""
    return _wallfacer.local_positions(
        _int("seq", seq), _int("world", world), _int("rank", rank), _str("strategy", strategy),
        _int("teams", teams), _int("ulysses", ulysses), _docs(docs), bool(causal),
        _str("layout", layout))


def load_tokens(path):
    """(tokens, vocab): the tokens of a shard file written by `wallfacer prepare` (header, size and
    checksum verified) as a NumPy int32 array, and its vocabulary size."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, not {type(path).__name__}")
    return _wallfacer.load_tokens(os.fspath(path))


def set_timeout(seconds):
    """The watchdog: a wait of wallfacer's without progress for `seconds` ends the job (default
    600; 0 turns it off)."""
    _wallfacer.set_timeout(float(seconds))


def timeout():
    return _wallfacer.timeout()


_ARRAY_DTYPES = {"fp32": np.float32, "bf16": np.uint16}


def _array(name, a, dtype):
    """`a` as a C-contiguous array of `dtype`: itself when it is one (no copy)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, not {type(a).__name__}")
    want = _ARRAY_DTYPES[dtype]
    if a.dtype != want:
        extra = " (bfloat16 bits)" if dtype == "bf16" else ""
        raise TypeError(f"{name} is {a.dtype}; dtype={dtype!r} takes {np.dtype(want).name}"
                        f"{extra} arrays")
    if a.ndim != 4:
        raise ValueError(f"{name} has shape {a.shape}; it must be (batch, local_seq, heads, "
                         "head_dim)")
    return np.ascontiguousarray(a)


def _check_qkv(q, k, v, dtype):
    q, k, v = _array("q", q, dtype), _array("k", k, dtype), _array("v", v, dtype)
    if k.shape != v.shape:
        raise ValueError(f"k has shape {k.shape} and v {v.shape}; they must be equal")
    if (k.shape[0], k.shape[1], k.shape[3]) != (q.shape[0], q.shape[1], q.shape[3]):
        raise ValueError(f"q has shape {q.shape} and k {k.shape}; they must agree in batch, "
                         "local_seq and head_dim")
    return q, k, v


class Attention:
    """Exact distributed attention over the ranks of an mpi4py communicator.

    Attention(comm=None, strategy="wallfacer", teams=1, ulysses=1, causal=False, docs=None,
              dtype="fp32", layout="strategy")

    comm: an mpi4py communicator (default MPI.COMM_WORLD); wallfacer works on a duplicate of it and
    never starts or ends MPI. Building one is collective over comm, and so are forward, backward
    and close: every rank calls them in the same order. forward(q, k, v) takes this rank's rows
    (local_positions order): q (batch, local_seq, heads, head_dim), k and v (batch, local_seq,
    kv_heads, head_dim), C-contiguous float32 (dtype="fp32") or bfloat16 bits as uint16
    (dtype="bf16"), and returns o like q; `lse` (batch, heads, local_seq, float32) holds the
    forward's log-sum-exp. backward(dout) returns (dq, dk, dv) of the latest forward.
    """

    def __init__(self, comm=None, strategy="wallfacer", teams=1, ulysses=1, causal=False,
                 docs=None, dtype="fp32", layout="strategy"):
        self._impl = None
        dtype = _str("dtype", dtype)
        impl = _wallfacer.Attention(_str("strategy", strategy), _int("teams", teams),
                                    _int("ulysses", ulysses), bool(causal), _docs(docs), dtype,
                                    _str("layout", layout))
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        if not hasattr(comm, "py2f"):
            raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
        impl.connect(comm.py2f())
        self._impl = impl
        self.dtype = dtype
        self.lse = None
        self._saved = None

    @property
    def rank(self):
        return self._impl.rank

    @property
    def size(self):
        return self._impl.size

    def forward(self, q, k, v):
        q, k, v = _check_qkv(q, k, v, self.dtype)
        o, lse = self._impl.forward(q, k, v)
        self._saved = (q, k, v, o, lse)
        self.lse = lse
        return o

    def backward(self, dout):
        if self._saved is None:
            raise ValueError("backward needs a forward first")
        q, k, v, o, lse = self._saved
        dout = _array("dout", dout, self.dtype)
        if dout.shape != o.shape:
            raise ValueError(f"dout has shape {dout.shape}; it must be the output's {o.shape}")
        return self._impl.backward(q, k, v, o, lse, dout)

    def set_documents(self, docs):
        """The document lengths of the following calls (collective; None: one document)."""
        self._impl.set_documents(_docs(docs))

    def stats(self):
        """This rank's bytes, steps and milliseconds of the latest forward and backward."""
        return self._impl.stats()

    def close(self):
        """Frees the communicator and buffers (collective); also done when the object goes."""
        if self._impl is not None:
            self._impl.close()
        self._saved = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def __getattr__(name):
    # wallfacer.torch on first use (it imports PyTorch, which plan and Attention do not need).
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'wallfacer' has no attribute {name!r}")
