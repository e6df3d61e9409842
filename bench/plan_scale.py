#!/usr/bin/env python3
"""Time `wallfacer plan` of GPT-7B at 1M tokens on 64, 256, 1024 and 4096 H100s, by default
(ranks that do the same work simulated once) and with --exact (every rank), and write one JSON line
per run: command, commit, wall seconds, CPU seconds (user + system: on a loaded machine the
figure to compare), the peak memory of the runs so far, the load before and after, the CPU (model,
cores and instruction-set flags, as bench/record.py records them), the number of configurations
and the best (docs/planner.md, "Planning at scale").

Usage: bench/plan_scale.py [path/to/wallfacer] [--exact-up-to N] > docs/data/plan-scale.jsonl
       bench/plan_scale.py --table docs/data/plan-scale.jsonl    the table of docs/planner.md

--exact-up-to N: run --exact only up to N devices (default 1024: at 4096 it takes hours).
The cluster is docs/data/plan/h100-80gb-512x8-ib.toml: configs/clusters/h100-80gb-8x8-ib.toml
with 512 nodes.
"""
import json
import os
import resource
import subprocess
import sys
import time

import record

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CLUSTER = "docs/data/plan/h100-80gb-512x8-ib.toml"
MODEL = "configs/models/gpt-7b.toml"


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def table(path):
    """Per device count: the configurations, and the CPU seconds of --exact and of the default (the
    latest run of each), with the load at the default's start."""
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows[(r["gpus"], r["exact"])] = r
    print("| devices | configurations | `--exact` (CPU s) | default (CPU s) | default (wall s) | "
          "load at its start |")
    print("|---:|---:|---:|---:|---:|---:|")
    for gpus in sorted({g for g, _ in rows}):
        ex, de = rows.get((gpus, True)), rows.get((gpus, False))
        configs = (de or ex).get("configs", "-")
        print(f"| {gpus:,} | {configs} | {ex['cpu_s'] if ex else '-'} | "
              f"{de['cpu_s'] if de else '-'} | {de['wall_s'] if de else '-'} | "
              f"{de['load_before'] if de else '-'} |")
    commits = sorted({r["commit"] for r in rows.values()})
    cpus = sorted({f"{r['cpu']} ({r['cpus']} cores; {' '.join(r['cpu_flags'])})"
                   for r in rows.values() if "cpu" in r})
    on = f" on {'; '.join(cpus)}" if cpus else ""
    print(f"\nCommits {', '.join(commits)}{on}; CPU seconds are user + system of the `plan` "
          "process.")


def main():
    args = sys.argv[1:]
    if args[:1] == ["--table"]:
        return table(args[1])
    exact_up_to = 1024
    if "--exact-up-to" in args:
        i = args.index("--exact-up-to")
        exact_up_to = int(args[i + 1])
        del args[i:i + 2]
    wf = args[0] if args else "build/wallfacer"
    machine = record.cpu()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    for gpus in (64, 256, 1024, 4096):
        for exact in (False, True):
            if exact and gpus > exact_up_to:
                continue
            cmd = [wf, "plan", "--cluster", CLUSTER, "--model", MODEL, "--seq", "1M", "--gpus",
                   str(gpus), "--json"] + (["--exact"] if exact else [])
            before = load()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
            wall = time.monotonic() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            peak_kb = r1.ru_maxrss
            plan = json.loads(out.stdout)
            print(json.dumps({
                "command": " ".join(["wallfacer"] + cmd[1:]), "commit": commit, "gpus": gpus,
                "exact": exact, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                "peak_rss_kb_so_far": peak_kb,
                "load_before": before, "load_after": load(), **machine,
                "configs": len(plan["configs"]),
                "best": plan["best"]["label"] if plan["best"] else None,
                "best_tokens_per_s": plan["best"]["tokens_per_s"] if plan["best"] else None,
            }), flush=True)


if __name__ == "__main__":
    main()
