#!/usr/bin/env python3
"""Markdown tables of bench/rails.sh results: rails_table.py RESULTS.jsonl [CALIBRATED_DIR]

One table per cluster (N nodes x R ranks) and card count K: each configuration's measured time
(forward + backward, median of the iterations) and its speed against zigzag, the frozen planner's
prediction and its speed against zigzag's prediction, the prediction's error, and the busiest
card's bytes per iteration, sent and received, measured on the veths beside the schedule's count.
CALIBRATED_DIR (default docs/data/rails): where plan-NxR-kK.json lies; the planner's best is set
beside the fastest measured."""
import json
import os
import sys


def label(r):
    s = r["strategy"]
    kv = " keep-kv" if r.get("keep_kv") else ""
    if r["ulysses"] > 1:
        return f"ulysses{r['ulysses']} x {s} {r['placement']}"
    if s == "wallfacer":
        return f"wallfacer C={r['C']}{kv} {r['placement']}"
    return s


def total(t):
    return t["fwd"] + t["bwd"]


def busiest(per_node):
    return max(max(node) for node in per_node)


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    caldir = sys.argv[2] if len(sys.argv) > 2 else "docs/data/rails"
    groups = []
    for r in rows:
        key = (r["cluster"], r["cards_per_node"])
        if key not in groups:
            groups.append(key)
    for key in groups:
        rs = [r for r in rows if (r["cluster"], r["cards_per_node"]) == key]
        # The last run of each configuration counts (a rerun replaces an earlier one).
        last = {}
        for r in rs:
            last[r["config"]] = r
        rs = list(last.values())
        n, k = key[0].split("x")
        base = next((r for r in rs if r["config"] == "zigzag"), None)
        r0 = rs[0]
        cards = key[1]
        kind = "one card per node" if cards == 1 else f"{cards} cards per node"
        print(f"\n**{n} nodes x {k} ranks, {kind}** (P = {r0['P']}, {r0['rate']} per card each way; "
              f"seq {r0['seq']}, {r0['heads']} heads of {r0['head_dim']}, causal; "
              f"load {r0['load_before']}):\n")
        print("| configuration | measured ms | vs zigzag | predicted ms | predicted vs zigzag | error "
              "| busiest card MB sent / received per iter: measured | schedule | check |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rs:
            t, p = total(r["time_ms"]), total(r["predicted_ms"])
            vs = f"{total(base['time_ms']) / t:.2f}x" if base else "-"
            pvs = f"{total(base['predicted_ms']) / p:.2f}x" if base else "-"
            m = r["measured_card_bytes"]
            s = r["card_bytes"]
            print(f"| {label(r)} | {t:.0f} | {vs} | {p:.0f} | {pvs} | {100 * (p / t - 1):+.0f}% | "
                  f"{busiest(m['sent']) / 1e6:.1f} / {busiest(m['received']) / 1e6:.1f} | "
                  f"{busiest(s['sent']) / 1e6:.1f} / {busiest(s['received']) / 1e6:.1f} | "
                  f"{r.get('check') or '-'} |")
        fastest = min(rs, key=lambda r: total(r["time_ms"]))
        predicted = min(rs, key=lambda r: total(r["predicted_ms"]))
        line = (f"\nFastest measured: {label(fastest)}; fastest predicted among these: "
                f"{label(predicted)}.")
        plan_file = os.path.join(caldir, f"plan-{key[0]}-k{cards}.json")
        if os.path.exists(plan_file):
            best = json.load(open(plan_file))["best"]
            kv = " keep-kv" if best.get("keep_kv") else ""
            line += f" `plan`'s best: {best['label']}{kv}."
        print(line)


if __name__ == "__main__":
    main()
