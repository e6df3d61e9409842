#!/usr/bin/env python3
"""Markdown tables of `wallfacer plan` predictions recorded by bench/plan_runs.py: ring, zigzag,
WallFacer-2, WallFacer-4 and the best configuration per cluster, model and sequence length.

Usage: bench/plan_tables.py FILE.jsonl [--nic-per-gpu]
(without --nic-per-gpu: the shipped clusters; with it: the A100 clusters with one card per GPU)
"""
import json
import sys


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


def main():
    args = [a for a in sys.argv[1:] if a != "--nic-per-gpu"]
    nic = "--nic-per-gpu" in sys.argv[1:]
    if len(args) != 1:
        sys.exit("usage: bench/plan_tables.py FILE.jsonl [--nic-per-gpu]")
    rows = [json.loads(l) for l in open(args[0]) if l.strip()]
    rows = [r for r in rows if r["cluster"].endswith("+nic-per-gpu") == nic]
    if not rows:
        sys.exit(f"plan_tables.py: no runs in {args[0]}")
    print("| cluster | model | seq | ring | zigzag | WallFacer-2 | WallFacer-4 | best (tokens/s) "
          "| inter-node MB/layer ring · W-2 · W-4 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        j = r["output"]
        cs = j["configs"]
        ring = best_of(cs, lambda c: c["label"] == "ring")
        zig = best_of(cs, lambda c: c["label"] == "zigzag")
        w2 = best_of(cs, lambda c: c["strategy"] == "wallfacer" and c["teams"] == 2)
        w4 = best_of(cs, lambda c: c["strategy"] == "wallfacer" and c["teams"] == 4)
        best = j["best"]
        w2l = f" {w2['placement']}" if w2 else ""
        w4l = f" {w4['placement']}" if w4 else ""
        print(f"| {r['cluster']} | {r['model']} | {r['seq']} | {cell(ring, None)} | "
              f"{cell(zig, ring)} | {cell(w2, ring)}{w2l} | {cell(w4, ring)}{w4l} | "
              f"{best['label'] if best else '—'} ({cell(best, None)}) | "
              f"{mb(ring)} · {mb(w2)} · {mb(w4)} |")


if __name__ == "__main__":
    main()
