#!/usr/bin/env python3
"""The table of packed-document training, balanced layout against the strategy's:

    documents_train_table.py RESULTS.jsonl [--per-step]

RESULTS.jsonl: bench/documents_train.sh's lines. Per configuration: tokens/s of each layout (the
mean over rounds of each run's tokens/s after its first step), their ratio, and the per-step
balanced / strategy of each round, and the per-step work_imbalance of each layout (mean and
largest over the steps of every round). --per-step: each step's seconds in both layouts (mean over
the rounds) beside the strategy layout's work_imbalance of that step."""
import json
import sys

per_step = "--per-step" in sys.argv[1:]
rows = [json.loads(line) for line in open([a for a in sys.argv[1:] if a != "--per-step"][0])]
configs = []
for r in rows:
    if r["config"] not in configs:
        configs.append(r["config"])


def label(c):
    return f"WallFacer-{c[len('wallfacer'):]}" if c.startswith("wallfacer") else c


rounds = sorted({r["round"] for r in rows})


def tokens(c, layout, rnd):
    return next(r["tokens_per_s"] for r in rows
                if r["config"] == c and r["layout"] == layout and r["round"] == rnd)


if per_step:
    # Each step's seconds, mean over the rounds, in both layouts (the same windows: the same
    # documents at every step of every round), and the strategy layout's work_imbalance.
    print("| strategy | step | work_imbalance strategy layout | s balanced | s strategy | "
          "strategy / balanced |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in configs:
        b = [r for r in rows if r["config"] == c and r["layout"] == "balanced"]
        st = [r for r in rows if r["config"] == c and r["layout"] == "strategy"]
        for k in range(len(b[0]["step_s"])):
            tb = sum(r["step_s"][k] for r in b) / len(b)
            ts = sum(r["step_s"][k] for r in st) / len(st)
            print(f"| {label(c)} | {k + 1} | {st[0]['work_imbalance'][k]:.3f} | {tb:.2f} | {ts:.2f} | "
                  f"{ts / tb:.2f} |")
    sys.exit(0)

print("| strategy | tokens/s balanced | tokens/s strategy | balanced / strategy | per round | "
      "work_imbalance balanced (mean, max) | work_imbalance strategy (mean, max) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for c in configs:
    cell = {}
    for layout in ("balanced", "strategy"):
        rs = [r for r in rows if r["config"] == c and r["layout"] == layout]
        tok = sum(r["tokens_per_s"] for r in rs) / len(rs)
        imb = [x for r in rs for x in r["work_imbalance"]]
        cell[layout] = (tok, sum(imb) / len(imb), max(imb))
    b, s = cell["balanced"], cell["strategy"]
    per = " / ".join(f"{tokens(c, 'balanced', k) / tokens(c, 'strategy', k):.2f}" for k in rounds)
    print(f"| {label(c)} | {b[0]:,.0f} | {s[0]:,.0f} | {b[0] / s[0]:.2f}x | {per} | "
          f"{b[1]:.3f}, {b[2]:.3f} | {s[1]:.3f}, {s[2]:.3f} |")
r0 = rows[0]
cap = (f", each rank capped at {r0['cpu_per_rank']:g} of a core (--cpu-per-rank)"
       if r0.get("cpu_per_rank") else "")
if "wait_poll_us" in r0:
    cap += (f", waiting ranks test their transfers every {r0['wait_poll_us']} us and sleep"
            if r0["wait_poll_us"] else ", waiting ranks spin (WALLFACER_WAIT_POLL_US=0)")
if r0.get("cluster"):
    nodes, rate = r0["cluster"].split(":")
    cap += f", on {nodes} emulated nodes with cards of {rate}"
mix = {"few-long": "corpus mix few-long (6 documents of the sequence, 600 of 16 to 1024 bytes)",
       "lognormal": "corpus mix lognormal (600 documents, median seq / 32, sigma 2)"}[
           r0.get("mix", "few-long")]
print(f"\n{r0['ranks']} ranks, seq {r0['seq']}, {mix}, {r0['steps']} steps per run, "
      f"{len(rounds)} rounds, "
      f"{r0['cpus']} CPUs{cap}; load average (1 minute) per round:")
for k in rounds:
    loads = [float(r[x].split()[0]) for r in rows if r["round"] == k
             for x in ("load_before", "load_after")]
    print(f"round {k}: {min(loads):.1f} to {max(loads):.1f}" + ("." if k == rounds[-1] else ";"))
