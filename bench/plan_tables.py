#!/usr/bin/env python3
"""Markdown tables of `wallfacer plan` predictions: ring, zigzag, WallFacer-2, WallFacer-4 and the
best configuration for the shipped clusters and models at 64K and 128K tokens on 32 devices.

Usage: bench/plan_tables.py [path/to/wallfacer] [--nic-per-gpu] > table.md
(--nic-per-gpu: the A100 clusters with one 100 Gb/s card per GPU instead of one per node)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

WF = next((a for a in sys.argv[1:] if not a.startswith("--")), "build/wallfacer")
CLUSTERS = ["a100-40gb-16x2-eth100", "a100-40gb-8x4-eth100", "h100-80gb-8x8-ib"]
if "--nic-per-gpu" in sys.argv:
    sys.argv.remove("--nic-per-gpu")
    CLUSTERS = ["a100-40gb-16x2-eth100+nic-per-gpu", "a100-40gb-8x4-eth100+nic-per-gpu"]
MODELS = ["gpt-3b", "gpt-7b", "dit-1b"]
SEQS = ["64K", "128K"]


def cluster_path(cluster):
    if not cluster.endswith("+nic-per-gpu"):
        return f"configs/clusters/{cluster}.toml"
    # The same cluster with one card of the same speed per GPU instead of one per node.
    base = cluster.removesuffix("+nic-per-gpu")
    text = open(f"configs/clusters/{base}.toml").read()
    text = re.sub(r"devices_per_nic = \d+", "devices_per_nic = 1", text)
    fd, path = tempfile.mkstemp(suffix=".toml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def plan(cluster, model, seq):
    out = subprocess.run(
        [WF, "plan", "--cluster", cluster_path(cluster), "--model",
         f"configs/models/{model}.toml", "--seq", seq, "--gpus", "32", "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def best_of(configs, pred):
    ok = [c for c in configs if c["feasible"] and pred(c)]
    return max(ok, key=lambda c: c["tokens_per_s"]) if ok else None


def cell(c, ring):
    if c is None:
        return "—"
    s = f"{c['tokens_per_s']:,.0f}"
    if ring is not None and c is not ring:
        s += f" ({c['tokens_per_s'] / ring['tokens_per_s']:.2f}×)"
    return s


def mb(c):
    return "—" if c is None else f"{c['inter_node_bytes_per_layer'] / 1e6:,.0f}"


print("| cluster | model | seq | ring | zigzag | WallFacer-2 | WallFacer-4 | best (tokens/s) "
      "| inter-node MB/layer ring · W-2 · W-4 |")
print("|---|---|---|---|---|---|---|---|---|")
for cl in CLUSTERS:
    for m in MODELS:
        for seq in SEQS:
            j = plan(cl, m, seq)
            cs = j["configs"]
            ring = best_of(cs, lambda c: c["label"] == "ring")
            zig = best_of(cs, lambda c: c["label"] == "zigzag")
            w2 = best_of(cs, lambda c: c["strategy"] == "wallfacer" and c["teams"] == 2)
            w4 = best_of(cs, lambda c: c["strategy"] == "wallfacer" and c["teams"] == 4)
            best = j["best"]
            w2l = f" {w2['placement']}" if w2 else ""
            w4l = f" {w4['placement']}" if w4 else ""
            print(f"| {cl} | {m} | {seq} | {cell(ring, None)} | {cell(zig, ring)} | "
                  f"{cell(w2, ring)}{w2l} | {cell(w4, ring)}{w4l} | "
                  f"{best['label'] if best else '—'} ({cell(best, None)}) | "
                  f"{mb(ring)} · {mb(w2)} · {mb(w4)} |")
