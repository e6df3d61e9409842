#!/usr/bin/env python3
"""Appends benchmark results to a JSON-lines file under docs/data/, each with the context that
decides what the numbers mean: the command, the commit, the machine's load before the run, the
CPU (model, cores, the instruction-set flags that pick the kernels' code paths), OpenBLAS's core
type and what computes the kernels' fp32 products (`sgemm`: oneDNN's version and instruction set).

  bench/record.py OUT --run KIND [--round R] -- COMMAND...
      runs COMMAND (from the repository root) and appends every line of its stdout that is a JSON
      object; exits with COMMAND's status (and appends nothing) when it fails
  bench/record.py OUT --run KIND [--round R] --command TEXT --json OBJECT [--load LOAD]
      appends OBJECT (measured by TEXT, started at load average LOAD)

train_run() gives the training benchmarks (bench/documents_train.sh, bench/llama_sp.sh) the fields
of a `wallfacer train` run from its metrics.jsonl and its launcher's settings.

The OpenBLAS core and the sgemm are the result's own `blas_core` and `sgemm` where it has them, else
those `wallfacer bench kernel` reports (WALLFACER, default build/wallfacer).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# The flags that choose a code path in wallfacer, OpenBLAS, oneDNN or PyTorch.
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "amx_bf16", "amx_tile")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu():
    model, flags = "", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {"cpu": model, "cpus": os.cpu_count(), "cpu_flags": [x for x in FLAGS if x in flags]}


# Environment variables that change which code a run takes (kernels/isa.h, kernels/attention_bf16.h,
# OpenBLAS's and PyTorch's kernel choice), recorded when set.
SETTINGS = ("WALLFACER_CPU", "WALLFACER_BF16_PATH", "OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA",
            "ATEN_CPU_CAPABILITY")


def settings():
    return {k: os.environ[k] for k in SETTINGS if os.environ.get(k)}


def blas_core():
    """The `blas_core` and `sgemm` fields of `wallfacer bench kernel --json` ({} when it fails)."""
    wf = os.environ.get("WALLFACER", os.path.join(ROOT, "build", "wallfacer"))
    try:
        out = subprocess.run([wf, "bench", "kernel", "--seq", "64", "--heads", "1", "--dtype",
                              "fp32", "--iters", "1", "--json"], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=60).stdout
        first = json.loads(out.splitlines()[0])
        return {k: first[k] for k in ("blas_core", "sgemm") if k in first}
    except (OSError, IndexError, KeyError, ValueError, subprocess.TimeoutExpired):
        return {}


def train_run(metrics, seq, cpu, emulate, cards):
    """The fields of a training run of sequences of seq tokens: its steps, the tokens/s of the steps
    after the first (of the one step when it ran one), every step's seconds and loss; the core per
    rank cpu (0: no cap) with the scheduling period and the wait poll its ranks had (their
    environment's, as scripts/cpu-per-rank sets them); with emulate (NxR:RATE) the cluster and the
    bytes each node's card sent, from the counters file cards."""
    lines = [json.loads(line) for line in open(metrics)]
    timed = lines[1:] if len(lines) > 1 else lines
    row = {"steps": len(lines),
           "tokens_per_s": len(timed) * int(seq) / sum(x["step_s"] for x in timed),
           "step_s": [x["step_s"] for x in lines], "loss": [x["loss"] for x in lines],
           "cpu_per_rank": float(cpu)}
    if float(cpu) > 0:
        row["cpu_period_us"] = int(os.environ.get("WALLFACER_CPU_PERIOD_US", 10000))
        row["wait_poll_us"] = int(os.environ.get("WALLFACER_WAIT_POLL_US", 50))
    if emulate:
        row["cluster"] = emulate
        with open(cards) as f:
            row["card_bytes"] = json.load(f)["sent_bytes"]
    return row, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="JSON-lines file to append to")
    ap.add_argument("--run", required=True, help="what was run (a label the table script reads)")
    ap.add_argument("--round", type=int, help="round number, when runs alternate in rounds")
    ap.add_argument("--command", help="the command that measured --json")
    ap.add_argument("--json", help="a result measured elsewhere")
    ap.add_argument("--load", help="load average when --command started (default: now)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:split])
    cmd = argv[split + 1:]
    if bool(cmd) == bool(a.json):
        ap.error("give either -- COMMAND... or --command TEXT --json OBJECT")
    if cmd:
        load = loadavg()
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        if p.returncode != 0:
            print(f"record.py: {' '.join(cmd)} exited with {p.returncode}; nothing recorded",
                  file=sys.stderr)
            return p.returncode
        results = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        if not results:
            print(f"record.py: {' '.join(cmd)} printed no JSON line; nothing recorded",
                  file=sys.stderr)
            return 1
        command = " ".join(cmd)
    else:
        if not a.command:
            ap.error("--json needs --command")
        load, results, command = a.load or loadavg(), [json.loads(a.json)], a.command
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    context = {"run": a.run, "command": command, "commit": commit, "loadavg": load, **cpu()}
    env = settings()
    if env:
        context["env"] = env
    if a.round is not None:
        context["round"] = a.round
    core = None
    with open(a.out, "a") as f:
        for r in results:
            if "blas_core" not in r or "sgemm" not in r:
                core = blas_core() if core is None else core
                r.update({k: v for k, v in core.items() if k not in r})
            r.update(context)
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
