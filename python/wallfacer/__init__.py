"""wallfacer from Python: the planner, the sequence layouts and exact distributed attention.

    import wallfacer
    wallfacer.plan("configs/clusters/local.toml", "configs/models/gpt-7b.toml", 131072)
    attn = wallfacer.Attention(strategy="wallfacer", teams=2, causal=True)   # MPI.COMM_WORLD
    pos = attn.local_positions(seq)   # this rank's rows (or wallfacer.local_positions, same args)
    o = attn.forward(q, k, v); dq, dk, dv = attn.backward(dout)

`wallfacer.torch.attention` is the differentiable PyTorch function. docs/python.md describes the
module. Bad arguments raise ValueError (or TypeError for a wrong type) with the CLI's one-line
message on every rank, before any communication.
"""

import collections
import os
import re
import sys

from . import _build_info


def _this_python():
    return f"{sys.executable} (Python {sys.version_info[0]}.{sys.version_info[1]})"


def _need(module, name, debian_package, pip_package):
    """`import module`, or a ModuleNotFoundError that names this interpreter, the one the build
    found, and what to install where (a python3 ahead on PATH may lack Debian's packages)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.path.realpath(sys.executable) == os.path.realpath(_build_info.PYTHON):
            fix = (f"install {name} for it: apt-get install {debian_package} (scripts/install-deps "
                   "installs it with the module's other packages)")
        else:
            apt = (f"; apt-get install {debian_package} gives it {name}"
                   if _build_info.PYTHON.startswith("/usr/bin/") else "")
            fix = (f"run the interpreter the build found, {_build_info.PYTHON} (Python "
                   f"{_build_info.VERSION}{apt}), or install {name} for this one: "
                   f"{sys.executable} -m pip install {pip_package}")
        raise ModuleNotFoundError(
            f"wallfacer needs {name}, which this interpreter, {_this_python()}, cannot import "
            f"({type(e).__name__}: {e}): {fix}", name=module) from e


np = _need("numpy", "NumPy", "python3-numpy", "numpy")

try:
    from . import _wallfacer
except ImportError as e:
    raise ImportError(
        f"wallfacer's extension does not load in {_this_python()} ({e}); the build made it for "
        f"{_build_info.PYTHON} (Python {_build_info.VERSION}): run that one, or build for this "
        f"one with cmake -DPython3_EXECUTABLE={sys.executable}") from e

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


class _LayoutArgs(collections.namedtuple("_LayoutArgs",
                                         "strategy teams ulysses causal docs layout inner")):
    """The arguments that decide a layout, docs as a tuple (or None)."""

    __slots__ = ()

    def __new__(cls, strategy, teams, ulysses, causal, docs, layout, inner=0):
        return super().__new__(cls, strategy, int(teams), int(ulysses), bool(causal),
                               tuple(docs) if docs else None, layout, int(inner))

    def positions(self, seq, world, rank):
        return _wallfacer.local_positions(seq, world, rank, self.strategy, self.teams,
                                          self.ulysses, list(self.docs) if self.docs else None,
                                          self.causal, self.layout, self.inner)

    def name(self):
        """The layout in words, for messages."""
        if self.layout == "balanced":
            docs = list(self.docs or ())
            shown = ", ".join(map(str, docs[:6])) + (", ..." if len(docs) > 6 else "")
            return f"the balanced layout of the documents [{shown}]"
        ring = ("zigzag" if _wallfacer.uses_zigzag_layout(self.strategy, self.causal)
                else "contiguous")
        if self.ulysses > 1:
            return f"the Ulysses-{self.ulysses} x {ring} hybrid layout"
        return f"the {ring} layout"

    def keywords(self, fields=None):
        """`strategy='wallfacer', teams=2, ...` of the given fields (default: all but defaults)."""
        defaults = {"teams": 1, "ulysses": 1, "causal": False, "docs": None, "layout": "strategy",
                    "inner": 0}
        out = []
        for field, value in zip(_LayoutArgs._fields, self):
            if fields is None and field in defaults and defaults[field] == value:
                continue
            if fields is not None and field not in fields:
                continue
            out.append(f"{field}={list(value) if field == 'docs' and value else value!r}")
        return ", ".join(out)


# The layout that local_positions handed out last for each (seq, world) in this process. An
# attention over `world` ranks whose own layout of `seq` tokens puts any rank's rows elsewhere
# raises instead of computing on rows that are not where it thinks (_check_layout).
_handed_out = {}
_agreeing = set()  # (seq, world, handed out, attention's) whose positions were found equal


def _runs(pos):
    """Positions as runs of consecutive ones: "0..15, 48..63"."""
    runs, start = [], 0
    for i in range(1, len(pos) + 1):
        if i == len(pos) or pos[i] != pos[i - 1] + 1:
            runs.append(f"{pos[start]}..{pos[i - 1]}" if i - 1 > start else f"{pos[start]}")
            start = i
    return ", ".join(runs[:4]) + (f", ... ({len(runs)} runs)" if len(runs) > 4 else "")


def _check_layout(seq, world, args, call):
    """ValueError when the latest local_positions(seq, world, ...) of this process gave a layout
    that differs from `args`, the layout of the attention `call` names. Decided from the arguments
    alone (every rank's positions under both), so every rank that was handed the same layout
    raises the same error before any communication."""
    handed = _handed_out.get((seq, world))
    if handed is None:
        return
    # The strategy's layout does not depend on the documents.
    key = tuple(a._replace(docs=None) if a.layout == "strategy" else a for a in (handed, args))
    if key[0] == key[1] or (seq, world) + key in _agreeing:
        return
    for r in range(world):
        try:
            want = args.positions(seq, world, r)
        except ValueError:
            return  # arguments the attention refuses itself, with its own message
        got = handed.positions(seq, world, r)
        if not np.array_equal(got, want):
            differ = [f for f, a, b in zip(_LayoutArgs._fields, handed, args) if a != b and not (
                f == "docs" and handed.layout == args.layout == "strategy")]
            raise ValueError(
                f"{call}({args.keywords()}) lays the {seq} tokens out over the {world} ranks in "
                f"{args.name()}, but the latest wallfacer.local_positions({seq}, {world}, ...) "
                f"gave {handed.name()} ({handed.keywords(differ)}, where the attention has "
                f"{args.keywords(differ)}): rank {r} would hold positions {_runs(got)} and the "
                f"attention takes its rows as positions {_runs(want)}, so its output would be "
                f"wrong. Give both the same arguments, or take the positions from the attention "
                f"(Attention.local_positions(seq), wallfacer.torch.local_positions(seq, ...) with "
                f"the attention's keywords)")
    _agreeing.add((seq, world) + key)


def local_positions(seq, world, rank, strategy="zigzag", teams=1, ulysses=1, docs=None, *,
                    causal=False, layout="strategy", inner=0):
    """The global token positions (NumPy int64, in local row order) that `rank` of `world` ranks
    holds: seq // world of them, as the C++ seqpar::local_positions. `causal` matters for
    strategies "wallfacer" and "double-ring" (zigzag layout when causal); `docs` (document
    lengths) for layout="balanced"; `inner` is the double ring's inner ring length W (required
    with strategy "double-ring", W dividing world). Give it the arguments the attention takes: an attention of this process
    whose layout of `seq` tokens over `world` ranks differs from the latest one handed out here
    raises ValueError instead of computing on misplaced rows."""
    seq, world, rank = _int("seq", seq), _int("world", world), _int("rank", rank)
    args = _LayoutArgs(_str("strategy", strategy), _int("teams", teams), _int("ulysses", ulysses),
                       bool(causal), _docs(docs), _str("layout", layout), _int("inner", inner))
    pos = args.positions(seq, world, rank)
    _handed_out[(seq, world)] = args
    return pos


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
              dtype="fp32", layout="strategy", inner=0)

    comm: an mpi4py communicator (default MPI.COMM_WORLD); wallfacer works on a duplicate of it and
    never starts or ends MPI. Building one is collective over comm, and so are forward, backward
    and close: every rank calls them in the same order. forward(q, k, v) takes this rank's rows
    (local_positions order): q (batch, local_seq, heads, head_dim), k and v (batch, local_seq,
    kv_heads, head_dim), C-contiguous float32 (dtype="fp32") or bfloat16 bits as uint16
    (dtype="bf16"), and returns o like q; `lse` (batch, heads, local_seq, float32) holds the
    forward's log-sum-exp. backward(dout) returns (dq, dk, dv) of the latest forward.
    local_positions(seq) gives this rank's positions in the attention's layout; forward raises
    ValueError when the latest wallfacer.local_positions for the sequence and ranks gave another.
    """

    def __init__(self, comm=None, strategy="wallfacer", teams=1, ulysses=1, causal=False,
                 docs=None, dtype="fp32", layout="strategy", inner=0):
        self._impl = None
        dtype = _str("dtype", dtype)
        impl = _wallfacer.Attention(_str("strategy", strategy), _int("teams", teams),
                                    _int("ulysses", ulysses), bool(causal), _docs(docs), dtype,
                                    _str("layout", layout), _int("inner", inner))
        if comm is None:
            comm = _need("mpi4py.MPI", "mpi4py", "python3-mpi4py", "mpi4py").COMM_WORLD
        if not hasattr(comm, "py2f"):
            raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
        impl.connect(comm.py2f())
        self._impl = impl
        self._layout = _LayoutArgs(strategy, teams, ulysses, causal, _docs(docs), layout, inner)
        self.dtype = dtype
        self.lse = None
        self._saved = None

    @property
    def rank(self):
        return self._impl.rank

    @property
    def size(self):
        return self._impl.size

    def local_positions(self, seq):
        """The global positions of the rows this rank holds in the attention's layout of `seq`
        tokens: the rows forward takes (as wallfacer.local_positions with its arguments)."""
        a = self._layout
        return local_positions(seq, self.size, self.rank, a.strategy, a.teams, a.ulysses,
                               a.docs, causal=a.causal, layout=a.layout, inner=a.inner)

    def _check_layout(self, local_seq, call="wallfacer.Attention", docs=None):
        args = self._layout if docs is None else self._layout._replace(docs=docs or None)
        _check_layout(local_seq * self.size, self.size, args, call)

    def forward(self, q, k, v):
        q, k, v = _check_qkv(q, k, v, self.dtype)
        self._check_layout(q.shape[1])
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
        docs = _docs(docs)
        self._impl.set_documents(docs)
        self._layout = _LayoutArgs(*self._layout[:4], docs, self._layout.layout,
                                   self._layout.inner)

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
