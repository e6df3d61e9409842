#!/usr/bin/env python3
"""Markdown table of the elastic launcher's measured restarts: elastic_table.py RESULTS.jsonl

RESULTS.jsonl: lines appended by tests/cluster/test_cluster_elastic.sh with
WALLFACER_ELASTIC_DATA=RESULTS.jsonl (one node of 4 x 2 ranks lost mid-run)."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| layout before -> after | steps | checkpoint every | fault at step | resumed at | steps trained again "
      "| fault to first step after restart | of it: probe | first resumed loss vs uninterrupted "
      "| largest later difference | load (1 min) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    x = r["restart"]
    o, n = x["old_layout"], x["new_layout"]
    print(f"| {o['ranks']} ranks on {o['hosts']} nodes (dp {o['dp']} x sp {o['sp']}) -> "
          f"{n['ranks']} on {n['hosts']} (dp {n['dp']} x sp {n['sp']}) | {r['steps']} | {r['ckpt_every']} | "
          f"{x['last_step']} | {x['resumed_step']} | {x['steps_lost']} | "
          f"{r['fault_to_first_step_s']:.1f} s | {x['probe_s']:.1f} s (limit {r.get('probe_timeout', 5):g} s) | "
          f"{r['first_resumed_rel_diff']:.1e} | {r['max_rel_diff']:.1e} | {r['load'].split()[0]} |")
