#!/usr/bin/env python3
"""Bad-input and fault sweep of the whole wallfacer CLI (docs/faults.md, "The sweep").

Runs every case in a fresh temporary folder with a hard time limit and classifies the result:

  OK       the expected exit code and exactly one error line that matches the case's pattern
           (it names the bad thing), nothing half-written, nothing lost
  HANG     the case ran past the time limit
  CRASH    a signal, a sanitizer report, 'terminate called', or std:: exception text
  SILENT   exit 0 on bad input, or a wrong result: every exit 0 is checked positively (the
           state, files or numbers that prove the program did the right thing), and an exit 0
           that nothing checks is SILENT too
  LOSS     a file that existed was damaged, or a half-written file was left behind
  UNCLEAR  a message that does not name the bad thing (a library's internal text, no error line,
           several), or exit 1 for a usage error (and 2 for a fault)
  SKIP     a full-disk case without root (it mounts a small tmpfs); run as root, a case that
           cannot mount is a failure

Prints a table and the count per class; exits 1 when any case is not OK (SKIP is allowed only
when not run as root).

  tests/faults/sweep.py --wf build/wallfacer [--mpirun tests/mpirun.sh] [--quick] [-k PATTERN]

--quick runs a representative subset (every subcommand and every kind of fault, a few values per
flag) for ctest; without it every case runs (`make sweep`).
"""

import argparse
import hashlib
import json
import math
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
import tomllib

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
    # The references of a resume: the run g continued to step 3 from its intact checkpoint of
    # step 1 (r1) and of step 2 (r2). A case that falls back past a damaged checkpoint must give
    # the losses of the one it names.
    for step in (1, 2):
        shutil.copytree(f"{fix}/g", f"{fix}/r{step}")
        if step == 1:
            shutil.rmtree(f"{fix}/r1/ckpt/step-2")
        argv = ["train", "--config", f"{fix}/tiny.toml", "--out", f"{fix}/r{step}", "--progress",
                "none", "--resume", "--steps", "3"]
        rc, out, _, _ = env.run(argv, fix)
        if rc != 0 or f"resumed from {fix}/r{step}/ckpt/step-{step}" not in out:
            sys.exit(f"fixture {argv}: exit {rc}: {out}")


# ---------------------------------------------------------------------------------------------
# Cases. Each: name, argv (strings may hold {fix} and {tmp}), want (expected exit codes; 0 means a
# value that may be accepted), pat (regex the error line must match), np (ranks under mpirun, 0:
# none), setup(tmp) and check(tmp) -> None or (class, what).


class Case:
    def __init__(self, name, argv, want=(2,), pat=None, np_=0, setup=None, check=None,
                 quick=False, repeat=1, fsize=None, needs_mount=False, limit=LIMIT_S,
                 stdout_full=False, ok=None):
        self.name, self.argv, self.want, self.pat, self.np = name, argv, tuple(want), pat, np_
        self.setup, self.check, self.quick, self.repeat = setup, check, quick, repeat
        self.fsize, self.needs_mount, self.limit = fsize, needs_mount, limit
        self.stdout_full = stdout_full
        # ok(tmp, out, argv) -> None or (class, what): the positive check of an exit 0 (argv as
        # run, the first rank's for one argv per rank); None: the default check of the command
        self.ok = ok


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
        "--iters", "1", "--check"]
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


# --- positive checks of an exit 0 -------------------------------------------------------------
# Each returns None when what the program produced is right, else (class, what). classify() runs
# the case's own ok, or the default of its command (DEFAULT_OK), on every exit 0.


def flag(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def sets_of(argv):
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv[:-1])
                if a == "--set" and "=" in argv[i + 1])


def toml_value(text):
    return tomllib.loads(f"v = {text}")["v"]


def same_value(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)
    return a == b


def read_metrics(run):
    """The lines of RUN/metrics.jsonl, as (text, parsed); None when it is missing."""
    p = f"{run}/metrics.jsonl"
    if not os.path.isfile(p):
        return None
    with open(p) as f:
        return [(line, json.loads(line)) for line in f.read().splitlines(True)]


