#!/usr/bin/env python3
"""Markdown table of bench/window.sh results: window_table.py RESULTS.jsonl

Per strategy: the measured fwd + bwd time of the slowest rank (one run each, the runs with and
without the window alternating), the busiest rank's point-to-point bytes (fwd + bwd), the work
imbalance, and the window's ratios to the full causal mask of the same strategy; then the ratios
to ring's bytes without a window, and the --check verdict against the reference (its kind)."""
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = [r for r in rows if r["kind"] == "run"]
strategies = []
for r in runs:
    if r["strategy"] not in strategies:
        strategies.append(r["strategy"])


def size(r):
    return r["window"]["size"]


def total_ms(r):
    return r["time_ms"]["fwd"] + r["time_ms"]["bwd"]


def check(r):
    return f"{r['check']} ({r['reference']})" if "check" in r else "-"


def p2p(r):
    return r["bytes"]["p2p_fwd"] + r["bytes"]["p2p_bwd"]


ring_full = next(r for r in runs if r["strategy"] == "ring" and size(r) == 0)
w = max(size(r) for r in runs)
print(f"seq {runs[0]['seq']}, P = {runs[0]['P']}, {runs[0]['heads']} heads of "
      f"{runs[0]['head_dim']}, causal; window {w} against none (load average before each run "
      f"{min(r['load_before'] for r in runs):.1f} to {max(r['load_before'] for r in runs):.1f})\n")
print("| strategy | window | fwd + bwd ms | p2p MB fwd / bwd | work imbalance | time vs no window "
      "| bytes fwd / fwd + bwd vs no window | fwd + bwd vs ring without window | check |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for s in strategies:
    full = next(r for r in runs if r["strategy"] == s and size(r) == 0)
    for r in [x for x in runs if x["strategy"] == s]:
        fwd, full_fwd = r["bytes"]["p2p_fwd"], full["bytes"]["p2p_fwd"]
        print(f"| {s} | {size(r) or 'none'} | {total_ms(r):.0f} | {fwd / 1e6:.1f} / "
              f"{r['bytes']['p2p_bwd'] / 1e6:.1f} | {r['work_imbalance']:.3f} | "
              f"{total_ms(r) / total_ms(full):.2f} | {fwd / full_fwd:.3f} / "
              f"{p2p(r) / p2p(full):.3f} | {p2p(r) / p2p(ring_full):.3f} | {check(r)} |")
