#!/usr/bin/env python3
"""The table of attention with documents and with a window on an emulated cluster:

    documents_cluster_table.py RESULTS.jsonl

RESULTS.jsonl: bench/documents_cluster_attn.sh's lines. Per strategy and case: forward + backward
time of the slowest rank, its ratio to the same strategy without documents or window, the work
imbalance, the busiest rank's point-to-point bytes (forward / backward) and the bytes the nodes'
cards sent (all nodes), with their ratio to the run without documents or window."""
import json
import sys

from attn_times import measured_ms

rows = [json.loads(line) for line in open(sys.argv[1])]
labels = {"none": "causal", "docs": "causal, documents, strategy layout",
          "docs-balanced": "causal, documents, balanced layout", "window": "causal, window"}


def ms(r):
    return measured_ms(r)


def cards(r):
    return sum(r["card_sent_bytes"])


print("| strategy | mask | kept pairs | fwd + bwd ms | time vs causal | work imbalance | "
      "p2p MB fwd / bwd | MB through the cards | cards vs causal |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    base = next(b for b in rows if b["config"] == r["config"] and b["case"] == "none")
    kept = r["window"]["kept"] if r["case"] == "window" else r["docs"]["kept"]
    mask = labels[r["case"]] + (f" {r['window']['size']}" if r["case"] == "window" else "")
    print(f"| {r['config']} | {mask} | {kept:.3f} | {ms(r):.0f} | {ms(r) / ms(base):.2f} | "
          f"{r['work_imbalance']:.3f} | {r['bytes']['p2p_fwd'] / 1e6:.1f} / "
          f"{r['bytes']['p2p_bwd'] / 1e6:.1f} | {cards(r) / 1e6:.1f} | {cards(r) / cards(base):.2f} |")
r0 = rows[0]
loads = [float(r[x].split()[0]) for r in rows for x in ("load_before", "load_after")]
shape, rate = r0["cluster"].split(":")
nodes, ranks = shape.split("x")
print(f"\n{nodes} emulated nodes x {ranks} ranks, cards of {rate}, each rank capped at "
      f"{r0['cpu_per_rank']:g} of a core; seq {r0['seq']}, {r0['heads']} heads of "
      f"{r0['head_dim']}, {r0['docs']['count'] if r0['case'] != 'none' else rows[1]['docs']['count']} "
      f"random documents; one run each; load average (1 minute) {min(loads):.1f} to "
      f"{max(loads):.1f}.")
