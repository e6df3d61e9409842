#!/usr/bin/env python3
"""Markdown tables of bench/two-tier.sh results: two_tier_table.py RESULTS.jsonl [DIR]

DIR: where plan-NxR.json (the planner's ranking) lies; its best is set beside the fastest measured."""
import os
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def label(r):
    s = r["strategy"]
    if r["ulysses"] > 1:
        s = f"ulysses{r['ulysses']} x {s} {r['placement']}"
    elif s == "wallfacer":
        s = f"wallfacer C={r['C']}{' keep-kv' if r.get('keep_kv') else ''} {r['placement']}"
    return s
clusters = []
for r in rows:
    if r["cluster"] not in clusters:
        clusters.append(r["cluster"])
for c in clusters:
    rs = [r for r in rows if r["cluster"] == c]
    n, k = c.split("x")
    base = next((r for r in rs if r["strategy"] == "zigzag" and r["ulysses"] == 1), rs[0])
    btot = base["time_ms"]["fwd"] + base["time_ms"]["bwd"]
    print(f"\n**{n} nodes x {k} ranks** (P = {rs[0]['P']}, cards {rs[0]['rate']}; "
          f"seq {rs[0]['seq']}, {rs[0]['heads']} heads of {rs[0]['head_dim']}"
          f"{', causal' if rs[0]['causal'] else ''}):\n")
    print("| configuration | fwd ms | bwd ms | exposed fwd / bwd ms | vs " + base["strategy"] +
          " | MB across nodes: cards / schedule | predicted ms | measured ms | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rs:
        t = r["time_ms"]["fwd"] + r["time_ms"]["bwd"]
        p = r["predicted_ms"]["fwd"] + r["predicted_ms"]["bwd"]
        sched = r["inter_node_bytes"]["fwd"] + r["inter_node_bytes"]["bwd"]
        print(f"| {label(r)} | {r['time_ms']['fwd']:.0f} | {r['time_ms']['bwd']:.0f} | "
              f"{r['exposed_comm_ms']['fwd']:.0f} / {r['exposed_comm_ms']['bwd']:.0f} | "
              f"{btot / t:.2f}x | {r['card_bytes_per_iter'] / 1e6:.2f} / {sched / 1e6:.2f} | "
              f"{p:.0f} | {t:.0f} | {100 * (p / t - 1):+.0f}% |")
    plan_file = os.path.join(sys.argv[2], f"plan-{c}.json") if len(sys.argv) > 2 else ""
    fastest = min(rs, key=lambda r: r["time_ms"]["fwd"] + r["time_ms"]["bwd"])
    line = f"\nFastest measured: {label(fastest)}."
    if plan_file and os.path.exists(plan_file):
        best = json.load(open(plan_file))["best"]
        kv = " keep-kv" if best.get("keep_kv") else ""
        name = best["label"].replace(f"C={best['teams']}", f"C={best['teams']}{kv}") if kv else best["label"]
        line += f" The planner's best: {name}."
    print(line)
