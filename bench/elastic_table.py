#!/usr/bin/env python3
"""Markdown table of the elastic launcher's measured restarts: elastic_table.py RESULTS.jsonl

RESULTS.jsonl: lines appended by tests/cluster/test_cluster_elastic.sh with
WALLFACER_ELASTIC_DATA=RESULTS.jsonl (one node of 4 x 2 ranks lost mid-run: killed, or frozen
with the test's third argument `freeze`)."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| node lost | layout before -> after | steps | checkpoint every | fault at step | resumed at | steps trained again "
      "| fault to the job's end | fault to first step after restart | of it: probe | first resumed loss vs uninterrupted "
      "| largest later difference | fault to the launcher's exit | load (1 min) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    x = r["restart"]
    o, n = x["old_layout"], x["new_layout"]
    fault_at = x["first_step_at"] - r["fault_to_first_step_s"]
    exit_s = f"{r['fault_to_exit_s']:.1f} s" if "fault_to_exit_s" in r else "-"
    lost = {"kill": "killed", "freeze": "frozen"}[r.get("fault", "kill")]
    print(f"| {lost} | {o['ranks']} ranks on {o['hosts']} nodes (dp {o['dp']} x sp {o['sp']}) -> "
          f"{n['ranks']} on {n['hosts']} (dp {n['dp']} x sp {n['sp']}) | {r['steps']} | {r['ckpt_every']} | "
          f"{x['last_step']} | {x['resumed_step']} | {x['steps_lost']} | "
          f"{x['failed_at'] - fault_at:.1f} s{' (ended by the launcher)' if x.get('ended_by_launcher') else ''} | "
          f"{r['fault_to_first_step_s']:.1f} s | {x['probe_s']:.1f} s (limit {r.get('probe_timeout', 5):g} s) | "
          f"{r['first_resumed_rel_diff']:.1e} | {r['max_rel_diff']:.1e} | {exit_s} | {r['load'].split()[0]} |")
