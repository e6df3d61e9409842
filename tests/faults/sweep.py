#!/usr/bin/env python3
"""Bad-input and fault sweep of the whole wallfacer CLI (docs/faults.md, "The sweep").

Runs every case in a fresh temporary folder with a hard time limit and classifies the result:

  OK       the expected exit code and exactly one error line that matches the case's pattern
           (it names the bad thing), nothing half-written, nothing lost
  HANG     the case ran past the time limit
  CRASH    a signal, a sanitizer report, 'terminate called', or std:: exception text
  SILENT   exit 0 on bad input, or a wrong result
  LOSS     a file that existed was damaged, or a half-written file was left behind
  UNCLEAR  a message that does not name the bad thing (a library's internal text, no error line,
           several), or exit 1 for a usage error (and 2 for a fault)

Prints a table and the count per class; exits 1 when any case is not OK.

  tests/faults/sweep.py --wf build/wallfacer [--mpirun tests/mpirun.sh] [--quick] [-k PATTERN]

--quick runs a representative subset (every subcommand and every kind of fault, a few values per
flag) for ctest; without it every case runs (`make sweep`).
"""

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

LIMIT_S = 60

# Texts that come from a library or the runtime, not from a wallfacer message.
CRASH_MARKERS = [
    "terminate called", "AddressSanitizer", "runtime error:", "Segmentation fault",
    "core dumped", "what():", "Aborted", "LeakSanitizer",
]
UNCLEAR_MARKERS = [
    "stoi", "stol", "stod", "stoull", "bad_alloc", "basic_string", "vector::", "std::",
    "[json.exception", "bad optional access", "bad_variant", "filesystem error", "Unknown error",
]

# ---------------------------------------------------------------------------------------------
# Fixtures: built once per sweep, read-only for the cases (a case copies what it changes).

CORPUS_LINE = "Verse {}: and the {} lamps were lit, and the {} doors were opened.\n"



def tiny_config():
    """The tiny GPT config of the GPT CLI tests (tests/gpt/common.sh), with {data} for its data
    folder and 2 steps (the fixture run checkpoints both)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../gpt/common.sh")) as f:
        text = f.read()
    body = re.search(r'cat > "\$work/tiny.toml" <<TOML\n(.*?)\nTOML\n', text, re.S).group(1)
    body = body.replace("$work/data", "{data}") + "\n"
    for key, value in (("steps", "2"), ("warmup", "1"), ("eval_every", "2")):
        body, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", body)
        assert n == 1, key
    return body


TINY = tiny_config()

DIT = """[model]
kind = "dit"
layers = 1
dim = 32
heads = 2
mlp_ratio = 2
patch = 4
freq_dim = 16
classes = 2

[data]
frames = 2
size = 16
channels = 3
clips = 8

[train]
batch = 2
steps = 1
lr = 1e-3
warmup = 1
seed = 1
ckpt_every = 1

