#!/usr/bin/env python3
"""The two-node table of docs/trace.md from bench/trace_two_nodes.sh's JSON lines.

Usage: bench/trace_two_nodes_table.py FILE.jsonl
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/trace_two_nodes_table.py FILE.jsonl")
    runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    if not runs:
        sys.exit(f"trace_two_nodes_table.py: no runs in {sys.argv[1]}")
    print("| | forward ms (exposed) | backward ms (exposed) | bytes across the nodes per iteration |")
    print("|---|---|---|---|")
    for r in runs:
        o = r["output"]
        name = "WallFacer C=2" if o["strategy"] == "wallfacer" else o["strategy"]
        t, e, b = o["time_ms"], o["exposed_comm_ms"], o["inter_node_bytes"]
        print(f"| {name} | {t['fwd']:.0f} ({e['fwd']:.0f}) | {t['bwd']:.0f} ({e['bwd']:.0f}) | "
              f"{b['fwd'] / 1e6:.1f} MB + {b['bwd'] / 1e6:.1f} MB |")
    loads = [x for r in runs for x in r["load"]]
    iters = sorted({r["output"]["iters"] for r in runs})
    print()
    print(f"Medians of {', '.join(map(str, iters))} iterations; load average {min(loads):.0f} to "
          f"{max(loads):.0f} during the runs (other jobs shared the cores), so the times are "
          "rough; the bytes are the schedule's count (`inter_node_bytes`).")


if __name__ == "__main__":
    main()