def train_setting(argv, key):
    """KEY ("train.steps") as this run uses it: --steps, --set, the config file, the default."""
    if key == "train.steps" and "--steps" in argv:
        return int(flag(argv, "--steps"))
    sets = sets_of(argv)
    if key in sets:
        return toml_value(sets[key])
    with open(flag(argv, "--config"), "rb") as f:
        cfg = tomllib.load(f)
    section, name = key.split(".")
    return cfg.get(section, {}).get(name, TRAIN_DEFAULTS.get(key))


TRAIN_DEFAULTS = {"train.ckpt_every": 0, "train.keep_checkpoints": 3, "train.eval_every": 0,
                  "train.warmup": 10}


def checkpoints(run):
    d = f"{run}/ckpt"
    if not os.path.isdir(d):
        return []
    return sorted(int(n[5:]) for n in os.listdir(d) if re.fullmatch(r"step-\d+", n))


def train_ok(tmp, out, argv):
    """A finished training run: metrics.jsonl has steps 1..train.steps once each with finite
    losses (and a finite val_loss at the last step when train.eval_every > 0, none when 0); the
    checkpoints are the ones train.ckpt_every and train.keep_checkpoints ask for; the newest
    records every --set value; train.warmup = 0 starts at the full train.lr."""
    run = flag(argv, "--out")
    steps = train_setting(argv, "train.steps")
    lines = read_metrics(run)
    if lines is None:
        return ("SILENT", "exit 0 and no metrics.jsonl")
    got = [m.get("step") for _, m in lines]
    if got != list(range(1, steps + 1)):
        return ("SILENT", f"metrics.jsonl has steps {got}, expected 1..{steps}")
    for _, m in lines:
        for k in ("loss", "val_loss"):
            if k in m and not (isinstance(m[k], float) and math.isfinite(m[k])):
                return ("SILENT", f"step {m['step']}: {k} {m[k]!r}")
    has_val = [m["step"] for _, m in lines if "val_loss" in m]
    if train_setting(argv, "train.eval_every") > 0:
        if steps not in has_val:
            return ("SILENT", f"no val_loss at the last step (steps with one: {has_val})")
    elif has_val:
        return ("SILENT", f"val_loss at steps {has_val} with train.eval_every = 0")
    # the checkpoints this run wrote (a resumed run: those after the step it resumed)
    m = re.search(r"resumed from \S+ \(step (\d+)\)", out)
    start = int(m.group(1)) if "--resume" in argv and m else 0
    if "--resume" in argv and not m:
        return ("SILENT", "a resumed run that does not say which checkpoint it resumed")
    every = train_setting(argv, "train.ckpt_every")
    keep = train_setting(argv, "train.keep_checkpoints")
    want = sorted({s for s in range(1, steps + 1) if s % every == 0} | {steps}) if every else []
    if keep and want:
        want = want[-keep:]
    have = checkpoints(run)
    if start:  # a resumed run: the checkpoints it writes are there (older ones may stay)
        missing = [s for s in want if s > start and s not in have]
        if missing:
            return ("SILENT", f"no checkpoint of steps {missing} (there are {have})")
    elif have != want:
        return ("SILENT", f"checkpoints of steps {have}, expected {want}")
    if want:
        with open(f"{run}/ckpt/step-{steps}/manifest.json") as f:
            cfg = tomllib.loads(json.load(f)["config"])
        for key, text in sets_of(argv).items():
            section, name = key.split(".")
            if key == "data.dir" or key == "train.steps":
                continue
            if not same_value(cfg.get(section, {}).get(name), toml_value(text)):
                return ("SILENT", f"the checkpoint records {key} = "
                                  f"{cfg.get(section, {}).get(name)!r}, --set gave {text}")
    if sets_of(argv).get("train.warmup") == "0":
        lr = train_setting(argv, "train.lr")
        if not math.isclose(lines[0][1]["lr"], lr, rel_tol=1e-6):
            return ("SILENT", f"train.warmup = 0 but step 1 ran at lr {lines[0][1]['lr']}, not {lr}")
    return None


def attn_ok(tmp, out, argv):
    """attn --check: the result agrees with one process (the check line says pass)."""
    if "--check" not in argv:
        return ("SILENT", "an attn case that can exit 0 without --check")
    if not re.search(r"max rel err .*: pass$", out, re.M):
        return ("SILENT", "no passing 'max rel err' line")


