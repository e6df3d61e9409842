#!/usr/bin/env python3
"""The planner's predictions on every shipped and emulated cluster file, to hold against a later
planner: every configuration's step time and bytes, per cluster, model, sequence and device count.

  python3 bench/plan_reference.py [--wallfacer BIN] > docs/data/plan-reference.jsonl
  python3 bench/plan_reference.py --check docs/data/plan-reference.jsonl [--tolerance 0.01]

--check reruns each row's command with this build and fails when any configuration's step time,
attention times or busiest-rank bytes differ by more than the tolerance (relative), or when the
configurations listed differ.
"""
import argparse
import glob
import json
import subprocess
import sys

# (cluster files, model, sequence lengths): the shipped clusters with the GPT-7B model, the emulated
# ones (two tiers, rails) with the model their runs used.
CASES = [
    (sorted(glob.glob("configs/clusters/*.toml")) + sorted(glob.glob("docs/data/plan/*.toml")),
     "configs/models/gpt-7b.toml", ["128K", "1M"]),
    (sorted(glob.glob("docs/data/cluster-*.toml")) + sorted(glob.glob("docs/data/rails/cluster-*.toml")),
     "docs/data/two-tier-model.toml", ["8192", "64K"]),
]
GPUS = [8, 16, 32, 64]
FIELDS = ["step_s", "attn_fwd_s", "attn_bwd_s", "grad_sync_s", "p2p_bytes_per_layer",
          "coll_bytes_per_layer", "inter_node_bytes_per_layer", "memory_gib"]


def devices(path):
    count = per = None
    section = None
    for line in open(path):
        line = line.split("#")[0].strip()
        if line.startswith("["):
            section = line
        elif section == "[nodes]" and "=" in line:
            k, v = (s.strip() for s in line.split("=", 1))
            if k == "count":
                count = int(v)
            elif k == "devices_per_node":
                per = int(v)
    return count * per


def commands(binary):
    for clusters, model, seqs in CASES:
        for cluster in clusters:
            n = devices(cluster)
            for gpus in sorted({g for g in GPUS if g <= n} | ({n} if n <= 64 else set())):
                for seq in seqs:
                    yield [binary, "plan", "--cluster", cluster, "--model", model, "--seq", seq,
                           "--gpus", str(gpus), "--json"]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wallfacer", default="build/wallfacer")
    ap.add_argument("--check")
    ap.add_argument("--tolerance", type=float, default=0.01)
    a = ap.parse_args()
    if not a.check:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        for cmd in commands(a.wallfacer):
            configs = run(cmd)["configs"]
            row = {"command": " ".join(["build/wallfacer"] + cmd[1:]), "commit": commit,
                   "configs": [{k: c.get(k) for k in ["label", "keep_kv", "feasible"] + FIELDS}
                               for c in configs]}
            print(json.dumps(row), flush=True)
        return 0
    worst, worst_at, bad = 0.0, "", 0
    for line in open(a.check):
        row = json.loads(line)
        cmd = [a.wallfacer] + row["command"].split()[1:]
        now = {(c["label"], c["keep_kv"]): c for c in run(cmd)["configs"]}
        then = {(c["label"], c["keep_kv"]): c for c in row["configs"]}
        if set(now) != set(then):
            print(f"{row['command']}: configurations differ: {sorted(set(now) ^ set(then))}")
            bad += 1
            continue
        for key, c in then.items():
            for f in FIELDS:
                x, y = c[f], now[key][f]
                d = abs(y - x) / abs(x) if x else abs(y)
                if d > worst:
                    worst, worst_at = d, f"{row['command']}: {key[0]} {f} {x} -> {y}"
                if d > a.tolerance:
                    bad += 1
    print(f"largest relative difference {worst:.3g} ({worst_at})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
