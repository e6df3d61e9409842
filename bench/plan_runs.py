#!/usr/bin/env python3
"""Run `wallfacer plan --json` for the shipped clusters and models at 64K and 128K tokens on 32
devices, and write one JSON line per run (command, commit, load, output) for bench/plan_tables.py.

Usage: bench/plan_runs.py [path/to/wallfacer] > docs/data/plan-32gpus.jsonl

Besides the shipped clusters it plans the two A100 clusters with one card of the same speed per
GPU instead of one per node; their cluster files are written to docs/data/plan/ (committed, so
every recorded command runs as it stands).
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
WF = sys.argv[1] if len(sys.argv) > 1 else "build/wallfacer"
CLUSTERS = ["a100-40gb-16x2-eth100", "a100-40gb-8x4-eth100", "h100-80gb-8x8-ib"]
NIC_PER_GPU = ["a100-40gb-16x2-eth100", "a100-40gb-8x4-eth100"]
MODELS = ["gpt-3b", "gpt-7b", "dit-1b"]
SEQS = ["64K", "128K"]


def nic_per_gpu_file(base):
    """The cluster `base` with one card per GPU (devices_per_nic = 1), under docs/data/plan/."""
    text = open(os.path.join(ROOT, f"configs/clusters/{base}.toml")).read()
    text, n = re.subn(r"devices_per_nic = \d+", "devices_per_nic = 1", text)
    if n != 1:
        sys.exit(f"plan_runs.py: configs/clusters/{base}.toml has no devices_per_nic line")
    path = f"docs/data/plan/{base}+nic-per-gpu.toml"
    os.makedirs(os.path.join(ROOT, "docs/data/plan"), exist_ok=True)
    with open(os.path.join(ROOT, path), "w") as f:
        f.write(f"# {base} with one card per GPU (written by bench/plan_runs.py)\n" + text)
    return path


def main():
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    runs = [(c, f"configs/clusters/{c}.toml") for c in CLUSTERS]
    runs += [(f"{c}+nic-per-gpu", nic_per_gpu_file(c)) for c in NIC_PER_GPU]
    for name, path in runs:
        for model in MODELS:
            for seq in SEQS:
                cmd = [WF, "plan", "--cluster", path, "--model", f"configs/models/{model}.toml",
                       "--seq", seq, "--gpus", "32", "--json"]
                out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout
                print(json.dumps({"command": " ".join(cmd), "commit": commit,
                                  "load": os.getloadavg()[0], "cluster": name, "model": model,
                                  "seq": seq, "output": json.loads(out)}, sort_keys=True),
                      flush=True)


if __name__ == "__main__":
    main()