def attn_count_ok(tmp, out, argv):
    """attn --count P --node-size N, ring, fp32: every rank sends its K and V blocks (2 S/P H D
    floats) P-1 times forward; the hops between nodes, counted over all cards, are the ring's
    hops whose ends are on different nodes, P-1 steps each."""
    P, N = int(flag(argv, "--count")), int(flag(argv, "--node-size"))
    S, H, D = int(flag(argv, "--seq")), int(flag(argv, "--heads")), int(flag(argv, "--head-dim"))
    block = 2 * (S // P) * H * D * 4
    m = re.search(r"bytes/rank p2p fwd (\d+) bwd (\d+)", out)
    if not m or int(m.group(1)) != (P - 1) * block:
        return ("SILENT", f"p2p fwd not (P-1) x {block} bytes: {m and m.group(0)}")
    cross = sum(1 for r in range(P) if r // N != ((r + 1) % P) // N)
    m = re.search(rf"across nodes of {N} ranks: fwd (\d+) .*the schedule's count", out)
    if not m or int(m.group(1)) != cross * (P - 1) * block:
        return ("SILENT", f"inter-node fwd not {cross} hops x {P - 1} steps x {block} bytes "
                          "(labelled the schedule's count): "
                          f"{m and m.group(0)}")


def shard_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    count = struct.unpack_from("<Q", data, 24)[0]
    return list(struct.unpack_from(f"<{count}H", data, 64))


def prepare_ok(tmp, out, argv):
    """prepare: train.bin then val.bin hold the input's bytes and one end-of-text (256), and the
    counts printed are theirs."""
    d, src = flag(argv, "--out"), flag(argv, "--input")
    with open(src, "rb") as f:
        want = list(f.read()) + [256]
    got = {n: shard_tokens(f"{d}/{n}") if os.path.exists(f"{d}/{n}") else []
           for n in ("train.bin", "val.bin")}
    if got["train.bin"] + got["val.bin"] != want:
        return ("SILENT", f"the shards hold {len(got['train.bin'])} + {len(got['val.bin'])} "
                          f"tokens that are not the input's {len(want)}")
    if f"{len(got['train.bin'])} train tokens, {len(got['val.bin'])} validation tokens" not in out:
        return ("SILENT", "the counts printed are not those of the shards")


def png_ok(path, width=None):
    if not os.path.isfile(path):
        return ("SILENT", f"exit 0 and no {os.path.basename(path)}")
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return ("SILENT", f"{os.path.basename(path)} is not a PNG")
    if width is not None and struct.unpack(">I", head[16:20])[0] != width:
        return ("SILENT", f"{os.path.basename(path)} is not {width} pixels wide")


def plot_ok(tmp, out, argv):
    w = flag(argv, "--width")
    return png_ok(flag(argv, "--out", os.path.splitext(argv[1])[0] + ".png"),
                  int(w) if w else None)


def sample_ok(tmp, out, argv):
    """sample: a GPT's text is the prompt and at most --tokens bytes more; a DiT's --out is a GIF."""
    if "--out" in argv:
        p = flag(argv, "--out")
        with open(p, "rb") as f:
            if not f.read(6) in (b"GIF89a", b"GIF87a"):
                return ("SILENT", f"{p} is not a GIF")
        return None
    prompt, n = flag(argv, "--prompt", "In the beginning"), int(flag(argv, "--tokens", "200"))
    text = out.encode(errors="replace")
    line = text[:text.rfind(b"\n")] if text.endswith(b"\n") else text
    if not line.startswith(prompt.encode()) or len(line) - len(prompt.encode()) > 4 * n:
        return ("SILENT", f"not the prompt and {n} tokens: {out[:80]!r}")


def plan_ok(tmp, out, argv):
    """plan: the devices it plans for, and configurations ranked with a rate or, when none fits,
    each named infeasible with the reason."""
    if not re.search(r"\(\d+ of \d+ devices", out):
        return ("SILENT", "no '(G of N devices' in the heading")
    ranked = re.search(r"(?m)^\s*1\s+\S+.*\d", out)
    infeasible = re.findall(r"(?m)^\s{4,}\S.*\S\s{2,}\w[\w ]*: .*\S", out.split("infeasible:")[-1]) \
        if "infeasible:" in out else []
    if not ranked and not infeasible:
        return ("SILENT", "no configuration ranked and none named infeasible with a reason")


def tune_ok(tmp, out, argv):
    p = flag(argv, "--out")
    try:
        with open(p, "rb") as f:
            tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        return ("SILENT", f"{p}: {e}")


DEFAULT_OK = {"train": train_ok, "attn": attn_ok, "prepare": prepare_ok, "trace-plot": plot_ok,
              "sample": sample_ok, "plan": plan_ok, "tune": tune_ok}


def all_ok(*checks):
    def ok(tmp, out, argv):
        for c in checks:
            r = c(tmp, out, argv)
            if r:
                return r
    return ok


def says(pat):
    def ok(tmp, out, argv):
        if not re.search(pat, out):
            return ("SILENT", f"output does not say /{pat}/")
    return ok


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
def record_args(key, want):
    """A value that may be accepted runs with a checkpoint at every step, whose config records
    it (train_ok compares)."""
    return ["--set", "train.ckpt_every=1"] if 0 in want and key != "train.ckpt_every" else []


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
        case(f"--set {k}={v}", train("--set", f"{k}={v}", *record_args(k, want)), want=want,
             pat=re.escape(k),
             quick=(i == 0 and k in ("model.dim", "train.seq")) or (i == 1 and k == "model.layers"))
    want = (0, 2) if k in ("train.keep_checkpoints", "parallel.ulysses", "train.warmup",
                           "train.ckpt_every", "train.eval_every", "train.eval_batches",
                           "parallel.teams") else (2,)
    case(f"--set {k}=0", train("--set", f"{k}=0", *record_args(k, want)),
         want=(0, 2) if k in ("train.keep_checkpoints", "parallel.ulysses", "train.warmup",
                              "train.ckpt_every", "train.eval_every", "train.eval_batches",
                              "parallel.teams") else (2,),
         pat=re.escape(k))
for k in KEYS_REAL:
    for i, v in enumerate(["nan", "inf", "-inf", "-1", "x", "1e400", ""]):
        ok = (k in ("train.weight_decay", "train.grad_clip") and v == "inf") or \
             (k == "train.timeout" and v == "inf")
        case(f"--set {k}={v}", train("--set", f"{k}={v}", *record_args(k, (0,) if ok else (2,))),
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
cfg_case("config: empty file", "", r"c\.toml.* is empty")
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


def data_case(name, make, pat, quick=False, want=(2,), ok=None):
    def setup(tmp):
        os.makedirs(f"{tmp}/data")
        shutil.copy(f"{FIX}/data/val.bin", f"{tmp}/data/val.bin")
        make(f"{tmp}/data")
    case(name, train("--set", "data.dir={tmp}/data"), pat=pat, setup=setup, quick=quick,
         want=want, ok=ok)


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
          want=(0, 2),
          # accepted: trained without evaluation, and said so
          ok=all_ok(says("val.bin"), lambda tmp, out, argv: train_ok(
              tmp, out, argv + ["--set", "train.eval_every=0"])))
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
             np_=0, keep=True, ok=None):
    s = Snap(change, runname)

    def check(tmp):
        r = s.check(tmp) if keep else None
        return r or (extra(tmp) if extra else None)
    case(name, argv, want=want, pat=pat, setup=s.setup, check=check, quick=quick, np_=np_,
         ok=ok)


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


def kept_line(step, run="run"):
    """ok: the line of STEP in metrics.jsonl is the fixture run's, byte for byte."""
    def ok(tmp, out, argv):
        with open(f"{FIX}/g/metrics.jsonl") as f:
            line = f.read().splitlines(True)[step - 1]
        lines = read_metrics(f"{tmp}/{run}") or []
        if line not in [text for text, _ in lines]:
            return ("LOSS", f"the line of step {step} was dropped or changed in metrics.jsonl")
    return ok


def resumed_losses(step, rel=0.0, steps=3):
    """ok: the run resumed from the checkpoint of STEP: the losses after it are those of the
    fixture run continued from that checkpoint intact (equal, or within REL on other ranks)."""
    def ok(tmp, out, argv):
        ref = {m["step"]: m["loss"] for _, m in read_metrics(f"{FIX}/r{step}")}
        got = {m["step"]: m["loss"] for _, m in read_metrics(f"{tmp}/run") or []}
        for s in range(step + 1, steps + 1):
            if s not in got or abs(got[s] - ref[s]) > rel * abs(ref[s]):
                return ("SILENT", f"step {s}: loss {got.get(s)}, resumed from step {step} gives "
                                  f"{ref[s]}")
    return ok


def fell_back(step=1, rel=0.0):
    """ok of a resume that skips the damaged newest checkpoint: it says which one it resumed,
    the earlier metrics are kept, steps 1..3 are there once each, and the losses are those of
    the intact checkpoint of STEP."""
    return all_ok(says(rf"resumed from \S*/run/ckpt/step-{step} "),
                  *[kept_line(s) for s in range(1, step + 1)], train_ok,
                  resumed_losses(step, rel))


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
                 change=edit_manifest(fn), want=(0,), keep=False, ok=fell_back(1))

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
             quick=what == "header step flipped", ok=fell_back(1))