[parallel]
sp = 1
strategy = "ring"
"""


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def token_shard(path, vocab, count, tokens, magic=b"WFTOKENS", version=1, checksum=None):
    body = b"".join(struct.pack("<H", t) for t in tokens)
    h = fnv1a64(body) if checksum is None else checksum
    hdr = magic + struct.pack("<IIIIQQ", version, 64, 2, vocab, count, h) + bytes(24)
    with open(path, "wb") as f:
        f.write(hdr + body)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tree_sums(root):
    sums = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            sums[os.path.relpath(p, root)] = sha(p)
    return sums


class Env:
    def __init__(self, wf, mpirun, fix):
        self.wf, self.mpirun, self.fix = wf, mpirun, fix

    def run(self, argv, cwd, np_=0, timeout=LIMIT_S, fsize=None, stdout_full=False):
        cmd = [self.wf] + argv
        if np_:
            cmd = [self.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + cmd

        def limits():
            os.setsid()
            if fsize is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

        env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none")
        t0 = time.time()
        sink = open("/dev/full", "wb") if stdout_full else None
        p = subprocess.Popen(cmd, cwd=cwd, stdout=sink or subprocess.PIPE,
                             stderr=subprocess.PIPE if sink else subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, preexec_fn=limits)
        if sink:
            sink.close()
        try:
            out, err = p.communicate(timeout=timeout)
            out = (out or b"") + (err or b"")
            return p.returncode, out.decode(errors="replace"), time.time() - t0, False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            out = (out or b"") + (err or b"")
            return None, out.decode(errors="replace"), time.time() - t0, True


def build_fixtures(env):
    fix = env.fix
    with open(f"{fix}/corpus.txt", "w") as f:
        for i in range(1, 401):
            f.write(CORPUS_LINE.format(i, i % 7, i % 11))
    steps = [
        ["prepare", "--input", f"{fix}/corpus.txt", "--out", f"{fix}/data", "--val-fraction",
         "0.05"],
    ]
    for argv in steps:
        rc, out, _, _ = env.run(argv, fix)
        if rc != 0:
            sys.exit(f"fixture {argv}: exit {rc}: {out}")
    with open(f"{fix}/tiny.toml", "w") as f:
        f.write(TINY.format(data=f"{fix}/data"))
    with open(f"{fix}/dit.toml", "w") as f:
        f.write(DIT)
    with open(f"{fix}/model.toml", "w") as f:
        f.write('[model]\nname = "tiny"\nkind = "gpt"\nlayers = 1\ndim = 64\nheads = 2\n'
                'kv_heads = 2\nmlp_ratio = 4\nvocab = 257\ncausal = true\n')
    for argv in (
        ["train", "--config", f"{fix}/tiny.toml", "--out", f"{fix}/g", "--progress", "none",
         "--set", "train.ckpt_every=1"],
        ["train", "--config", f"{fix}/dit.toml", "--out", f"{fix}/d", "--progress", "none"],
        ["attn", "--strategy", "ring", "--seq", "64", "--heads", "2", "--head-dim", "8",
         "--iters", "1", "--trace", f"{fix}/trace.json"],
    ):
        rc, out, _, _ = env.run(argv, fix)
        if rc != 0:
            sys.exit(f"fixture {argv}: exit {rc}: {out}")


# ---------------------------------------------------------------------------------------------
# Cases. Each: name, argv (strings may hold {fix} and {tmp}), want (expected exit codes; 0 means a
# value that may be accepted), pat (regex the error line must match), np (ranks under mpirun, 0:
# none), setup(tmp) and check(tmp) -> None or (class, what).


class Case:
    def __init__(self, name, argv, want=(2,), pat=None, np_=0, setup=None, check=None,
                 quick=False, repeat=1, fsize=None, needs_mount=False, limit=LIMIT_S,
                 stdout_full=False):
        self.name, self.argv, self.want, self.pat, self.np = name, argv, tuple(want), pat, np_
        self.setup, self.check, self.quick, self.repeat = setup, check, quick, repeat
        self.fsize, self.needs_mount, self.limit = fsize, needs_mount, limit
        self.stdout_full = stdout_full


CASES = []


def case(*a, **k):
    CASES.append(Case(*a, **k))


def train(*extra):
    return ["train", "--config", "{fix}/tiny.toml", "--out", "{tmp}/run", "--progress",
            "none"] + list(extra)


def dit(*extra):
    return ["train", "--config", "{fix}/dit.toml", "--out", "{tmp}/run", "--progress",
            "none"] + list(extra)


ATTN = ["attn", "--strategy", "ring", "--seq", "64", "--heads", "2", "--head-dim", "8",
        "--iters", "1"]
BENCH = ["bench", "kernel", "--seq", "64", "--heads", "1", "--head-dim", "8", "--iters", "1",
         "--full"]
PLAN = ["plan", "--cluster", "{src}/configs/clusters/local.toml", "--model",
        "{src}/configs/models/gpt-3b.toml", "--seq", "8K"]
TUNE = ["tune", "--model", "{fix}/model.toml", "--seq", "256", "--cluster",
        "{src}/configs/clusters/local.toml", "--top", "1", "--iters", "1", "--steps", "0",
        "--out", "{tmp}/tuned.toml"]
SAMPLE = ["sample", "--ckpt", "{fix}/g", "--tokens", "4"]
DSAMPLE = ["sample", "--ckpt", "{fix}/d", "--out", "{tmp}/x.gif", "--steps", "1", "--scale", "1"]
PLOT = ["trace-plot", "{fix}/trace.json", "--out", "{tmp}/t.png"]

# Bad values for numbers: negative, zero, huge, not finite, not a number, empty.
INT_BAD = ["-1", "0", "2147483648", "9223372036854775808", "1e300", "nan", "inf", "abc", "", "3.5",
           "-9223372036854775809"]
REAL_BAD = ["-1", "0", "1e300", "nan", "inf", "-inf", "abc", "", "1e-320"]


def no_file(rel, cls="SILENT"):
    def check(tmp):
        if os.path.exists(os.path.join(tmp, rel)):
            return (cls, f"{rel} was written")
    return check


def no_tmp_left(tmp):
    for d, dirs, files in os.walk(tmp):
        for n in files + dirs:
            if n.endswith(".tmp"):
                return ("LOSS", f"half-written {os.path.join(d, n)} left behind")


def numeric_flags():
    # (command prefix, flag, values that may be accepted, quick values)
    ints = [
        (ATTN, "--seq", {"2147483648", "9223372036854775808", "1e300"}),
        (ATTN, "--heads", set()), (ATTN, "--head-dim", set()), (ATTN, "--batch", set()),
        (ATTN, "--kv-heads", set()), (ATTN, "--teams", set()), (ATTN, "--ulysses", set()),
        (ATTN, "--iters", set()), (ATTN, "--seed", {"0", "-1", "2147483648",
                                                   "9223372036854775808"}),
        (ATTN, "--progress-rows", {"0", "2147483648", "9223372036854775808", "1e300"}),
        (ATTN, "--node-size", set()),
        (BENCH, "--heads", set()), (BENCH, "--kv-heads", set()), (BENCH, "--head-dim", set()),
        (BENCH, "--batch", set()), (BENCH, "--iters", set()), (BENCH, "--seq", set()),
        (PLAN, "--gpus", {"0"}), (PLAN, "--seq", {"2147483648"}),
        (TUNE, "--top", set()), (TUNE, "--iters", set()), (TUNE, "--steps", {"0"}),
        (TUNE, "--seq", set()),
        (SAMPLE, "--tokens", {"0"}), (SAMPLE, "--seed", {"0", "-1", "2147483648",
                                                         "9223372036854775808"}),
        (DSAMPLE, "--steps", set()), (DSAMPLE, "--scale", set()), (DSAMPLE, "--class", {"0"}),
        (PLOT, "--width", set()),
        (train(), "--steps", {"2147483648"}),
        (train(), "--check-ranks", set()),
    ]
    reals = [
        (["prepare", "--input", "{fix}/corpus.txt", "--out", "{tmp}/p"], "--val-fraction",
         {"0", "1e-320"}),
        (SAMPLE, "--temperature", {"0", "1e300", "1e-320"}),
        (train("--steps", "1"), "--timeout", {"0", "1e300", "1e-320"}),
        (train("--steps", "1"), "--max-memory", {"1e300"}),
        (ATTN, "--timeout", {"0", "1e300", "1e-320"}),
    ]
    for kind, table, bad in (("int", ints, INT_BAD), ("real", reals, REAL_BAD)):
        for prefix, flag, ok in table:
            for i, v in enumerate(bad):
                if v in ok and flag == "--steps" and prefix[0] == "train":
                    continue  # a valid number of steps that takes long
                argv = list(prefix)
                # replace an existing value of the flag, or add it
                if flag in argv:
                    argv[argv.index(flag) + 1] = v
                else:
                    argv += [flag, v]
                cmd = " ".join(prefix[:2]) if prefix[0] == "bench" else prefix[0]
                name = f"{cmd} {flag} {v!r}"
                want = (0, 2) if v in ok else (2,)
                flagname = re.escape(flag)
                if flag == "--seq" and prefix[0] in ("tune", "plan"):
                    flagname = r"(--seq|at seq \d+)"  # a length no configuration can run
                case(name, argv, want=want, pat=flagname, quick=(i in (0, 4, 7)),
                     check=no_tmp_left)


numeric_flags()

# --- config keys (--set and files) ---------------------------------------------------------
KEYS_INT = ["model.layers", "model.dim", "model.heads", "model.kv_heads", "model.mlp_ratio",
            "model.vocab", "train.seq", "train.batch", "train.steps", "train.warmup",
            "train.ckpt_every", "train.keep_checkpoints", "train.eval_every",
            "train.eval_batches", "parallel.sp", "parallel.teams", "parallel.ulysses"]
KEYS_REAL = ["train.lr", "train.min_lr", "train.weight_decay", "train.beta1", "train.beta2",
             "train.grad_clip", "model.rope_theta", "train.timeout"]
for k in KEYS_INT:
    for i, v in enumerate(["-1", "x", "1.5", "99999999999999999999", "true", ""]):
        if k in ("train.keep_checkpoints", "parallel.ulysses", "train.warmup",
                 "train.ckpt_every", "train.eval_every") and v == "-1":
            want = (0, 2)
        else:
            want = (2,)
        case(f"--set {k}={v}", train("--set", f"{k}={v}"), want=want, pat=re.escape(k),
             quick=(i == 0 and k in ("model.dim", "train.seq")) or (i == 1 and k == "model.layers"))
    case(f"--set {k}=0", train("--set", f"{k}=0"),
         want=(0, 2) if k in ("train.keep_checkpoints", "parallel.ulysses", "train.warmup",
                              "train.ckpt_every", "train.eval_every", "train.eval_batches",
                              "parallel.teams") else (2,),
         pat=re.escape(k))
for k in KEYS_REAL:
    for i, v in enumerate(["nan", "inf", "-inf", "-1", "x", "1e400", ""]):
        ok = (k in ("train.weight_decay", "train.grad_clip") and v == "inf") or \
             (k == "train.timeout" and v == "inf")
        case(f"--set {k}={v}", train("--set", f"{k}={v}"),
             want=(0, 2) if ok else (2,), pat=re.escape(k), quick=(i == 0 and k == "train.lr"))
for k, vals in {"model.kind": ["gpt2", "", "1"], "parallel.strategy": ["bogus", ""],
                "parallel.checkpointing": ["bogus"], "train.time_sampling": ["bogus"],
                "parallel.keep_kv": ["maybe", "2"], "train.trace_steps": ["[3]", "[5,1]",
                                                                           "[-1,2]", "x"]}.items():
    for v in vals:
        case(f"--set {k}={v}", train("--set", f"{k}={v}"), pat=re.escape(k))
case("--set unknown key", train("--set", "train.lrr=1"), pat="unknown config key 'train.lrr'",
     quick=True)
case("--set no '='", train("--set", "train.lr"), pat="train.lr")
case("--set empty", train("--set", ""), pat="--set")
case("--set section only", train("--set", "model=1"), pat="model")
case("--set data.dir missing", train("--set", "data.dir={tmp}/nowhere"), pat="nowhere")
case("--set data.dir a file", train("--set", "data.dir={fix}/corpus.txt"), pat="corpus.txt")
case("--set non-UTF-8 string", train("--set", "parallel.strategy=\udcff"), pat="UTF-8")

# sizes whose memory need is absurd: the estimate and the limit, before allocating
for k, v in [("model.dim", "1e9"), ("model.dim", "1048576"), ("model.vocab", "16777216"),
             ("train.batch", "1048576"), ("train.seq", "4294967296"),
             ("model.heads", "1048576")]:
    case(f"absurd {k}={v}", train("--set", f"{k}={v}"),
         pat=f"(needs about .* the limit is|{re.escape(k)})", quick=(k == "model.dim"))
case("train.seq larger than the data", train("--set", "train.seq=65536"),
     pat="(train.seq|tokens)", quick=True)
case("dit huge frames", dit("--set", "data.frames=1048576", "--set", "data.size=65536"),
     pat="(data.frames|data.size|needs about)")
case("dit data.size not a multiple of patch", dit("--set", "data.size=18"),
     pat="(data.size|model.patch)")
case("dit classes 5", dit("--set", "model.classes=5"), pat="model.classes")
case("dit channels 0", dit("--set", "data.channels=0"), pat="data.channels")
case("dit clips 0", dit("--set", "data.clips=0"), pat="data.clips")
case("dit patch 0", dit("--set", "model.patch=0"), pat="model.patch")
case("dit freq_dim odd", dit("--set", "model.freq_dim=-3"), pat="model.freq_dim")
case("attn --head-dim 1000000", ATTN[:8] + ["1000000"], pat="--head-dim", quick=True)
case("bench --heads 2000000000", ["bench", "kernel", "--heads", "2000000000"],
     pat="needs about", quick=True)
case("attn 10M tokens", ["attn", "--strategy", "ring", "--seq", "10000000", "--heads", "64",
                         "--head-dim", "128"], pat="needs about")
case("attn --max-memory 0", ATTN + ["--max-memory", "0"], pat="--max-memory")
case("train --max-memory tiny", train("--max-memory", "0.0001"), pat="the limit is 0.0001 GiB")
case("bench kernel --max-memory tiny", BENCH + ["--max-memory", "1e-6"],
     pat="(the limit is|--max-memory)")


# --- config files --------------------------------------------------------------------------
def write(path, text, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


def cfg_case(name, text, pat, quick=False):
    def setup(tmp, text=text):
        write(f"{tmp}/c.toml", text.replace("{data}", f"{FIX}/data"))
    case(name, ["train", "--config", "{tmp}/c.toml", "--out", "{tmp}/run", "--progress", "none"],
         pat=pat, setup=setup, quick=quick)


BASE = TINY
cfg_case("config: TOML syntax error", BASE + "\n[train\n", r"c\.toml:\d+", quick=True)
cfg_case("config: unknown section key", BASE + "\n[extra]\nfoo = 1\n", "extra.foo")
cfg_case("config: top-level key", "lr = 1\n" + BASE, "lr")
cfg_case("config: string for int", BASE.replace("layers = 2", 'layers = "2"'), "model.layers")
cfg_case("config: float for int", BASE.replace("layers = 2", "layers = 2.0"), "model.layers")
cfg_case("config: int out of int32", BASE.replace("layers = 2", "layers = 4294967297"),
         "model.layers")
cfg_case("config: array for number", BASE.replace("lr = 3e-3", "lr = [1]"), "train.lr")
cfg_case("config: nan lr", BASE.replace("lr = 3e-3", "lr = nan"), "train.lr")
cfg_case("config: inf lr", BASE.replace("lr = 3e-3", "lr = inf"), "train.lr")
cfg_case("config: bool for string", BASE.replace('strategy = "ring"', "strategy = true"),
         "parallel.strategy")
cfg_case("config: duplicate key", BASE.replace("dim = 32", "dim = 32\ndim = 64"), r"c\.toml")
cfg_case("config: empty file", "", "(data|model|train|config)")
cfg_case("config: binary", "\x00\x01\x02\xff", r"c\.toml")
cfg_case("config: heads not dividing dim", BASE.replace("dim = 32", "dim = 30"),
         "(model.dim|model.heads)")
cfg_case("config: kv_heads not dividing heads", BASE.replace("kv_heads = 4", "kv_heads = 3"),
         "model.kv_heads")
case("--config missing", ["train", "--config", "{tmp}/none.toml", "--out", "{tmp}/r"],
     pat="none.toml", quick=True)
case("--config a folder", ["train", "--config", "{tmp}", "--out", "{tmp}/r"], pat="is a folder")
case("--config under a file", ["train", "--config", "{fix}/tiny.toml/x.toml", "--out",
                               "{tmp}/r"], pat="x.toml")
case("--config absent", ["train", "--out", "{tmp}/r"], pat="--config")
case("--progress bogus", train("--progress", "bogus"), pat="--progress")

# --- token shards --------------------------------------------------------------------------
MANY = [65] * 300


def data_case(name, make, pat, quick=False, want=(2,)):
    def setup(tmp):
        os.makedirs(f"{tmp}/data")
        shutil.copy(f"{FIX}/data/val.bin", f"{tmp}/data/val.bin")
        make(f"{tmp}/data")
    case(name, train("--set", "data.dir={tmp}/data"), pat=pat, setup=setup, quick=quick,
         want=want)


data_case("shard: train.bin missing", lambda d: None, "train.bin", quick=True)
data_case("shard: train.bin a folder", lambda d: os.makedirs(f"{d}/train.bin"), "train.bin")
data_case("shard: empty", lambda d: write(f"{d}/train.bin", ""), "train.bin")
data_case("shard: header only, truncated",
          lambda d: write(f"{d}/train.bin", "WFTOKENS\x01\x00"), "train.bin")
data_case("shard: wrong magic", lambda d: token_shard(f"{d}/train.bin", 257, 300, MANY,
                                                      magic=b"NOTTOKEN"), "train.bin", quick=True)
data_case("shard: wrong version", lambda d: token_shard(f"{d}/train.bin", 257, 300, MANY,
                                                        version=9), "version")
data_case("shard: vocab 0", lambda d: token_shard(f"{d}/train.bin", 0, 300, MANY), "vocabulary 0")
data_case("shard: vocab 2^32-1", lambda d: token_shard(f"{d}/train.bin", 4294967295, 300, MANY),
          "vocabulary 4294967295")
data_case("shard: count wraps", lambda d: token_shard(f"{d}/train.bin", 257, 2**63, MANY),
          "train.bin")
data_case("shard: count 2^64-1", lambda d: token_shard(f"{d}/train.bin", 257, 2**64 - 1, MANY),
          "train.bin")
data_case("shard: count larger than file", lambda d: token_shard(f"{d}/train.bin", 257, 301,
                                                                 MANY), "train.bin")
data_case("shard: count 0", lambda d: token_shard(f"{d}/train.bin", 257, 0, []), "train.bin")
data_case("shard: bad checksum", lambda d: token_shard(f"{d}/train.bin", 257, 300, MANY,
                                                       checksum=1), "train.bin")
data_case("shard: id past vocabulary", lambda d: token_shard(f"{d}/train.bin", 257, 300,
                                                             MANY[:-1] + [300]),
          "outside its vocabulary", quick=True)
data_case("shard: fewer tokens than a sequence",
          lambda d: token_shard(f"{d}/train.bin", 257, 10, [65] * 10), "(train.bin|train.seq)")
data_case("shard: val vocab above model", lambda d: (
    token_shard(f"{d}/train.bin", 257, 300, MANY), token_shard(f"{d}/val.bin", 300, 300, MANY)),
    "model.vocab")
data_case("shard: val.bin missing", lambda d: (token_shard(f"{d}/train.bin", 257, 300, MANY),
                                                os.remove(f"{d}/val.bin")), "val.bin",
          want=(0, 2))
data_case("shard: trailing bytes", lambda d: (token_shard(f"{d}/train.bin", 257, 300, MANY),
                                               write(f"{d}/train.bin", "xyz", "a")), "train.bin")

# --- prepare -------------------------------------------------------------------------------
case("prepare missing input", ["prepare", "--input", "{tmp}/none.txt", "--out", "{tmp}/p"],
     pat="none.txt", quick=True, check=no_file("p/train.bin"))
case("prepare input a folder", ["prepare", "--input", "{tmp}", "--out", "{tmp}/p"],
     pat="is a folder")
case("prepare no input", ["prepare", "--out", "{tmp}/p"], pat="--input")
case("prepare no out", ["prepare", "--input", "{fix}/corpus.txt"], pat="--out")
case("prepare empty input", ["prepare", "--input", "{tmp}/e.txt", "--out", "{tmp}/p"],
     pat="(e.txt|empty|tokens)", setup=lambda t: write(f"{t}/e.txt", ""), want=(0, 2))
case("prepare out under a file", ["prepare", "--input", "{fix}/corpus.txt", "--out",
                                  "{fix}/corpus.txt/p"], pat="--out", quick=True)
case("prepare val-fraction 1", ["prepare", "--input", "{fix}/corpus.txt", "--out", "{tmp}/p",
                                 "--val-fraction", "1"], pat="--val-fraction")
case("prepare val-fraction 2", ["prepare", "--input", "{fix}/corpus.txt", "--out", "{tmp}/p",
                                "--val-fraction", "2"], pat="--val-fraction")
case("prepare tiny input (no val token)",
     ["prepare", "--input", "{tmp}/e.txt", "--out", "{tmp}/p"], want=(0, 2),
     pat="(e.txt|tokens|--val-fraction)", setup=lambda t: write(f"{t}/e.txt", "a"))


def full_fs(tmp):
    os.makedirs(f"{tmp}/full")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", f"{tmp}/full"],
                   check=True)
    # fill it but for a few bytes
    with open(f"{tmp}/full/fill", "wb") as f:
        try:
            f.write(b"x" * (64 * 1024 - 100))
        except OSError:
            pass


def full_then(extra):
    def setup(tmp):
        full_fs(tmp)
        if extra:
            extra(tmp)
    return setup


case("prepare out on a full disk", ["prepare", "--input", "{fix}/corpus.txt", "--out",
                                    "{tmp}/full/p"], want=(1, 2), pat="full/p",
     setup=full_then(None), needs_mount=True, check=no_tmp_left, quick=True)

# --- train outputs and checkpoints -------------------------------------------------------------
case("train --out under a file", ["train", "--config", "{fix}/tiny.toml", "--out",
                                  "{fix}/tiny.toml/run"], pat="--out", quick=True)
case("train --out on a full disk", ["train", "--config", "{fix}/tiny.toml", "--out",
                                    "{tmp}/full/run", "--progress", "none", "--set",
                                    "train.ckpt_every=1"],
     want=(1, 2), pat="(full/run|No space)", setup=full_then(None), needs_mount=True,
     check=no_tmp_left, quick=True)
case("train --trace under a file", train("--trace", "{fix}/tiny.toml/t.json"), pat="t.json")


def copy_run(name="g"):
    def setup(tmp):
        shutil.copytree(f"{FIX}/{name}", f"{tmp}/run")
    return setup


def run_unchanged(tmp, before):
    now = tree_sums(f"{tmp}/run")
    for k, v in before.items():
        if os.path.basename(k).startswith("loss"):
            continue  # the loss plot's files are drawn again from metrics.jsonl
        if now.get(k) != v:
            return ("LOSS", f"{k} changed or removed")


class Snap:
    """setup that copies the fixture run, changes it, and remembers its sums; check compares."""

    def __init__(self, change=None, name="g"):
        self.change, self.name, self.sums = change, name, None

    def setup(self, tmp):
        shutil.copytree(f"{FIX}/{self.name}", f"{tmp}/run")
        if self.change:
            self.change(f"{tmp}/run")
        self.sums = tree_sums(f"{tmp}/run")

    def check(self, tmp):
        return run_unchanged(tmp, self.sums)


def run_case(name, argv, pat, change=None, want=(2,), quick=False, runname="g", extra=None,
             np_=0, keep=True):
    s = Snap(change, runname)

    def check(tmp):
        r = s.check(tmp) if keep else None
        return r or (extra(tmp) if extra else None)
    case(name, argv, want=want, pat=pat, setup=s.setup, check=check, quick=quick, np_=np_)


def manifest(run, step=2):
    return f"{run}/ckpt/step-{step}/manifest.json"


def edit_manifest(fn, step=2):
    def change(run):
        p = manifest(run, step)
        with open(p) as f:
            m = json.load(f)
        fn(m)
        with open(p, "w") as f:
            json.dump(m, f)
    return change


def only_newest(change):
    def c(run):
        shutil.rmtree(f"{run}/ckpt/step-1")
        change(run)
    return c


RESUME = train("--resume", "--steps", "3")
run_case("fresh train into a run", train(), "--resume.*--overwrite", quick=True)
run_case("--resume and --overwrite", train("--resume", "--overwrite"), "--overwrite")
case("--resume with no checkpoint", train("--resume"), pat="--resume")


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 1]))


def fell_back(tmp):
    return None


for what, fn in [
    ("format missing", lambda m: m.pop("format")),
    ("version 99", lambda m: m.update(version=99)),
    ("step missing", lambda m: m.pop("step")),
    ("step a string", lambda m: m.update(step="2")),
    ("step 1e300", lambda m: m.update(step=1e300)),
    ("step -1", lambda m: m.update(step=-1)),
    ("world 0", lambda m: m.update(world=0)),
    ("world 2^40", lambda m: m.update(world=2**40)),
    ("shards empty", lambda m: m.update(shards=[])),
    ("shards not a list", lambda m: m.update(shards={})),
    ("shard file ../", lambda m: m["shards"][0].update(file="../../../data/train.bin")),
    ("shard file absolute", lambda m: m["shards"][0].update(file="/etc/passwd")),
    ("shard bytes wrong", lambda m: m["shards"][0].update(bytes=12)),
    ("shard bytes -1", lambda m: m["shards"][0].update(bytes=-1)),
    ("shard fnv a float", lambda m: m["shards"][0].update(fnv1a64=1.5)),
    ("shard num_params 2^64-1", lambda m: m["shards"][0].update(num_params=2**64 - 1)),
    ("shard first_param 1", lambda m: m["shards"][0].update(first_param=1)),
    ("shard ranks [5]", lambda m: m["shards"][0].update(ranks=[5])),
    ("config missing", lambda m: m.pop("config")),
    ("config not TOML", lambda m: m.update(config="[model\n")),
    ("config another dim", lambda m: m.update(config=m["config"].replace("dim = 32",
                                                                         "dim = 64"))),
]:
    # the only checkpoint damaged: refused, naming the manifest
    run_case(f"manifest {what}", RESUME, r"(manifest|step-2|--resume)",
             change=only_newest(edit_manifest(fn)), want=(1, 2),
             quick=what in ("step 1e300", "shard file ../"))
    # the newest damaged, an older one good: falls back and says so
    if what in ("step 1e300", "shard bytes wrong", "version 99", "config not TOML"):
        run_case(f"fall back past manifest {what}", RESUME,
                 r"skipping checkpoint .*step-2.*\n(.*\n)*.*resumed from .*step-1",
                 change=edit_manifest(fn), want=(0,), keep=False)

# --- checkpoint shards -------------------------------------------------------------------------
def shard_of(run, step=2):
    return f"{run}/ckpt/step-{step}/state.bin"


def truncate(n):
    def change(path):
        with open(path, "r+b") as f:
            f.truncate(n)
    return change


SHARD_DAMAGE = [
    ("payload byte flipped", lambda p: flip(p, os.path.getsize(p) - 5)),
    ("header step flipped", lambda p: flip(p, 32)),
    ("magic flipped", lambda p: flip(p, 0)),
    ("truncated to the header", truncate(96)),
    ("truncated to 10 bytes", truncate(10)),
    ("empty", truncate(0)),
    ("missing", os.remove),
    ("a folder", lambda p: (os.remove(p), os.makedirs(p))),
    ("extra bytes", lambda p: write(p, "xx", "a")),
]
for what, fn in SHARD_DAMAGE:
    run_case(f"shard {what}", RESUME, r"state\.bin",
             change=only_newest(lambda run, fn=fn: fn(shard_of(run))), want=(1,),
             quick=what in ("payload byte flipped", "missing"))
    run_case(f"fall back past shard {what}", RESUME,
             r"skipping checkpoint .*step-2.*\n(.*\n)*.*resumed from .*step-1",
             change=lambda run, fn=fn: fn(shard_of(run)), want=(0,), keep=False,
             quick=what == "header step flipped")
run_case("manifest missing (step-2 skipped)", RESUME, r"resumed from .*step-1",
         change=lambda run: os.remove(manifest(run)), want=(0,), keep=False)
run_case("step folder name not a number", RESUME, r"resumed from .*step-2",
         change=lambda run: os.makedirs(f"{run}/ckpt/step-x"), want=(0,), keep=False)
run_case("ckpt a file", RESUME, r"ckpt",
         change=lambda run: (shutil.rmtree(f"{run}/ckpt"), write(f"{run}/ckpt", "x")),
         want=(1, 2))

# --resume with another model shape: refused; with a changed safe key: allowed and printed
run_case("--resume with another model.dim", train("--resume", "--steps", "3", "--set",
                                                   "model.dim=64"),
         r"another model shape \(model.dim 32 -> 64\)", quick=True)
run_case("--resume with another vocab", train("--resume", "--steps", "3", "--set",
                                               "model.vocab=300"), r"model.vocab 257 -> 300")
run_case("--resume with another lr (allowed)", train("--resume", "--steps", "3", "--set",
                                                      "train.lr=1e-3"),
         r"resuming with changed settings: .*train.lr", want=(0,), keep=False, quick=True)
run_case("--resume DiT shape change", dit("--resume", "--steps", "2", "--set", "model.dim=64"),
         r"another model shape", runname="d")
run_case("--resume GPT checkpoint with DiT config", dit("--resume", "--steps", "3"),
         r"model.kind", want=(2,))
run_case("--resume --steps below the checkpoint", train("--resume", "--steps", "1"),
         r"step 2, past train.steps")


# --- metrics.jsonl read back on --resume --------------------------------------------------------
def metrics_edit(fn):
    def change(run):
        p = f"{run}/metrics.jsonl"
        with open(p) as f:
            lines = f.read().splitlines(True)
        with open(p, "w") as f:
            f.write(fn(lines))
    return change


def kept_line(text):
    def check(tmp):
        with open(f"{tmp}/run/metrics.jsonl") as f:
            if text not in f.read():
                return ("LOSS", f"the line with {text!r} was dropped from metrics.jsonl")
    return check


for what, new, quick in [("1e300", "1e300", True), ("-1", "-1", False), ('"x"', '"x"', True),
                         ("1.5", "1.5", False), ("null", "null", False)]:
    run_case(f"metrics step {what}", train("--resume", "--steps", "3"), r"metrics\.jsonl:1",
             change=metrics_edit(lambda ls, new=new: re.sub(r'"step":\s*1\b', f'"step":{new}',
                                                            ls[0]) + "".join(ls[1:])),
             want=(1,), quick=quick)
run_case("metrics middle line not JSON", train("--resume", "--steps", "3"),
         r"metrics\.jsonl:1",
         change=metrics_edit(lambda ls: "garbage\n" + "".join(ls[1:])), want=(1,))
run_case("metrics truncated last line (skipped)", train("--resume", "--steps", "3"),
         r"incomplete last line .*metrics\.jsonl",
         change=metrics_edit(lambda ls: "".join(ls[:-1]) + ls[-1][: len(ls[-1]) // 2]),
         want=(0,), keep=False, quick=True)
run_case("metrics a folder", train("--resume", "--steps", "3"), r"metrics\.jsonl",
         change=lambda run: (os.remove(f"{run}/metrics.jsonl"),
                             os.makedirs(f"{run}/metrics.jsonl")), want=(1, 2))

# --- training numerics ---------------------------------------------------------------------
class Diverge:
    """A resumed run that diverges: the checkpoint it resumed from stays as it was, and nothing
    non-finite reaches metrics.jsonl or a checkpoint."""

    def setup(self, tmp):
        shutil.copytree(f"{FIX}/g", f"{tmp}/run")
        self.sums = tree_sums(f"{tmp}/run/ckpt/step-2")

    def check(self, tmp):
        if tree_sums(f"{tmp}/run/ckpt/step-2") != self.sums:
            return ("LOSS", "the checkpoint of step 2 changed")
        with open(f"{tmp}/run/metrics.jsonl") as f:
            if re.search(r"nan|inf", f.read(), re.I):
                return ("LOSS", "a non-finite loss was written to metrics.jsonl")


dv = Diverge()
case("huge lr on resume: last checkpoint untouched",
     train("--resume", "--steps", "6", "--set", "train.lr=1e30", "--set", "train.ckpt_every=1",
           "--set", "train.grad_clip=0"), pat="diverged", want=(1,), quick=True,
     setup=dv.setup, check=dv.check)
case("huge lr fresh", train("--set", "train.lr=1e30", "--set", "train.grad_clip=0", "--steps",
                            "3", "--set", "train.ckpt_every=1"), want=(1,), pat="diverged")
case("lr=1e38 fresh", train("--set", "train.lr=1e38", "--steps", "2"), want=(1, 2),
     pat=r"(diverged|train.lr)")
case("lr=1e-320 (denormal)", train("--set", "train.lr=1e-320", "--steps", "1"), want=(0, 2),
     pat="train.lr")

# --- multi-rank: errors only some ranks see end the job, the message printed once ----------------
MP = []


def mpmd_case(name, argvs, pat, want=(2,), repeat=3, quick=False, setup=None):
    case(name, argvs, want=want, pat=pat, np_=-len(argvs), repeat=repeat, quick=quick,
         setup=setup)


def bad_data(tmp):
    os.makedirs(f"{tmp}/bad")
    shutil.copy(f"{FIX}/data/val.bin", f"{tmp}/bad/val.bin")
    token_shard(f"{tmp}/bad/train.bin", 257, 300, MANY[:-1] + [300])


T2 = ["train", "--config", "{fix}/tiny.toml", "--out", "{tmp}/run", "--progress", "none", "--set",
      "parallel.sp=2"]
T4 = ["train", "--config", "{fix}/tiny.toml", "--out", "{tmp}/run", "--progress", "none", "--set",
      "parallel.sp=4", "--set", "train.seq=128"]
mpmd_case("np2: rank 1 reads a bad shard", [T2, T2 + ["--set", "data.dir={tmp}/bad"]],
          "outside its vocabulary", setup=bad_data, quick=True)
mpmd_case("np4: rank 3 has no data", [T4, T4, T4, T4 + ["--set", "data.dir={tmp}/none"]],
          "none", quick=True)
mpmd_case("np2: rank 1 bad override", [T2, T2 + ["--set", "train.lr=nan"]], "train.lr")
mpmd_case("np2: rank 1 --out under a file", [T2, T2[:4] + ["{fix}/tiny.toml/run"] + T2[5:]],
          "(--out|tiny.toml/run)", want=(0, 2))
case("np4: usage error on every rank", T4 + ["--set", "train.lr=nan"], pat="train.lr", np_=4,
     repeat=3, quick=True)
case("np4: unknown flag", T4 + ["--bogus"], pat="--bogus", np_=4, repeat=2)
case("np2: sp not dividing ranks", T2 + ["--set", "parallel.sp=3"], pat="parallel.sp", np_=2)
case("np2: attn --dump under a file", ATTN + ["--dump", "{fix}/tiny.toml/d"], pat="--dump",
     np_=2, repeat=2)
case("np2: attn seq not divisible", ["attn", "--strategy", "ring", "--seq", "63", "--heads", "2",
                                     "--head-dim", "8"], pat="--seq", np_=2)
case("np4: attn teams 3", ["attn", "--strategy", "wallfacer", "--teams", "3", "--seq", "64",
                           "--heads", "2", "--head-dim", "8"], pat="--teams", np_=4)
case("np2: resume damaged newest", T2 + ["--resume", "--steps", "3"], want=(0,),
     pat=r"skipping checkpoint .*step-2", np_=2,
     setup=lambda tmp: (shutil.copytree(f"{FIX}/g", f"{tmp}/run"),
                        flip(f"{tmp}/run/ckpt/step-2/state.bin", 40)))
mpmd_case("np2: rank 1 different model", [T2, T2 + ["--set", "model.dim=64"]],
          "(model|state|differ|parallel)", want=(1, 2), repeat=2)

# --- plan / tune: cluster and model files ---------------------------------------------------------
LOCAL = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "../../configs/clusters/local.toml")).read()
MODEL = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "../../configs/models/gpt-3b.toml")).read()


def sub(text, key, value):
    new, n = re.subn(rf"(?m)^{re.escape(key)} = .*$", f"{key} = {value}", text)
    assert n >= 1, key
    return new


def file_case(name, cmd, fname, text, pat, quick=False, want=(2,)):
    def setup(tmp):
        write(f"{tmp}/{fname}", text)
    argv = [a.replace("{src}/configs/clusters/local.toml", "{tmp}/" + fname)
            if fname.startswith("cl") else
            a.replace("{src}/configs/models/gpt-3b.toml", "{tmp}/" + fname)
            .replace("{fix}/model.toml", "{tmp}/" + fname) for a in cmd]
    case(name, argv, pat=pat, setup=setup, quick=quick, want=want)


for key, vals in [("count", ["0", "-1", "1048576", "2.5", '"x"']),
                  ("devices_per_node", ["0", "4096", "4294967296"]),
                  ("gemm_flops", ["0", "-1", "nan", "inf", "1e400"]),
                  ("attention_flops", ["0", "nan"]),
                  ("memory", ["0", "-1e9", "nan"]),
                  ("memory_reserved", ["2e10", "-1"]),
                  ("bandwidth", ["0", "-1", "inf"]),
                  ("latency", ["-1", "nan"]),
                  ("devices_per_nic", ["0", "3"]),
                  ("zero", ["5", "-1"]),
                  ("attention_tile_q", ["0", "-1"]),
                  ("attention_head_dims", ["[]", "[0]", "[64, 32]", '"x"']),
                  ("dtype", ['"fp8"', "1"])]:
    for v in vals:
        text = sub(LOCAL, key, v)
        if key == "count" and v == "1048576":
            text = sub(text, "devices_per_node", "4096")
        # a number TOML cannot read is named by its place, FILE:LINE:COLUMN
        pat = re.escape(key) + "|devices" + (r"|cl\.toml:\d+:\d+" if v == "1e400" else "")
        file_case(f"cluster {key}={v}", PLAN, "cl.toml", text, pat,
                  quick=(key, v) in (("gemm_flops", "nan"), ("count", "1048576")),
                  want=(0, 2) if (key, v) == ("devices_per_nic", "3") else (2,))
file_case("cluster missing [device]", PLAN, "cl.toml", LOCAL.split("[device]")[0], "device")
file_case("cluster unknown key", PLAN, "cl.toml", LOCAL + "\n[extra]\nx = 1\n", "extra")
file_case("cluster empty", PLAN, "cl.toml", "", "(nodes|device|cl.toml)")
file_case("cluster syntax error", PLAN, "cl.toml", "[nodes\n", r"cl\.toml")
for key, vals in [("layers", ["0", "-1", "10001", "1e300", '"x"']), ("dim", ["0", "-64",
                                                                            "4294967296"]),
                  ("heads", ["0", "3", "-16"]), ("kv_heads", ["0", "3"]),
                  ("mlp_ratio", ["0", "1e300"]), ("vocab", ["0", "-1"]),
                  ("kind", ['"rnn"']), ("causal", ["2"])]:
    for v in vals:
        file_case(f"model {key}={v}", PLAN, "md.toml", sub(MODEL, key, v), re.escape(key),
                  quick=(key, v) == ("layers", "10001"))
file_case("model empty", PLAN, "md.toml", "", "(model|md.toml)")
for v in ["0", "-1", "8X", "1e300", "99999999999999999999K", "9223372036854775807K", "", "1.5K",
          "K"]:
    case(f"plan --seq {v!r}", PLAN[:-1] + [v], pat="--seq|tokens", quick=v == "9223372036854775807K")
case("plan --gpus above the cluster", PLAN + ["--gpus", "4096"], pat="--gpus", want=(0, 2))
# a model that fits on the cluster, so that there is a configuration to trace
case("plan --trace under a file", ["plan", "--cluster", "{src}/configs/clusters/local.toml",
                                   "--model", "{fix}/model.toml", "--seq", "256", "--trace",
                                   "{fix}/tiny.toml/t.json"], pat="t.json")
case("plan --config unknown", PLAN + ["--trace", "{tmp}/t.json", "--config", "bogus"],
     pat="--config 'bogus'")
case("plan --cluster missing", ["plan", "--cluster", "{tmp}/none.toml", "--model",
                                "{src}/configs/models/gpt-3b.toml", "--seq", "8K"],
     pat="none.toml", quick=True)
case("plan --model a folder", ["plan", "--cluster", "{src}/configs/clusters/local.toml",
                               "--model", "{tmp}", "--seq", "8K"], pat="is a folder")
case("plan nothing", ["plan"], pat="--cluster")
case("tune --out under a file", TUNE[:-1] + ["{fix}/tiny.toml/x.toml"], pat="x.toml",
     quick=True, check=no_tmp_left)
case("tune --calibrate --out under a file", ["tune", "--calibrate", "--out",
                                             "{fix}/tiny.toml/c.toml"], pat="c.toml")
case("tune --cluster missing", TUNE[:6] + ["{tmp}/none.toml"] + TUNE[7:], pat="none.toml")
case("tune --model missing", ["tune", "--seq", "256"], pat="--model")
file_case("tune cluster gemm nan", TUNE, "cl.toml", sub(LOCAL, "gemm_flops", "nan"), "gemm_flops")
file_case("tune model layers 0", TUNE, "md.toml", sub(MODEL, "layers", "0"), "layers")

# --- trace-plot --------------------------------------------------------------------------------


def trace_case(name, text, pat, quick=False, want=(2,)):
    def setup(tmp):
        write(f"{tmp}/t.json", text)
    case(name, ["trace-plot", "{tmp}/t.json", "--out", "{tmp}/t.png"], pat=pat, setup=setup,
         quick=quick, want=want, check=no_tmp_left)


def ev(**k):
    e = {"ph": "X", "name": "k", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 5}
    e.update(k)
    return json.dumps({"traceEvents": [e]})


trace_case("trace empty", "", "t.json", quick=True)
trace_case("trace not JSON", "{", "t.json")
trace_case("trace a list", "[1, 2]", "(t.json|traceEvents)")
trace_case("trace no events", '{"traceEvents": []}', "(t.json|events|spans)", want=(0, 2))
trace_case("trace nested 10000", "[" * 10000 + "]" * 10000, "(t.json|nested)")
# pid is the node's process in a trace viewer; trace-plot draws rows by rank (args.rank, or tid /
# 100) and does not read it, so any pid may be accepted
trace_case("trace pid -1", ev(pid=-1), "(pid|rank)", want=(0, 2))
trace_case("trace pid 2^40", ev(pid=2**40), "(pid|rank)", quick=True, want=(0, 2))
trace_case("trace pid a string", ev(pid="x"), "(pid|rank)", want=(0, 2))
trace_case("trace rank -1", ev(args={"rank": -1}), "rank")
trace_case("trace rank 2^40", ev(args={"rank": 2**40}), "rank")
trace_case("trace dur -1", ev(dur=-1), "dur")
trace_case("trace ts 1e400", ev(ts=1e300) .replace("1e+300", "1e400"), "(ts|finite)")
trace_case("trace tid 1.5", ev(tid=1.5), "tid")
trace_case("trace events not a list", '{"traceEvents": 5}', "traceEvents")
case("trace-plot missing file", ["trace-plot", "{tmp}/none.json"], pat="none.json", quick=True)
case("trace-plot a folder", ["trace-plot", "{tmp}"], pat="is a folder")
case("trace-plot no file", ["trace-plot"], pat="(file|trace)")
case("trace-plot --out under a file", PLOT[:2] + ["--out", "{fix}/tiny.toml/t.png"],
     pat="t.png", check=no_tmp_left)
case("trace-plot --out on a full disk", PLOT[:2] + ["--out", "{tmp}/full/t.png"], want=(1, 2),
     pat="t.png", setup=full_then(None), needs_mount=True, check=no_tmp_left)

# --- sample ----------------------------------------------------------------------------------
case("sample --ckpt missing", ["sample", "--ckpt", "{tmp}/none"], pat="none", quick=True)
case("sample --ckpt a file", ["sample", "--ckpt", "{fix}/tiny.toml"], pat="tiny.toml")
case("sample --ckpt with no checkpoint", ["sample", "--ckpt", "{tmp}"], pat="(checkpoint|ckpt)",
     setup=lambda t: os.makedirs(f"{t}/ckpt"))
case("sample --ckpt absent", ["sample"], pat="--ckpt")
case("sample --out for a GPT", SAMPLE + ["--out", "{tmp}/x.gif"], pat="--out",
     check=no_file("x.gif"))
case("sample to /dev/full", SAMPLE, want=(1,), pat="(write|output|stdout)", stdout_full=True)
case("sample DiT --out under a file", DSAMPLE[:3] + ["--out", "{fix}/tiny.toml/x.gif"],
     pat="x.gif", check=no_tmp_left, quick=True)
case("sample DiT --out on a full disk", DSAMPLE[:3] + ["--out", "{tmp}/full/x.gif"],
     want=(1, 2), pat="x.gif", setup=full_then(None), needs_mount=True, check=no_tmp_left)
case("sample DiT no --out", ["sample", "--ckpt", "{fix}/d"], pat="--out")
case("sample DiT --class 99", DSAMPLE + ["--class", "99"], pat="--class")
case("sample damaged checkpoint", ["sample", "--ckpt", "{tmp}/run"], want=(1,),
     pat=r"(state\.bin|checkpoint)",
     setup=lambda t: (shutil.copytree(f"{FIX}/g", f"{t}/run"),
                      shutil.rmtree(f"{t}/run/ckpt/step-1"),
                      flip(f"{t}/run/ckpt/step-2/state.bin", 200)))
case("sample --prompt empty", SAMPLE + ["--prompt", ""], want=(0, 2), pat="--prompt")

# --- attn / bench, other flags ------------------------------------------------------------------
case("attn --strategy bogus", ATTN[:2] + ["bogus"] + ATTN[3:], pat="--strategy", quick=True)
case("attn --placement bogus", ATTN + ["--placement", "x"], pat="--placement")
case("attn no --seq", ["attn", "--heads", "2", "--head-dim", "8"], pat="--seq")
case("attn --kv-heads 3", ATTN + ["--kv-heads", "3"], pat="--kv-heads")
case("attn --ulysses 3", ATTN + ["--ulysses", "3"], pat="--ulysses")
case("attn --trace under a file", ATTN + ["--trace", "{fix}/tiny.toml/t.json"], pat="t.json")
case("attn --dump under a file", ATTN + ["--dump", "{fix}/tiny.toml/d"], pat="--dump")
case("attn --cluster missing", ATTN + ["--cluster", "{tmp}/none.toml"], pat="none.toml")
case("attn --count with --node-size 3", ATTN + ["--count", "4", "--node-size", "3"],
     pat="--node-size", want=(0, 2))
case("bench alone", ["bench"], pat="bench kernel")
case("bench kernel --dtype bogus", BENCH + ["--dtype", "x"], pat="--dtype")
case("bench kernel --causal --full", BENCH + ["--causal"], pat="(--causal|--full)")
case("bench kernel 65 seqs", ["bench", "kernel", "--seq"] + ["64"] * 65, pat="--seq")
case("bench kernel --kv-heads 3",
     [a if BENCH[i - 1] != "--heads" else "4" for i, a in enumerate(BENCH)] + ["--kv-heads", "3"],
     pat="--kv-heads")
case("no subcommand", [], pat="subcommand")
case("unknown subcommand", ["frobnicate"], pat="frobnicate")
case("unknown flag", ["plan", "--frob"], pat="--frob")


# ---------------------------------------------------------------------------------------------
FIX = None
ERROR_LINE = re.compile(r"error:")


def classify(c, rc, out, timed_out, tmp):
    if timed_out:
        return "HANG", f"no exit after {c.limit} s"
    for m in CRASH_MARKERS:
        if m in out:
            return "CRASH", m
    if rc < 0 or rc > 128:
        return "CRASH", f"exit {rc}"
    if c.check:
        r = c.check(tmp)
        if r:
            return r
    if rc == 0:
        if 0 not in c.want:
            return "SILENT", "exit 0"
        if c.want == (0,) and c.pat and not re.search(c.pat, out):
            return "SILENT", f"output does not say /{c.pat}/"
        return "OK", ""
    errors = [l for l in out.splitlines() if ERROR_LINE.search(l)]
    if len(errors) != 1:
        return "UNCLEAR", f"{len(errors)} error lines"
    for m in UNCLEAR_MARKERS:
        if m in errors[0]:
            return "UNCLEAR", f"library text '{m}'"
    if rc not in c.want:
        return "UNCLEAR", f"exit {rc}, expected {'/'.join(map(str, c.want))}"
    if c.pat and not re.search(c.pat, errors[0]):
        return "UNCLEAR", f"does not name /{c.pat}/"
    return "OK", ""


def fill(a, tmp, src):
    return a.replace("{fix}", FIX).replace("{tmp}", tmp).replace("{src}", src)


def main():
    global FIX
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wf", required=True, help="the wallfacer binary")
    ap.add_argument("--mpirun", default="mpirun", help="mpirun (or tests/mpirun.sh)")
    ap.add_argument("--quick", action="store_true", help="a representative subset")
    ap.add_argument("-k", default="", help="only cases whose name matches this regex")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--verbose", action="store_true", help="print the output of failing cases")
    args = ap.parse_args()
    src = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    wf = os.path.abspath(args.wf)
    if os.sep in args.mpirun:
        args.mpirun = os.path.abspath(args.mpirun)
    cases = [c for c in CASES if (c.quick or not args.quick) and re.search(args.k, c.name)]
    if args.list:
        for c in cases:
            print(c.name)
        print(f"{len(cases)} cases")
        return 0
    can_mount = os.geteuid() == 0 and shutil.which("mount")
    root = tempfile.mkdtemp(prefix="wf-sweep-")
    FIX = os.path.join(root, "fix")
    os.makedirs(FIX)
    env = Env(wf, args.mpirun, FIX)
    build_fixtures(env)
    counts, rows, t_all = {}, [], time.time()
    try:
        for n, c in enumerate(cases):
            for attempt in range(c.repeat):
                tmp = os.path.join(root, f"case-{n}-{attempt}")
                os.makedirs(tmp)
                mounted = False
                try:
                    if c.needs_mount and not can_mount:
                        cls, why, dt = "SKIP", "needs root to mount a tmpfs", 0.0
                    else:
                        if c.setup:
                            c.setup(tmp)
                        mounted = c.needs_mount
                        if c.np < 0:  # one argv per rank
                            cmd = []
                            for argv in c.argv:
                                cmd += [":"] if cmd else []
                                cmd += ["-np", "1", wf] + [fill(a, tmp, src) for a in argv]
                            cmd = ["--oversubscribe", "--bind-to", "none"] + cmd
                            rc, out, dt, hung = Env(args.mpirun, None, FIX).run(
                                cmd, tmp, timeout=c.limit)
                        else:
                            rc, out, dt, hung = env.run([fill(a, tmp, src) for a in c.argv], tmp,
                                                        np_=c.np, timeout=c.limit,
                                                        fsize=c.fsize,
                                                        stdout_full=c.stdout_full)
                        cls, why = classify(c, rc, out, hung, tmp)
                finally:
                    if mounted:
                        subprocess.run(["umount", "-l", f"{tmp}/full"], check=False)
                if cls != "OK" or attempt == c.repeat - 1:
                    break
            counts[cls] = counts.get(cls, 0) + 1
            first = ""
            if cls not in ("OK", "SKIP"):
                errs = [l for l in out.splitlines() if "error" in l.lower()] or \
                       out.strip().splitlines()[-1:] or [""]
                first = errs[0][:160]
            rows.append((cls, c.name, dt, why, first))
            print(f"{cls:8} {dt:5.1f}s  {c.name}" + (f"  [{why}] {first}" if first or why else
                                                     ""), flush=True)
            if args.verbose and cls not in ("OK", "SKIP"):
                print("    " + out.replace("\n", "\n    ")[:3000])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"{len(rows)} cases in {time.time() - t_all:.0f} s: " +
          ", ".join(f"{k} {counts.get(k, 0)}" for k in
                    ("OK", "HANG", "CRASH", "SILENT", "LOSS", "UNCLEAR", "SKIP")))
    bad = [r for r in rows if r[0] not in ("OK", "SKIP")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
