#!/usr/bin/env python3
"""Markdown tables of bench/two-tier.sh results: two_tier_table.py RESULTS.jsonl [DIR | PLANS.jsonl]

DIR: where plan-NxR.json (the planner's ranking) lies; PLANS.jsonl: the same as JSON lines
{"cluster": "NxR", "plan": ...} (docs/data/two-tier-plans.jsonl). The planner's best is set beside
the fastest measured."""
import os
import json, sys
from attn_times import measured_ms
runs = [json.loads(l) for l in open(sys.argv[1])]
def label(r):
    s = r["strategy"]
    if r["ulysses"] > 1:
        s = f"ulysses{r['ulysses']} x {s} {r['placement']}"
    elif s == "wallfacer":
        s = f"wallfacer C={r['C']}{' keep-kv' if r.get('keep_kv') else ''} {r['placement']}"
    return s
# The last run of each configuration of a cluster (bench/two-tier.sh --configs measures some again),
# in the order of their first runs; the commit of the full run is the first line's.
first_commit = runs[0]["commit"]
rows = []
for r in runs:
    same = [i for i, x in enumerate(rows) if x["cluster"] == r["cluster"] and label(x) == label(r)]
    if same:
        rows[same[0]] = r
    else:
        rows.append(r)
plans = {}
if len(sys.argv) > 2 and sys.argv[2].endswith(".jsonl"):
    plans = {p["cluster"]: p["plan"] for p in map(json.loads, open(sys.argv[2]))}
elif len(sys.argv) > 2:
    for c in {r["cluster"] for r in rows}:
        f = os.path.join(sys.argv[2], f"plan-{c}.json")
        if os.path.exists(f):
            plans[c] = json.load(open(f))
clusters = []
for r in rows:
    if r["cluster"] not in clusters:
        clusters.append(r["cluster"])
for c in clusters:
    rs = [r for r in rows if r["cluster"] == c]
    n, k = c.split("x")
    base = next((r for r in rs if r["strategy"] == "zigzag" and r["ulysses"] == 1), rs[0])
    btot = measured_ms(base)
    print(f"\n**{n} nodes x {k} ranks** (P = {rs[0]['P']}, cards {rs[0]['rate']}; "
          f"seq {rs[0]['seq']}, {rs[0]['heads']} heads of {rs[0]['head_dim']}"
          f"{', causal' if rs[0]['causal'] else ''}):\n")
    print("| configuration | fwd ms | bwd ms | exposed fwd / bwd ms | vs " + base["strategy"] +
          " | MB across nodes: cards / schedule | predicted ms | measured ms | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rs:
        t = measured_ms(r)
        p = r["predicted_ms"]["fwd"] + r["predicted_ms"]["bwd"]
        sched = r["inter_node_bytes"]["fwd"] + r["inter_node_bytes"]["bwd"]
        again = "" if r["commit"] == first_commit else f" (commit {r['commit']})"
        print(f"| {label(r)}{again} | {r['time_ms']['fwd']:.0f} | {r['time_ms']['bwd']:.0f} | "
              f"{r['exposed_comm_ms']['fwd']:.0f} / {r['exposed_comm_ms']['bwd']:.0f} | "
              f"{btot / t:.2f}x | {r['card_bytes_per_iter'] / 1e6:.2f} / {sched / 1e6:.2f} | "
              f"{p:.0f} | {t:.0f} | {100 * (p / t - 1):+.0f}% |")
    fastest = min(rs, key=measured_ms)
    line = f"\nFastest measured: {label(fastest)}."
    if c in plans:
        plan = plans[c]
        def name(b):
            kv = " keep-kv" if b.get("keep_kv") else ""
            return b["label"].replace(f"C={b['teams']}", f"C={b['teams']}{kv}") if kv else b["label"]
        best = plan["best"]
        ties = [name(c) for c in plan["configs"] if c["feasible"] and c is not best and
                c["label"] != best["label"] and c["tokens_per_s"] >= 0.995 * best["tokens_per_s"]]
        line += f" The planner's best: {name(best)}"
        line += f" (predicted equal: {', '.join(ties)})." if ties else "."
    print(line)
errors = []
for r in rows:
    t = measured_ms(r)
    errors.append(100 * ((r["predicted_ms"]["fwd"] + r["predicted_ms"]["bwd"]) / t - 1))
inside = [e for e in errors if abs(e) <= 25]
print(f"\nPredicted against measured: {len(inside)} of {len(errors)} configurations within ±25% "
      f"({min(inside):+.1f}% to {max(inside):+.1f}%), all of them {min(errors):+.1f}% to "
      f"{max(errors):+.1f}%.".replace("-", "−"))
