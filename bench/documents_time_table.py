#!/usr/bin/env python3
"""The table of packed documents in time (docs/documents.md, "Time"):

    documents_time_table.py RESULTS.jsonl

RESULTS.jsonl: bench/documents_time.sh's lines. Per strategy: the work imbalance and the time of
each round (the iteration: the slowest rank's forward + backward, median of the iterations)
without documents, with documents in the strategy's layout and in the balanced layout, and the
ratio of each case with documents to the same strategy without them in the same round."""
import json
import sys

from attn_times import measured_ms

rows = [json.loads(line) for line in open(sys.argv[1])]
rounds = sorted({r["round"] for r in rows})


def label(r):
    return f"WallFacer C={r['C']}" if r["strategy"] == "wallfacer" else r["strategy"]


def case(r):
    if r["docs"]["count"] <= 1:
        return "none"
    return "balanced" if r["layout"] == "balanced" else "strategy"


cell = {}
labels = []
for r in rows:
    if label(r) not in labels:
        labels.append(label(r))
    cell[(label(r), case(r), r["round"])] = r


def times(s, c):
    return " / ".join(f"{measured_ms(cell[(s, c, k)]):.0f}" for k in rounds)


def ratios(s, c):
    return " / ".join(f"{measured_ms(cell[(s, c, k)]) / measured_ms(cell[(s, 'none', k)]):.2f}"
                      for k in rounds)


print("| strategy | no documents: imbalance | ms | documents, strategy layout: imbalance | ms | "
      "vs none | documents, balanced layout: imbalance | ms | vs none |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in labels:
    imb = {c: cell[(s, c, rounds[0])]["work_imbalance"] for c in ("none", "strategy", "balanced")}
    print(f"| {s} | {imb['none']:.3f} | {times(s, 'none')} | {imb['strategy']:.3f} | "
          f"{times(s, 'strategy')} | {ratios(s, 'strategy')} | {imb['balanced']:.3f} | "
          f"{times(s, 'balanced')} | {ratios(s, 'balanced')} |")
r0 = rows[0]
d = max((r["docs"] for r in rows), key=lambda x: x["count"])
loads = [float(r["loadavg"].split()[0]) for r in rows]
print(f"\n{r0['P']} ranks on {r0['cpus']} CPUs (one OpenMP thread each), seq {r0['seq']}, "
      f"{r0['heads']} heads of {r0['head_dim']}, causal; {d['count']} documents, the longest "
      f"{d['longest']}, {100 * d['kept']:.0f} % of the causal pairs kept. ms: the iteration (the "
      f"slowest rank's forward + backward), median of {r0['iters']}, per round (round 1 / round 2 "
      f"..., every case of a round in turn); load average (1 minute) {min(loads):.1f} to "
      f"{max(loads):.1f}; commit {r0['commit']}.")