run_case("manifest missing (step-2 skipped)", RESUME, r"resumed from .*step-1",
         change=lambda run: os.remove(manifest(run)), want=(0,), keep=False, ok=fell_back(1))
run_case("step folder name not a number", RESUME, r"resumed from .*step-2",
         change=lambda run: os.makedirs(f"{run}/ckpt/step-x"), want=(0,), keep=False,
         ok=all_ok(fell_back(2), lambda tmp, out, argv: None if os.path.isdir(
             f"{tmp}/run/ckpt/step-x") else ("LOSS", "the folder step-x was removed")))
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
         r"resuming with changed settings: .*train.lr", want=(0,), keep=False, quick=True,
         ok=all_ok(kept_line(1), kept_line(2), train_ok, lambda tmp, out, argv: None if 0 < (
             read_metrics(f"{tmp}/run")[2][1]["lr"]) <= 1e-3 else ("SILENT", "step 3 not at the "
                                                                     "new train.lr = 1e-3")))
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
         want=(0,), keep=False, quick=True,
         # the half line of step 2 is dropped (it cannot be rebuilt); step 1's is kept
         ok=all_ok(says(r"resumed from \S*/run/ckpt/step-2 "), kept_line(1), resumed_losses(2),
                   lambda tmp, out, argv: None if [m["step"] for _, m in read_metrics(
                       f"{tmp}/run")] == [1, 3] else ("SILENT", "metrics.jsonl is not steps 1, 3")))
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
case("lr=1e-320 (denormal)", train("--set", "train.lr=1e-320", "--steps", "1",
                                   *record_args("train.lr", (0,))), want=(0, 2),
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
     pat=r"skipping checkpoint .*step-2", np_=2, ok=fell_back(1, rel=1e-4),
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
case("attn --count with --node-size 3", ATTN[:-1] + ["--count", "4", "--node-size", "3"],
     pat="--node-size", want=(0, 2), ok=attn_count_ok)
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


def classify(c, rc, out, timed_out, tmp, argv):
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
        ok = c.ok or DEFAULT_OK.get(argv[0])
        if ok is None:
            return "SILENT", "exit 0 and nothing checks what the program did"
        try:
            r = ok(tmp, out, argv)
        except (OSError, ValueError, KeyError, IndexError, struct.error) as e:
            r = ("SILENT", f"exit 0 but its output cannot be read back: {e!r}")
        return r or ("OK", "exit 0, checked")
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
    as_root = os.geteuid() == 0
    can_mount = as_root and shutil.which("mount")
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
                    skip = None
                    if c.needs_mount and not can_mount:
                        skip = ("run as root but there is no mount command" if as_root else
                                "needs root to mount a tmpfs")
                    elif c.setup:
                        try:
                            c.setup(tmp)
                        except subprocess.CalledProcessError as e:
                            if not c.needs_mount:
                                raise
                            skip = f"cannot mount a tmpfs: {e}"
                    if skip:
                        cls, why, dt, out = "SKIP", skip, 0.0, ""
                    else:
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
                        first_argv = c.argv[0] if c.np < 0 else c.argv
                        cls, why = classify(c, rc, out, hung, tmp,
                                            [fill(a, tmp, src) for a in first_argv])
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
    # CI runs the sweep as root: there a case that was skipped is one that did not run
    bad = [r for r in rows if r[0] != "OK" and (r[0] != "SKIP" or as_root)]
    if as_root and counts.get("SKIP"):
        print(f"{counts['SKIP']} cases skipped although run as root: a failure")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
